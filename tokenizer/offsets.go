package tokenizer

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// EncodeOffsets is Encode that also returns, for each token, its byte range
// [start, end) in text, as tokenizers' encode with return_offsets_mapping (which counts
// characters where this counts bytes). The ids are Encode's.
//
// The ranges follow tokenizers' alignment rules. A token covers the original characters
// its normalized bytes came from: when the byte-level pre-tokenizer or byte fallback
// splits one character over several tokens, each of them has the whole character's
// range; text a normalizer inserts (Prepend's "▁", ByteLevel's prefix space) belongs to
// the character it was inserted before, and Replace's output to the text it replaced;
// an NFC composition belongs to its first original character. An added token covers the
// text it matched, the whitespace lstrip and rstrip took included. Tokens that have no
// text (the post-processor's BOS or EOS) are [0, 0). A ByteLevel post-processor with
// trim_offsets removes the spaces at a token's ends from its range, as tokenizers does.
// For text that is not valid UTF-8, the ranges of the U+FFFD that Encode substitutes
// cover the invalid bytes.
//
// EncodeOffsets is a separate and slower path than Encode (it tracks an alignment for
// every byte and bypasses the word cache); Encode is not slowed by it.
func (t *Tokenizer) EncodeOffsets(text string, addSpecialTokens bool) (ids []int64, offsets [][2]int) {
	e := offsetEncoder{t: t, trim: t.trim != nil}
	src := initialAlignment(text)
	if t.post != nil && addSpecialTokens {
		for _, id := range t.post.prefix {
			e.addSpecial(id)
		}
	}
	first := len(e.ids)
	e.encodeText(src)
	if t.trim != nil {
		t.trim.apply(e.offsets[first:], e.values[first:])
	}
	if t.post != nil && addSpecialTokens {
		for _, id := range t.post.suffix {
			e.addSpecial(id)
		}
	}
	return e.ids, e.offsets
}

// alignedText is a text with, for each of its bytes, the byte range of the original
// text it comes from: tokenizers' NormalizedString with its alignments (absolute here,
// so a slice needs no shift). All bytes of one character share a range.
type alignedText struct {
	text string
	al   [][2]int
}

func (a alignedText) slice(start, end int) alignedText {
	return alignedText{a.text[start:end], a.al[start:end]}
}

// original is the original range of the bytes [start, end) of a (non-empty), as
// tokenizers' convert_offsets: from the first byte's start to the last byte's end.
func (a alignedText) original(start, end int) [2]int {
	return [2]int{a.al[start][0], a.al[end-1][1]}
}

// initialAlignment aligns each character of text with itself; each maximal invalid
// UTF-8 subsequence becomes one U+FFFD (as Encode does) aligned with its bytes.
func initialAlignment(text string) alignedText {
	al := make([][2]int, 0, len(text))
	if utf8.ValidString(text) {
		for i, r := range text {
			n := utf8.RuneLen(r)
			for range n {
				al = append(al, [2]int{i, i + n})
			}
		}
		return alignedText{text, al}
	}
	var sb strings.Builder
	for i := 0; i < len(text); {
		if n := invalidLen(text, i); n > 0 {
			sb.WriteString("\uFFFD")
			for range 3 {
				al = append(al, [2]int{i, i + n})
			}
			i += n
			continue
		}
		_, n := utf8.DecodeRuneInString(text[i:])
		sb.WriteString(text[i : i+n])
		for range n {
			al = append(al, [2]int{i, i + n})
		}
		i += n
	}
	return alignedText{sb.String(), al}
}

// offsetEncoder collects the tokens of one EncodeOffsets call.
type offsetEncoder struct {
	t       *Tokenizer
	ids     []int64
	offsets [][2]int
	// values are the tokens' strings, kept only for trim_offsets: an added token's
	// matched text (its stripped whitespace included), else the vocabulary's string.
	values []string
	trim   bool
	pieces []alignedPiece
	sizes  []int
}

func (e *offsetEncoder) add(id int64, off [2]int, value string) {
	e.ids = append(e.ids, id)
	e.offsets = append(e.offsets, off)
	if e.trim {
		e.values = append(e.values, value)
	}
}

func (e *offsetEncoder) addSpecial(id int64) {
	v, _ := e.t.decodeToken(id)
	e.add(id, [2]int{0, 0}, v)
}

// encodeText is Tokenizer.encodeText with alignments.
func (e *offsetEncoder) encodeText(src alignedText) {
	t := e.t
	for _, seg := range t.added.split(nil, src.text, t.added.raw, true) {
		if seg.id >= 0 {
			e.add(seg.id, src.original(seg.start, seg.end), src.text[seg.start:seg.end])
			continue
		}
		s := src.slice(seg.start, seg.end)
		if t.normalizer != nil {
			s = normalizeAligned(t.normalizer, s, normLimit(len(s.text)))
		}
		for _, sub := range t.added.split(nil, s.text, t.added.norm, seg.atStart) {
			if sub.id >= 0 {
				e.add(sub.id, s.original(sub.start, sub.end), s.text[sub.start:sub.end])
				continue
			}
			p := alignedPiece{s.slice(sub.start, sub.end), sub.atStart}
			if t.pre == nil {
				e.word(p.alignedText)
				continue
			}
			e.pieces = preTokenizeAligned(t.pre, e.pieces[:0], p)
			for _, p := range e.pieces {
				e.word(p.alignedText)
			}
		}
	}
}

// word encodes one pre-tokenized word with the model. A token's range in the word is
// the sum of the lengths of the symbols before it, as tokenizers' Word::get_offsets:
// a character the model drops (unknown, no unk token) shifts the ranges after it, and
// byte-fallback symbols count in the order the model made them.
func (e *offsetEncoder) word(w alignedText) {
	m, ok := e.t.model.(*bpe)
	if !ok {
		for _, tk := range e.t.model.wordTokens(nil, w.text) {
			off := [2]int{0, 0}
			if tk.end > tk.start {
				off = w.original(tk.start, tk.end)
			}
			v := ""
			if e.trim {
				v, _ = e.t.idTokens.get(int64(tk.id))
			}
			e.add(int64(tk.id), off, v)
		}
		return
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[w.text]; ok {
			e.add(int64(id), w.original(0, len(w.text)), w.text)
			return
		}
	}
	sc := mergePool.Get().(*mergeScratch)
	m.mergeWord(sc, w.text)
	pos := 0
	for _, s := range sc.syms {
		if s.size == 0 {
			continue
		}
		end := min(pos+int(s.size), len(w.text))
		off := [2]int{0, 0}
		if end > pos {
			off = w.original(pos, end)
		}
		v := ""
		if e.trim {
			v, _ = m.idTokens.get(int64(s.id))
		}
		e.add(int64(s.id), off, v)
		pos += int(s.size)
	}
	putMergeScratch(sc)
}

// alignedPiece is a piece with its alignment.
type alignedPiece struct {
	alignedText
	atStart bool
}

// normalizeAligned is n.normalize with alignments, as tokenizers' NormalizedString
// operations track them. Each normalizer's output is held to limit bytes, as
// normalizeWithin holds it, before it is made.
func normalizeAligned(n normalizer, s alignedText, limit int) alignedText {
	if q, ok := n.(normSequence); ok {
		for _, x := range q {
			s = normalizeAligned(x, s, limit)
		}
		return s
	}
	checkNorm(n, s.text, limit)
	switch n := n.(type) {
	case normPrepend:
		return prependAligned(s, n.prefix)
	case normReplace:
		return replaceAligned(s, n.pattern, n.content)
	case normRegexReplace:
		return replaceSpansAligned(s, n.re.find(nil, s.text), n.content)
	case *normPrecompiled:
		ch, ok := n.changes(s.text)
		if !ok || s.text == "" {
			return s
		}
		return transformAligned(s, ch)
	case normLowercase:
		if s.text == "" {
			return s
		}
		return transformAligned(s, lowercaseChanges(s.text))
	case normUnicode:
		return unicodeAligned(s, n.form)
	case normBert:
		return n.normalizeAligned(s)
	case normStrip:
		start, end := 0, len(s.text)
		if n.left {
			start = len(s.text) - len(strings.TrimLeftFunc(s.text, unicode.IsSpace))
		}
		if n.right {
			end = len(strings.TrimRightFunc(s.text, unicode.IsSpace))
		}
		if start >= end {
			return alignedText{}
		}
		return s.slice(start, end)
	}
	panic("tokenizer: normalizeAligned: unknown normalizer") // parse builds only the above
}

// prependAligned is NormalizedString::prepend: the inserted text belongs to the first
// character. An empty text stays empty.
func prependAligned(s alignedText, prefix string) alignedText {
	if s.text == "" || prefix == "" {
		return s
	}
	al := make([][2]int, 0, len(prefix)+len(s.al))
	for range len(prefix) {
		al = append(al, s.al[0])
	}
	return alignedText{prefix + s.text, append(al, s.al...)}
}

// replaceAligned is NormalizedString::replace with a literal pattern: the content of
// each match belongs to the match's last character.
func replaceAligned(s alignedText, pattern, content string) alignedText {
	if !strings.Contains(s.text, pattern) {
		return s
	}
	var sb strings.Builder
	al := make([][2]int, 0, len(s.al))
	last := 0
	for {
		k := strings.Index(s.text[last:], pattern)
		if k < 0 {
			break
		}
		start := last + k
		end := start + len(pattern)
		sb.WriteString(s.text[last:start])
		al = append(al, s.al[last:start]...)
		sb.WriteString(content)
		for range len(content) {
			al = append(al, s.al[end-1])
		}
		last = end
	}
	sb.WriteString(s.text[last:])
	al = append(al, s.al[last:]...)
	return alignedText{sb.String(), al}
}

// replaceSpansAligned is replaceAligned for the matches of a regex.
func replaceSpansAligned(s alignedText, spans []span, content string) alignedText {
	var sb strings.Builder
	al := make([][2]int, 0, len(s.al))
	last := 0
	for _, sp := range spans {
		if !sp.match || sp.end == sp.start {
			continue
		}
		sb.WriteString(s.text[last:sp.start])
		al = append(al, s.al[last:sp.start]...)
		sb.WriteString(content)
		for range len(content) {
			al = append(al, s.al[sp.end-1])
		}
		last = sp.end
	}
	sb.WriteString(s.text[last:])
	al = append(al, s.al[last:]...)
	return alignedText{sb.String(), al}
}

// preTokenizeAligned is p.preTokenize with alignments.
func preTokenizeAligned(pt preTokenizer, dst []alignedPiece, p alignedPiece) []alignedPiece {
	switch pt := pt.(type) {
	case preSequence:
		cur := []alignedPiece{p}
		var next []alignedPiece
		for _, x := range pt {
			next = next[:0]
			for _, c := range cur {
				next = preTokenizeAligned(x, next, c)
			}
			cur, next = next, cur
		}
		return append(dst, cur...)
	case *preSplit:
		spans := pt.pattern.find(nil, p.text)
		if pt.invert {
			for k := range spans {
				spans[k].match = !spans[k].match
			}
		}
		return splitAligned(dst, p, spans, pt.behavior)
	case *preByteLevel:
		if pt.addPrefixSpace && !strings.HasPrefix(p.text, " ") {
			p.alignedText = prependAligned(p.alignedText, " ")
		}
		start := len(dst)
		if pt.useRegex {
			dst = splitAligned(dst, p, gpt2Split.find(nil, p.text), splitIsolated)
		} else if p.text != "" {
			dst = append(dst, p)
		}
		for k := start; k < len(dst); k++ {
			dst[k].alignedText = byteLevelAligned(dst[k].alignedText)
		}
		return dst
	case *preMetaspace:
		p.alignedText = replaceAligned(p.alignedText, " ", pt.repl)
		if !strings.HasPrefix(p.text, pt.repl) &&
			(pt.scheme == prependAlways || (pt.scheme == prependFirst && p.atStart)) {
			p.alignedText = prependAligned(p.alignedText, pt.repl)
		}
		if !pt.split {
			if p.text == "" {
				return dst
			}
			return append(dst, p)
		}
		pat := pattern{literal: pt.repl}
		return splitAligned(dst, p, pat.find(nil, p.text), splitMergedWithNext)
	}
	panic("tokenizer: preTokenizeAligned: unknown pre-tokenizer") // parse builds only the above
}

// splitAligned is splitSpans with alignments.
func splitAligned(dst []alignedPiece, p alignedPiece, spans []span, b splitBehavior) []alignedPiece {
	for _, sp := range applyBehavior(spans, b) {
		if sp.end > sp.start {
			dst = append(dst, alignedPiece{p.slice(sp.start, sp.end), p.atStart && sp.start == 0})
		}
	}
	return dst
}

// byteLevelAligned maps each byte to its byte-level character, which belongs to the
// byte's character: every token of a character split over several has its range.
func byteLevelAligned(s alignedText) alignedText {
	al := make([][2]int, 0, 2*len(s.text))
	for i := 0; i < len(s.text); i++ {
		for range len(byteLevelStrings[s.text[i]]) {
			al = append(al, s.al[i])
		}
	}
	return alignedText{byteLevelMap(s.text), al}
}

// change is one character of a transformation and what it does to the original, as
// tokenizers' transform takes them: 0 replaces the next character, n > 0 is inserted
// (it belongs to the character before it), n < 0 replaces the next character and
// removes the -n after it.
type change struct {
	r rune
	n int
}

// transformAligned is NormalizedString::transform over the whole text.
func transformAligned(s alignedText, changes []change) alignedText {
	var sb strings.Builder
	al := make([][2]int, 0, len(s.al))
	off := 0
	for _, c := range changes {
		var a [2]int
		switch {
		case c.n > 0 && off < 1:
			a = [2]int{s.al[0][0], s.al[0][0]}
		case c.n > 0:
			a = s.al[off-1]
		default:
			a = s.al[min(off, len(s.al)-1)]
			_, size := utf8.DecodeRuneInString(s.text[min(off, len(s.text)):])
			off += size
			for k := 0; k < -c.n && off < len(s.text); k++ {
				_, size := utf8.DecodeRuneInString(s.text[off:])
				off += size
			}
		}
		sb.WriteRune(c.r)
		for range utf8.RuneLen(c.r) {
			al = append(al, a)
		}
	}
	return alignedText{sb.String(), al}
}

// unicodeAligned is NFC, NFD, NFKC or NFKD with alignments, as the
// unicode-normalization-alignments crate that tokenizers uses describes each output
// character: decomposition emits a character's first part as a replacement and the rest
// as insertions, canonical reordering moves them with their marks, and composing two
// characters adds their changes less one.
func unicodeAligned(s alignedText, form norm.Form) alignedText {
	if isASCII(s.text) { // every form is the identity on ASCII
		return s
	}
	compat := form == norm.NFKC || form == norm.NFKD
	dec := norm.NFD
	if compat {
		dec = norm.NFKD
	}
	// Decompose, then sort each run of non-starters by combining class (stably).
	type item struct {
		change
		ccc uint8
	}
	var items []item
	sortRun := func(from int) {
		run := items[from:]
		for i := 1; i < len(run); i++ {
			for j := i; j > 0 && run[j-1].ccc > run[j].ccc; j-- {
				run[j-1], run[j] = run[j], run[j-1]
			}
		}
	}
	runStart := 0
	var buf []rune
	for _, r := range s.text {
		buf = decomposeRune(buf[:0], r, dec)
		for k, d := range buf {
			ccc := dec.PropertiesString(string(d)).CCC()
			if ccc == 0 {
				sortRun(runStart)
				runStart = len(items)
			}
			n := 1
			if k == 0 {
				n = 0
			}
			items = append(items, item{change{d, n}, ccc})
		}
	}
	sortRun(runStart)
	out := make([]change, 0, len(items))
	if form == norm.NFD || form == norm.NFKD {
		for _, it := range items {
			out = append(out, it.change)
		}
		return transformAligned(s, out)
	}
	// Recompose as the crate's Recompositions iterator does.
	var (
		composee    *change
		buffer      []change
		lastCCC     = -1
		purgeBuffer = func() {
			out = append(out, buffer...)
			buffer = buffer[:0]
		}
	)
	for _, it := range items {
		ch, cls := it.change, int(it.ccc)
		if composee == nil {
			if cls != 0 {
				out = append(out, ch)
				continue
			}
			c := ch
			composee = &c
			continue
		}
		k := *composee
		if lastCCC >= 0 && lastCCC >= cls {
			// ch is blocked from the composee.
			if cls == 0 {
				out = append(out, k)
				purgeBuffer()
				c := ch
				composee = &c
				lastCCC = -1
				continue
			}
			buffer = append(buffer, ch)
			lastCCC = cls
			continue
		}
		if r, ok := composePair(k.r, ch.r); ok {
			composee = &change{r, k.n + ch.n - 1}
			continue
		}
		if lastCCC < 0 && cls == 0 {
			out = append(out, k)
			c := ch
			composee = &c
			continue
		}
		buffer = append(buffer, ch)
		lastCCC = cls
	}
	if composee != nil {
		out = append(out, *composee)
	}
	purgeBuffer()
	return transformAligned(s, out)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
const (
	hangulS, hangulL, hangulV, hangulT = 0xAC00, 0x1100, 0x1161, 0x11A7
	hangulLCount, hangulVCount         = 19, 21
	hangulTCount                       = 28
	hangulNCount                       = hangulVCount * hangulTCount
	hangulSCount                       = hangulLCount * hangulNCount
)

// decomposeRune appends the full decomposition of r in form (NFD or NFKD).
func decomposeRune(dst []rune, r rune, form norm.Form) []rune {
	if r >= hangulS && r < hangulS+hangulSCount {
		si := r - hangulS
		dst = append(dst, hangulL+si/hangulNCount, hangulV+(si%hangulNCount)/hangulTCount)
		if t := si % hangulTCount; t != 0 {
			dst = append(dst, hangulT+t)
		}
		return dst
	}
	d := form.PropertiesString(string(r)).Decomposition()
	if d == nil {
		return append(dst, r)
	}
	for _, x := range string(d) {
		dst = append(dst, x)
	}
	return dst
}

// composePair is the primary composite of a and b, if any.
func composePair(a, b rune) (rune, bool) {
	if a >= hangulL && a < hangulL+hangulLCount && b >= hangulV && b < hangulV+hangulVCount {
		return hangulS + ((a-hangulL)*hangulVCount+(b-hangulV))*hangulTCount, true
	}
	if a >= hangulS && a < hangulS+hangulSCount && (a-hangulS)%hangulTCount == 0 &&
		b > hangulT && b < hangulT+hangulTCount {
		return a + (b - hangulT), true
	}
	c := norm.NFC.String(string([]rune{a, b}))
	r, n := utf8.DecodeRuneInString(c)
	if n != len(c) || r == a {
		return 0, false
	}
	return r, true
}

// byteLevelTrim is the ByteLevel or RobertaProcessing post-processor with trim_offsets.
type byteLevelTrim struct {
	addPrefixSpace bool
}

// apply is tokenizers' process_offsets: the spaces (Ġ or whitespace) that begin or end
// a token's string are taken off its range, except the one prefix space the
// pre-tokenizer added before the first token. tokenizers counts the spaces in
// characters and adds that count to a byte offset, which Python then reports as the
// next character boundary; this takes off each space's own length, which gives
// Python's numbers.
func (b *byteLevelTrim) apply(offsets [][2]int, values []string) {
	// spaceLen is a space's length in the text: Ġ stands for one byte.
	spaceLen := func(r rune) int {
		if r == byteLevelRunes[' '] {
			return 1
		}
		if unicode.IsSpace(r) {
			return utf8.RuneLen(r)
		}
		return 0
	}
	for i, v := range values {
		lead, leadLen, trail, trailLen := 0, 0, 0, 0
		for _, r := range v {
			n := spaceLen(r)
			if n == 0 {
				break
			}
			lead++
			leadLen += n
		}
		for k := len(v); k > 0; {
			r, size := utf8.DecodeLastRuneInString(v[:k])
			n := spaceLen(r)
			if n == 0 {
				break
			}
			trail++
			trailLen += n
			k -= size
		}
		off := &offsets[i]
		if lead > 0 {
			if (i == 0 || off[0] == 0) && b.addPrefixSpace && lead == 1 {
				leadLen = 0
			}
			off[0] = min(off[0]+leadLen, off[1])
		}
		if trail > 0 && off[1] >= trailLen {
			off[1] = max(off[1]-trailLen, off[0])
		}
	}
}

// parseTrim finds a ByteLevel or RobertaProcessing post-processor with trim_offsets in
// post_processor (or in its Sequence); ids do not depend on it, only offsets.
func parseTrim(raw json.RawMessage) *byteLevelTrim {
	if isNull(raw) {
		return nil
	}
	var j struct {
		Type           string            `json:"type"`
		TrimOffsets    *bool             `json:"trim_offsets"`
		AddPrefixSpace *bool             `json:"add_prefix_space"`
		Processors     []json.RawMessage `json:"processors"`
	}
	if json.Unmarshal(raw, &j) != nil {
		return nil
	}
	switch j.Type {
	case "Sequence":
		for _, p := range j.Processors {
			if tr := parseTrim(p); tr != nil {
				return tr
			}
		}
	case "ByteLevel", "RobertaProcessing":
		// tokenizers' defaults: trim_offsets and add_prefix_space true.
		if j.TrimOffsets == nil || *j.TrimOffsets {
			return &byteLevelTrim{addPrefixSpace: j.AddPrefixSpace == nil || *j.AddPrefixSpace}
		}
	}
	return nil
}
