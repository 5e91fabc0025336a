package tokenizer

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// unigram is the Unigram model (SentencePiece's): a word is split into the vocabulary
// pieces whose scores sum highest (Viterbi over the lattice of pieces), as tokenizers'
// Unigram::encode_optimized; a character no piece starts with is unknown, scored the
// lowest score less 10, and adjacent unknown characters fuse into one piece.
type unigram struct {
	vocab        map[string]int32
	idTokens     idTable
	scores       []float64
	unk          int32 // -1: none
	unkScore     float64
	byteFallback bool
	// sorted are the pieces in byte order and sortedIDs their ids: the pieces that
	// begin with a given string are a range of it, so the pieces that start at a
	// position of a word are found by narrowing the range a byte at a time (narrow),
	// which stops at the first byte no piece continues with, as tokenizers' trie does.
	// Looking up every length up to the longest piece would cost, for a file with one
	// long piece, its length squared at every position.
	sorted    []string
	sortedIDs []int32
	byteIDs   [256]int32
}

func parseUnigram(raw json.RawMessage) (*unigram, error) {
	var j struct {
		UnkID        *int64            `json:"unk_id"`
		Vocab        []json.RawMessage `json:"vocab"`
		ByteFallback bool              `json:"byte_fallback"`
	}
	if err := decodeField(raw, "model", &j); err != nil {
		return nil, err
	}
	m := &unigram{vocab: make(map[string]int32, len(j.Vocab)), unk: -1, byteFallback: j.ByteFallback}
	minScore := math.Inf(1)
	for k, r := range j.Vocab {
		var pair [2]json.RawMessage
		var tok string
		var score float64
		if err := json.Unmarshal(r, &pair); err != nil || json.Unmarshal(pair[0], &tok) != nil || json.Unmarshal(pair[1], &score) != nil {
			return nil, fmt.Errorf("tokenizer: model.vocab[%d]: not a [token, score] pair", k)
		}
		if k > math.MaxInt32 {
			return nil, fmt.Errorf("tokenizer: model.vocab: more than %d tokens", math.MaxInt32)
		}
		m.vocab[tok] = int32(k) // a token listed twice keeps its last id, as tokenizers'
		m.scores = append(m.scores, score)
		minScore = min(minScore, score)
	}
	m.unkScore = minScore - 10
	if j.UnkID != nil {
		if *j.UnkID < 0 || *j.UnkID >= int64(len(j.Vocab)) {
			return nil, fmt.Errorf("tokenizer: model.unk_id %d is outside the vocabulary of %d", *j.UnkID, len(j.Vocab))
		}
		m.unk = int32(*j.UnkID)
	}
	m.idTokens = newIDTable(m.vocab)
	m.sorted = make([]string, 0, len(m.vocab))
	for tok := range m.vocab {
		m.sorted = append(m.sorted, tok)
	}
	slices.Sort(m.sorted)
	m.sortedIDs = make([]int32, len(m.sorted))
	for k, tok := range m.sorted {
		m.sortedIDs[k] = m.vocab[tok]
	}
	for b := range 256 {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	return m, nil
}

func (m *unigram) tables() (map[string]int32, *idTable) { return m.vocab, &m.idTokens }

// pieces returns the ends of w's best pieces, in order, and whether each is unknown.
func (m *unigram) pieces(w string) (ends []int, unknown []bool) {
	type node struct {
		score float64
		start int // -1: not reached
		id    int32
	}
	best := make([]node, len(w)+1)
	for k := range best {
		best[k].start = -1
	}
	steps := 0
	defer func() { unigramWork.Add(int64(steps)) }()
	for i := 0; i < len(w); {
		_, mblen := utf8.DecodeRuneInString(w[i:])
		base := best[i].score
		single := false
		// Pieces starting at i, shortest first (the order of tokenizers' trie search,
		// which decides ties: a later candidate must score strictly higher).
		lo, hi := 0, len(m.sorted)
		for l := 1; i+l <= len(w) && lo < hi; l++ {
			lo, hi = narrow(m.sorted, lo, hi, l, w[i+l-1])
			steps++
			if lo == hi || len(m.sorted[lo]) != l {
				continue
			}
			id := m.sortedIDs[lo]
			t := &best[i+l]
			if c := base + m.scores[id]; t.start < 0 || c > t.score {
				*t = node{c, i, id}
			}
			if l == mblen {
				single = true
			}
		}
		if !single {
			t := &best[i+mblen]
			if c := base + m.unkScore; t.start < 0 || c > t.score {
				*t = node{c, i, m.unk}
			}
		}
		i += mblen
	}
	// Back from the end; unknown pieces fuse (tokenizers' Unigram always fuses).
	for e := len(w); e > 0; {
		n := best[e]
		unk := m.unk >= 0 && n.id == m.unk
		if unk && len(unknown) > 0 && unknown[len(unknown)-1] {
			// fuse with the unknown piece after it: keep that piece's end
		} else {
			ends = append(ends, e)
			unknown = append(unknown, unk)
		}
		e = n.start
	}
	for a, b := 0, len(ends)-1; a < b; a, b = a+1, b-1 {
		ends[a], ends[b] = ends[b], ends[a]
		unknown[a], unknown[b] = unknown[b], unknown[a]
	}
	return ends, unknown
}

// unigramWork counts the steps of narrow over all words (tests read it).
var unigramWork atomic.Int64

// narrow takes the range sorted[lo:hi] of the pieces that share their first l-1 bytes
// to the range of those whose byte l-1 is c (a piece of l-1 bytes, which sorts first,
// leaves it). The piece of exactly l bytes, if any, is then the range's first.
func narrow(sorted []string, lo, hi, l int, c byte) (int, int) {
	a, b := lo, hi
	for a < b {
		mid := int(uint(a+b) >> 1)
		if s := sorted[mid]; len(s) >= l && s[l-1] >= c {
			b = mid
		} else {
			a = mid + 1
		}
	}
	lo, b = a, hi
	for a < b {
		mid := int(uint(a+b) >> 1)
		if sorted[mid][l-1] > c {
			b = mid
		} else {
			a = mid + 1
		}
	}
	return lo, a
}

func (m *unigram) wordTokens(dst []wordToken, w string) []wordToken {
	ends, _ := m.pieces(w)
	start := 0
	for _, e := range ends {
		p := w[start:e]
		if id, ok := m.vocab[p]; ok {
			dst = append(dst, wordToken{id, start, e})
		} else if m.byteFallback && m.allBytes(p) {
			// Every byte token covers the whole piece, as tokenizers gives them.
			for k := 0; k < len(p); k++ {
				dst = append(dst, wordToken{m.byteIDs[p[k]], start, e})
			}
		} else if m.unk >= 0 {
			dst = append(dst, wordToken{m.unk, start, e})
		}
		// Without an unk tokenizers fails to encode; the piece is left out here.
		start = e
	}
	return dst
}

func (m *unigram) allBytes(p string) bool {
	for k := 0; k < len(p); k++ {
		if m.byteIDs[p[k]] < 0 {
			return false
		}
	}
	return true
}

func (m *unigram) encodeWord(dst []int64, w string) []int64 {
	for _, t := range m.wordTokens(nil, w) {
		dst = append(dst, int64(t.id))
	}
	return dst
}

// normPrecompiled is SentencePiece's normalization rules as tokenizer.json carries
// them (precompiled_charsmap): a double-array trie from strings to their normalized
// form, applied per grapheme cluster as tokenizers' Precompiled does: a cluster shorter
// than 6 bytes with a rule is replaced whole, otherwise each character with a rule is.
// A rule is the shortest key that prefixes the text (the trie's first result).
type normPrecompiled struct {
	units      []uint32
	normalized string
	longest    int // the longest replacement, in bytes (budget.go)
}

func parsePrecompiled(raw json.RawMessage, field string) (*normPrecompiled, error) {
	var j struct {
		Map *string `json:"precompiled_charsmap"`
	}
	if err := decodeField(raw, field, &j); err != nil {
		return nil, err
	}
	if j.Map == nil {
		return nil, fmt.Errorf("tokenizer: %s: Precompiled without precompiled_charsmap", field)
	}
	b, err := base64.StdEncoding.DecodeString(*j.Map)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s.precompiled_charsmap: %w", field, err)
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("tokenizer: %s.precompiled_charsmap: %d bytes, too short", field, len(b))
	}
	size := int(binary.LittleEndian.Uint32(b))
	if size%4 != 0 || size == 0 || size > len(b)-4 {
		return nil, fmt.Errorf("tokenizer: %s.precompiled_charsmap: trie size %d does not fit %d bytes", field, size, len(b))
	}
	p := &normPrecompiled{units: make([]uint32, size/4), normalized: string(b[4+size:])}
	for k := range p.units {
		p.units[k] = binary.LittleEndian.Uint32(b[4+4*k:])
	}
	if !utf8.ValidString(p.normalized) {
		return nil, fmt.Errorf("tokenizer: %s.precompiled_charsmap: the normalized strings are not UTF-8", field)
	}
	for _, r := range strings.Split(p.normalized, "\x00") {
		p.longest = max(p.longest, len(r))
	}
	return p, nil
}

// lookup returns the normalized form of the shortest key that prefixes s.
func (p *normPrecompiled) lookup(s string) (string, bool) {
	offset := func(u uint32) int { return int((u >> 10) << ((u & (1 << 9)) >> 6)) }
	pos := 0
	if len(p.units) == 0 {
		return "", false
	}
	pos ^= offset(p.units[0])
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 0 {
			break
		}
		pos ^= int(c)
		if pos >= len(p.units) {
			return "", false
		}
		u := p.units[pos]
		if u&((1<<31)|0xFF) != uint32(c) {
			return "", false
		}
		pos ^= offset(u)
		if pos >= len(p.units) {
			return "", false
		}
		if (u>>8)&1 == 1 {
			v := int(p.units[pos] & ((1 << 31) - 1))
			if v > len(p.normalized) {
				return "", false
			}
			end := v
			for end < len(p.normalized) && p.normalized[end] != 0 {
				end++
			}
			return p.normalized[v:end], true
		}
	}
	return "", false
}

// walk calls f for each part of s a rule may replace, in order, as tokenizers'
// Precompiled takes them: with the rule's replacement and found true, or the part
// itself unchanged and found false.
func (p *normPrecompiled) walk(s string, f func(part, repl string, found bool)) {
	state := -1
	for rest := s; rest != ""; {
		var g string
		g, rest, _, state = uniseg.FirstGraphemeClusterInString(rest, state)
		if len(g) < 6 {
			if repl, found := p.lookup(g); found {
				f(g, repl, true)
				continue
			}
		}
		for i, r := range g {
			part := g[i : i+utf8.RuneLen(r)]
			if repl, found := p.lookup(part); found {
				f(part, repl, true)
			} else {
				f(part, part, false)
			}
		}
	}
}

// changes are the normalization's edits as tokenizers' Precompiled makes them (the
// offsets follow them); ok is false when no rule applied.
func (p *normPrecompiled) changes(s string) (ch []change, ok bool) {
	p.walk(s, func(old, repl string, found bool) {
		if !found {
			r, _ := utf8.DecodeRuneInString(old)
			ch = append(ch, change{r, 0})
			return
		}
		ok = true
		diff := utf8.RuneCountInString(repl) - utf8.RuneCountInString(old)
		for _, r := range repl {
			ch = append(ch, change{r, 0})
		}
		switch {
		case diff > 0:
			for k := len(ch) - diff; k < len(ch); k++ {
				ch[k].n = 1
			}
		case diff < 0 && len(ch) > 0:
			ch[len(ch)-1].n += diff
		}
	})
	return ch, ok
}

func (p *normPrecompiled) normalize(s string) string {
	var sb strings.Builder
	changed := false
	p.walk(s, func(part, repl string, found bool) {
		changed = changed || found
		if sb.Len() == 0 {
			sb.Grow(len(s))
		}
		sb.WriteString(repl)
	})
	if !changed {
		return s
	}
	return sb.String()
}
