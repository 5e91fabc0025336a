package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/gotrain/gotrain/internal/jsonpos"
)

// fileJSON is the top level of tokenizer.json.
type fileJSON struct {
	Version       *string          `json:"version"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
	// truncation and padding are not read: Encode never truncates or pads.
}

type addedTokenJSON struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type bpeJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int64 `json:"vocab"`
	Merges                  []mergeJSON      `json:"merges"`
}

// mergeJSON is one merge in either form tokenizers writes: "a b" (before 0.20) or
// ["a", "b"].
type mergeJSON struct {
	a, b string
	err  string
}

func (m *mergeJSON) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		parts := strings.Split(s, " ")
		if len(parts) != 2 {
			m.err = fmt.Sprintf("%q is not two tokens separated by one space", s)
			return nil
		}
		m.a, m.b = parts[0], parts[1]
		return nil
	}
	var pair []string
	if err := json.Unmarshal(data, &pair); err != nil {
		m.err = fmt.Sprintf("%.60s is neither a string nor a pair of strings", data)
		return nil
	}
	if len(pair) != 2 {
		m.err = fmt.Sprintf("a list of %d strings, not a pair", len(pair))
		return nil
	}
	m.a, m.b = pair[0], pair[1]
	return nil
}

// typed reads the "type" of a component.
type typed struct {
	Type string `json:"type"`
}

// patternJSON is a Split or Replace pattern: {"String": ...} or {"Regex": ...}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// Parse builds a Tokenizer from the contents of a tokenizer.json file.
func Parse(data []byte) (*Tokenizer, error) {
	if err := checkUTF8JSON(data); err != nil {
		return nil, err
	}
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, jsonError(data, err)
	}
	if f.Version != nil && *f.Version != "1.0" {
		return nil, fmt.Errorf("tokenizer: unknown tokenizer.json version %q (tokenizers reads \"1.0\")", *f.Version)
	}
	t := &Tokenizer{bos: -1, eos: -1, pad: -1}
	var err error
	if t.model, err = parseModel(f.Model); err != nil {
		return nil, err
	}
	t.vocab, t.idTokens = t.model.tables()
	if t.normalizer, err = parseComponent(normalizers, f.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if t.pre, err = parseComponent(preTokenizers, f.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, err
	}
	if t.decoder, err = parseComponent(decoders, f.Decoder, "decoder"); err != nil {
		return nil, err
	}
	if err := t.addTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	if t.post, err = parseComponent(postProcessors, f.PostProcessor, "post_processor"); err != nil {
		return nil, err
	}
	t.trim = parseTrim(f.PostProcessor)
	t.guessSpecialIDs()
	return t, nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func unsupported(field, kind, name, supported string) error {
	return fmt.Errorf("tokenizer: %s: %s %q is %w (supported: %s)", field, kind, name, ErrUnsupported, supported)
}

func decodeField(raw json.RawMessage, field string, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("tokenizer: %s: %w", field, err)
	}
	return nil
}

const supportedModels = "BPE, Unigram, WordPiece"

func parseModel(raw json.RawMessage) (wordModel, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("tokenizer: the file has no model")
	}
	var ty struct {
		Type   *string         `json:"type"`
		Merges json.RawMessage `json:"merges"`
	}
	if err := decodeField(raw, "model", &ty); err != nil {
		return nil, err
	}
	switch {
	case ty.Type == nil && ty.Merges != nil:
		// Files from before the model had a "type" are BPE when they have merges.
	case ty.Type == nil:
		return nil, fmt.Errorf("tokenizer: model: no \"type\" (supported: %s)", supportedModels)
	case *ty.Type == "Unigram":
		return parseUnigram(raw)
	case *ty.Type == "WordPiece":
		return parseWordPiece(raw)
	case *ty.Type != "BPE":
		return nil, fmt.Errorf("tokenizer: model.type %q is %w (supported: %s)", *ty.Type, ErrUnsupported, supportedModels)
	}
	var j bpeJSON
	if err := decodeField(raw, "model", &j); err != nil {
		return nil, err
	}
	if j.Dropout != nil && *j.Dropout != 0 {
		return nil, fmt.Errorf("tokenizer: model.dropout is %v: BPE dropout makes encoding random, and is %w (it must be null)", *j.Dropout, ErrUnsupported)
	}
	m := &bpe{
		vocab:        make(map[string]int32, len(j.Vocab)),
		merges:       make(map[uint64]mergeTo, len(j.Merges)),
		unk:          -1,
		fuseUnk:      j.FuseUnk,
		byteFallback: j.ByteFallback,
		ignoreMerges: j.IgnoreMerges,
		cache:        newWordCache(),
	}
	if j.ContinuingSubwordPrefix != nil {
		m.prefix = *j.ContinuingSubwordPrefix
	}
	if j.EndOfWordSuffix != nil {
		m.suffix = *j.EndOfWordSuffix
	}
	for tok, id := range j.Vocab {
		if id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("tokenizer: model.vocab: token %q has id %d, outside [0, %d]", tok, id, math.MaxInt32)
		}
		m.vocab[tok] = int32(id)
	}
	m.idTokens = newIDTable(m.vocab)
	if j.UnkToken != nil {
		id, ok := m.vocab[*j.UnkToken]
		if !ok {
			return nil, fmt.Errorf("tokenizer: model.unk_token %q is not in model.vocab", *j.UnkToken)
		}
		m.unk = id
	}
	for b := range 256 {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	for rank, mg := range j.Merges {
		if mg.err != "" {
			return nil, fmt.Errorf("tokenizer: model.merges[%d]: %s", rank, mg.err)
		}
		a, ok := m.vocab[mg.a]
		if !ok {
			return nil, fmt.Errorf("tokenizer: model.merges[%d]: %q is not in model.vocab", rank, mg.a)
		}
		b, ok := m.vocab[mg.b]
		if !ok {
			return nil, fmt.Errorf("tokenizer: model.merges[%d]: %q is not in model.vocab", rank, mg.b)
		}
		// With a continuing_subword_prefix the right token carries it; the merged token
		// does not repeat it.
		right := mg.b
		if m.prefix != "" {
			if !strings.HasPrefix(right, m.prefix) {
				return nil, fmt.Errorf("tokenizer: model.merges[%d]: %q does not start with the continuing_subword_prefix %q", rank, right, m.prefix)
			}
			right = right[len(m.prefix):]
		}
		merged, ok := m.vocab[mg.a+right]
		if !ok {
			return nil, fmt.Errorf("tokenizer: model.merges[%d]: the merged token %q is not in model.vocab", rank, mg.a+right)
		}
		// A pair listed twice keeps its last rank, as tokenizers' map does.
		m.merges[pairKey(a, b)] = mergeTo{rank: int32(rank), id: merged}
	}
	return m, nil
}

// component is what parseComponent needs to know of one kind of tokenizer.json
// component (normalizer, pre_tokenizer, decoder, post_processor).
type component[T comparable] struct {
	// items is the key of a Sequence's list ("normalizers").
	items string
	// sequence combines a Sequence's components (in order, the null ones left out) into
	// one.
	sequence func([]T) T
	// parse builds a component of any other type, or says that the type is unsupported.
	parse func(raw json.RawMessage, field, typ string) (T, error)
}

// parseComponent reads a component of kind c at field: null is T's zero value, a
// Sequence is c.sequence of its items (each read by parseComponent at
// field.items[k]), anything else is c.parse's.
func parseComponent[T comparable](c component[T], raw json.RawMessage, field string) (T, error) {
	var none T
	if isNull(raw) {
		return none, nil
	}
	var ty typed
	if err := decodeField(raw, field, &ty); err != nil {
		return none, err
	}
	if ty.Type != "Sequence" {
		return c.parse(raw, field, ty.Type)
	}
	items, err := sequenceItems(raw, field, c.items)
	if err != nil {
		return none, err
	}
	var seq []T
	for k, r := range items {
		x, err := parseComponent(c, r, fmt.Sprintf("%s.%s[%d]", field, c.items, k))
		if err != nil {
			return none, err
		}
		if x != none {
			seq = append(seq, x)
		}
	}
	return c.sequence(seq), nil
}

// sequenceItems decodes the list under key as a struct with that one field would (the
// key matched as encoding/json matches it, the same errors).
func sequenceItems(raw json.RawMessage, field, key string) ([]json.RawMessage, error) {
	list := reflect.TypeFor[[]json.RawMessage]()
	v := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "Items", Type: list, Tag: reflect.StructTag(fmt.Sprintf("json:%q", key))}}))
	if err := decodeField(raw, field, v.Interface()); err != nil {
		return nil, err
	}
	return v.Elem().Field(0).Interface().([]json.RawMessage), nil
}

// The components of tokenizer.json.
var (
	normalizers    = component[normalizer]{"normalizers", func(s []normalizer) normalizer { return normSequence(s) }, newNormalizer}
	preTokenizers  = component[preTokenizer]{"pretokenizers", func(s []preTokenizer) preTokenizer { return preSequence(s) }, newPreTokenizer}
	decoders       = component[decoder]{"decoders", func(s []decoder) decoder { return decSequence(s) }, newDecoder}
	postProcessors = component[*template]{"processors", chainTemplates, newPostProcessor}
)

// parseReplace reads the pattern and content of a Replace normalizer or decoder.
func parseReplace(raw json.RawMessage, field string) (pattern, content string, err error) {
	var j struct {
		Pattern patternJSON `json:"pattern"`
		Content string      `json:"content"`
	}
	if err := decodeField(raw, field, &j); err != nil {
		return "", "", err
	}
	if pattern, err = literalPattern(j.Pattern, field); err != nil {
		return "", "", err
	}
	return pattern, j.Content, nil
}

const supportedNormalizers = "Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Strip, Lowercase, Precompiled, BertNormalizer"

// newNormalizer builds a normalizer of type typ other than Sequence.
func newNormalizer(raw json.RawMessage, field, typ string) (normalizer, error) {
	switch typ {
	case "Prepend":
		var j struct {
			Prepend string `json:"prepend"`
		}
		if err := decodeField(raw, field, &j); err != nil {
			return nil, err
		}
		return normPrepend{j.Prepend}, nil
	case "Replace":
		var j struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := decodeField(raw, field, &j); err == nil && j.Pattern.Regex != nil {
			re, err := compileRegex(*j.Pattern.Regex, field)
			if err != nil {
				return nil, err
			}
			return normRegexReplace{re, j.Content}, nil
		}
		pattern, content, err := parseReplace(raw, field)
		if err != nil {
			return nil, err
		}
		return normReplace{pattern, content}, nil
	case "Lowercase":
		return normLowercase{}, nil
	case "BertNormalizer":
		return parseBertNormalizer(raw, field)
	case "Precompiled":
		return parsePrecompiled(raw, field)
	case "NFC":
		return normUnicode{norm.NFC}, nil
	case "NFD":
		return normUnicode{norm.NFD}, nil
	case "NFKC":
		return normUnicode{norm.NFKC}, nil
	case "NFKD":
		return normUnicode{norm.NFKD}, nil
	case "Strip":
		var j struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := decodeField(raw, field, &j); err != nil {
			return nil, err
		}
		return normStrip{j.Left, j.Right}, nil
	}
	return nil, unsupported(field, "normalizer", typ, supportedNormalizers)
}

// literalPattern accepts a {"String": s} pattern (s non-empty).
func literalPattern(p patternJSON, field string) (string, error) {
	switch {
	case p.String != nil && *p.String != "":
		return *p.String, nil
	case p.String != nil:
		return "", fmt.Errorf("tokenizer: %s.pattern: an empty string pattern is %w", field, ErrUnsupported)
	case p.Regex != nil:
		return "", fmt.Errorf("tokenizer: %s.pattern: the regular expression %q is %w here (only a String pattern is)", field, *p.Regex, ErrUnsupported)
	}
	return "", fmt.Errorf("tokenizer: %s.pattern: neither String nor Regex", field)
}

const supportedPreTokenizers = "Sequence, ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, Digits, Punctuation, BertPreTokenizer"

// newPreTokenizer builds a pre-tokenizer of type typ other than Sequence.
func newPreTokenizer(raw json.RawMessage, field, typ string) (preTokenizer, error) {
	var err error
	switch typ {
	case "ByteLevel":
		j := struct {
			AddPrefixSpace bool `json:"add_prefix_space"`
			UseRegex       bool `json:"use_regex"`
		}{AddPrefixSpace: true, UseRegex: true}
		if err := decodeField(raw, field, &j); err != nil {
			return nil, err
		}
		return &preByteLevel{addPrefixSpace: j.AddPrefixSpace, useRegex: j.UseRegex}, nil
	case "Split":
		var j struct {
			Pattern  patternJSON `json:"pattern"`
			Behavior string      `json:"behavior"`
			Invert   bool        `json:"invert"`
		}
		if err := decodeField(raw, field, &j); err != nil {
			return nil, err
		}
		b, ok := splitBehaviors[j.Behavior]
		if !ok {
			return nil, fmt.Errorf("tokenizer: %s.behavior: unknown split behavior %q", field, j.Behavior)
		}
		s := &preSplit{behavior: b, invert: j.Invert}
		if j.Pattern.Regex != nil {
			if m, ok := knownRegexes[*j.Pattern.Regex]; ok {
				s.pattern.regex = m // a hand-written fast path
			} else if s.pattern.generic, err = compileRegex(*j.Pattern.Regex, field); err != nil {
				return nil, err
			}
		} else {
			lit, err := literalPattern(j.Pattern, field)
			if err != nil {
				return nil, err
			}
			s.pattern.literal = lit
		}
		return s, nil
	case "Whitespace":
		return newWhitespace(), nil
	case "WhitespaceSplit":
		return newWhitespaceSplit(), nil
	case "BertPreTokenizer":
		return newBertPreTokenizer(), nil
	case "Digits":
		var j struct {
			Individual bool `json:"individual_digits"`
		}
		if err := decodeField(raw, field, &j); err != nil {
			return nil, err
		}
		return newDigits(j.Individual), nil
	case "Punctuation":
		j := struct {
			Behavior string `json:"behavior"`
		}{Behavior: "Isolated"}
		if err := decodeField(raw, field, &j); err != nil {
			return nil, err
		}
		b, ok := splitBehaviors[j.Behavior]
		if !ok {
			return nil, fmt.Errorf("tokenizer: %s.behavior: unknown split behavior %q", field, j.Behavior)
		}
		return &preSplit{pattern: pattern{pred: isBertPunct}, behavior: b}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw, field)
		if err != nil {
			return nil, err
		}
		return &preMetaspace{repl: string(m.repl), scheme: m.scheme, split: m.split}, nil
	}
	return nil, unsupported(field, "pre-tokenizer", typ, supportedPreTokenizers)
}

type metaspaceConfig struct {
	repl   rune
	scheme prependScheme
	split  bool
}

// parseMetaspace reads Metaspace's fields as tokenizers does, including the files from
// before prepend_scheme (add_prefix_space).
func parseMetaspace(raw json.RawMessage, field string) (metaspaceConfig, error) {
	var j struct {
		Replacement    string  `json:"replacement"`
		AddPrefixSpace *bool   `json:"add_prefix_space"`
		PrependScheme  *string `json:"prepend_scheme"`
		Split          *bool   `json:"split"`
	}
	if err := decodeField(raw, field, &j); err != nil {
		return metaspaceConfig{}, err
	}
	r, n := utf8.DecodeRuneInString(j.Replacement)
	if n == 0 || n != len(j.Replacement) {
		return metaspaceConfig{}, fmt.Errorf("tokenizer: %s.replacement %q is not one character", field, j.Replacement)
	}
	c := metaspaceConfig{repl: r, scheme: prependAlways, split: true}
	if j.PrependScheme != nil {
		switch *j.PrependScheme {
		case "always":
		case "first":
			c.scheme = prependFirst
		case "never":
			c.scheme = prependNever
		default:
			return c, fmt.Errorf("tokenizer: %s.prepend_scheme: unknown value %q (always, first or never)", field, *j.PrependScheme)
		}
	}
	if j.AddPrefixSpace != nil && !*j.AddPrefixSpace {
		if j.PrependScheme != nil && c.scheme != prependNever {
			return c, fmt.Errorf("tokenizer: %s: add_prefix_space false does not match prepend_scheme %q", field, *j.PrependScheme)
		}
		c.scheme = prependNever
	}
	if j.Split != nil {
		c.split = *j.Split
	}
	return c, nil
}

const supportedDecoders = "Sequence, ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, WordPiece"

// newDecoder builds a decoder of type typ other than Sequence.
func newDecoder(raw json.RawMessage, field, typ string) (decoder, error) {
	switch typ {
	case "ByteLevel":
		return decByteLevel{}, nil
	case "ByteFallback":
		return decByteFallback{}, nil
	case "Fuse":
		return decFuse{}, nil
	case "WordPiece":
		j := struct {
			Prefix  string `json:"prefix"`
			Cleanup bool   `json:"cleanup"`
		}{Prefix: "##", Cleanup: true}
		if err := decodeField(raw, field, &j); err != nil {
			return nil, err
		}
		return decWordPiece{prefix: j.Prefix, cleanup: j.Cleanup}, nil
	case "Strip":
		var j struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := decodeField(raw, field, &j); err != nil {
			return nil, err
		}
		r, n := utf8.DecodeRuneInString(j.Content)
		if n == 0 || n != len(j.Content) || j.Start < 0 || j.Stop < 0 {
			return nil, fmt.Errorf("tokenizer: %s: Strip needs one content character and non-negative start and stop", field)
		}
		return decStrip{content: r, start: j.Start, stop: j.Stop}, nil
	case "Replace":
		pattern, content, err := parseReplace(raw, field)
		if err != nil {
			return nil, err
		}
		return decReplace{pattern, content}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw, field)
		if err != nil {
			return nil, err
		}
		return decMetaspace{repl: m.repl, scheme: m.scheme}, nil
	}
	return nil, unsupported(field, "decoder", typ, supportedDecoders)
}

// template is the single-sequence form of TemplateProcessing: special token ids before
// and after the text.
type template struct {
	prefix, suffix []int64
}

const supportedPostProcessors = "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence of those"

// chainTemplates is a Sequence of post-processors: each takes the previous one's output
// as its sequence.
func chainTemplates(s []*template) *template {
	var out *template
	for _, tp := range s {
		if out == nil {
			out = &template{}
		}
		out.prefix = append(slices.Clone(tp.prefix), out.prefix...)
		out.suffix = append(out.suffix, tp.suffix...)
	}
	return out
}

// newPostProcessor builds a post-processor of type typ other than Sequence.
func newPostProcessor(raw json.RawMessage, field, typ string) (*template, error) {
	switch typ {
	case "ByteLevel":
		// Trims offsets only; ids are untouched.
		return nil, nil
	case "TemplateProcessing":
		return parseTemplate(raw, field)
	case "BertProcessing", "RobertaProcessing":
		return parseClsSep(raw, field, typ)
	}
	return nil, unsupported(field, "post-processor", typ, supportedPostProcessors)
}

// parseClsSep reads BertProcessing or RobertaProcessing: cls before the text and sep
// after it, for a single sequence (the pair forms and the type ids, which Encode does not
// make, are not read). RobertaProcessing's trim_offsets is parseTrim's.
func parseClsSep(raw json.RawMessage, field, typ string) (*template, error) {
	var j struct {
		Sep *[2]json.RawMessage `json:"sep"`
		Cls *[2]json.RawMessage `json:"cls"`
	}
	if err := decodeField(raw, field, &j); err != nil {
		return nil, err
	}
	// tokenizers' defaults.
	sep, cls := int64(102), int64(101)
	if typ == "RobertaProcessing" {
		sep, cls = 2, 0
	}
	for _, x := range []struct {
		name string
		v    *[2]json.RawMessage
		id   *int64
	}{{"sep", j.Sep, &sep}, {"cls", j.Cls, &cls}} {
		if x.v == nil {
			continue
		}
		var tok string
		var id int64
		if json.Unmarshal(x.v[0], &tok) != nil || json.Unmarshal(x.v[1], &id) != nil || id < 0 || id > math.MaxInt32 {
			return nil, fmt.Errorf("tokenizer: %s.%s: not a [token, id] pair with an id in [0, %d]", field, x.name, math.MaxInt32)
		}
		*x.id = id
	}
	return &template{prefix: []int64{cls}, suffix: []int64{sep}}, nil
}

func parseTemplate(raw json.RawMessage, field string) (*template, error) {
	type pieceJSON struct {
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
	}
	var j struct {
		Single        []pieceJSON `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int64 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := decodeField(raw, field, &j); err != nil {
		return nil, err
	}
	tp := &template{}
	seen := 0
	for k, p := range j.Single {
		switch {
		case p.Sequence != nil:
			if p.Sequence.ID != "A" {
				return nil, fmt.Errorf("tokenizer: %s.single[%d]: sequence %q in a single-sequence template", field, k, p.Sequence.ID)
			}
			seen++
		case p.SpecialToken != nil:
			st, ok := j.SpecialTokens[p.SpecialToken.ID]
			if !ok {
				return nil, fmt.Errorf("tokenizer: %s.single[%d]: special token %q is not in special_tokens", field, k, p.SpecialToken.ID)
			}
			for _, id := range st.IDs {
				if id < 0 || id > math.MaxInt32 {
					return nil, fmt.Errorf("tokenizer: %s.special_tokens[%q]: id %d out of range", field, p.SpecialToken.ID, id)
				}
			}
			if seen == 0 {
				tp.prefix = append(tp.prefix, st.IDs...)
			} else {
				tp.suffix = append(tp.suffix, st.IDs...)
			}
		default:
			return nil, fmt.Errorf("tokenizer: %s.single[%d]: neither Sequence nor SpecialToken", field, k)
		}
	}
	if seen != 1 {
		return nil, fmt.Errorf("tokenizer: %s.single: a template with %d $A sequences is %w (it must have one)", field, seen, ErrUnsupported)
	}
	return tp, nil
}

// addTokens is tokenizers' AddedVocabulary::add_tokens as run when a file is loaded:
// the ids in the file are not used; a token's id is its id in the model's vocabulary,
// else the next one after the vocabulary (tokenizers warns when they differ).
func (t *Tokenizer) addTokens(list []addedTokenJSON) error {
	a := &t.added
	a.tokens = make(map[int64]AddedToken)
	a.byContent = make(map[string]int64)
	a.special = make(map[string]bool)
	a.decodeAs = make(map[int64]string)
	next := int64(len(t.vocab))
	for k, j := range list {
		if j.Content == "" {
			continue
		}
		if !utf8.ValidString(j.Content) {
			return fmt.Errorf("tokenizer: added_tokens[%d]: content is not valid UTF-8", k)
		}
		tok := AddedToken{
			Content: j.Content, Special: j.Special, LStrip: j.LStrip, RStrip: j.RStrip,
			SingleWord: j.SingleWord, Normalized: !j.Special,
		}
		if j.Normalized != nil {
			tok.Normalized = *j.Normalized
		}
		if id, ok := a.byContent[tok.Content]; ok {
			old := a.tokens[id]
			tok.ID = id
			if old == tok {
				continue
			}
		} else if id, ok := t.vocab[tok.Content]; ok {
			tok.ID = int64(id)
		} else {
			tok.ID = next
			next++
		}
		if tok.Normalized && t.normalizer != nil {
			s, err := normalizeContent(t.normalizer, tok.Content)
			if err != nil {
				return fmt.Errorf("tokenizer: added_tokens[%d]: normalizing its content: %w", k, err)
			}
			if s != tok.Content {
				a.decodeAs[tok.ID] = s
			}
		}
		a.byContent[tok.Content] = tok.ID
		if tok.Special {
			a.special[tok.Content] = true
		}
		a.tokens[tok.ID] = tok
	}
	overlap := 0
	for content := range a.byContent {
		if _, ok := t.vocab[content]; ok {
			overlap++
		}
	}
	t.vocabSize = len(t.vocab) + len(a.byContent) - overlap
	// The matchers, built in id order so that the one kept for two tokens with the same
	// text does not vary between runs.
	for _, tok := range t.AddedTokens() {
		pat := tok.Content
		tr := &a.raw
		if tok.Normalized {
			tr = &a.norm
			if s, ok := a.decodeAs[tok.ID]; ok {
				pat = s
			}
		}
		if pat == "" {
			continue
		}
		if *tr == nil {
			*tr = newTrie()
		}
		(*tr).insert(pat, tok.ID)
	}
	for _, tr := range []*trie{a.raw, a.norm} {
		if tr != nil {
			tr.build()
		}
	}
	return nil
}

// guessSpecialIDs finds BOS and EOS without tokenizer_config.json.
func (t *Tokenizer) guessSpecialIDs() {
	if t.post != nil && len(t.post.prefix) > 0 {
		t.bos = t.post.prefix[0]
	}
	find := func(names ...string) int64 {
		for _, n := range names {
			if id, ok := t.added.byContent[n]; ok && t.added.tokens[id].Special {
				return id
			}
		}
		return -1
	}
	if t.bos < 0 {
		t.bos = find("<s>", "<|begin_of_text|>", "<|startoftext|>", "<|endoftext|>")
	}
	t.eos = find("</s>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>")
}

// normalizeContent is an added token's content through the normalizer, within the
// normalizer's budget (a file whose normalizers grow a text without bound fails to load
// when an added token's content passes it, rather than growing it).
func normalizeContent(n normalizer, s string) (out string, err error) {
	defer catchBudget(&err)
	return normalizeWithin(n, s, normLimit(len(s))), nil
}

// checkUTF8JSON refuses what tokenizers' JSON reader (serde_json) refuses and Go's
// would turn into U+FFFD without a word: bytes that are not UTF-8, and a \u escape of
// a UTF-16 surrogate that is not half of a pair. An added token or a vocabulary entry
// spelled so would otherwise load as another string than the one its file names.
func checkUTF8JSON(data []byte) error {
	if !utf8.Valid(data) {
		i := 0
		for i < len(data) {
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		line, col := jsonpos.LineCol(data, int64(i))
		return fmt.Errorf("tokenizer: the file is not UTF-8 at line %d, column %d (tokenizers refuses it)", line, col)
	}
	hex4 := func(i int) (rune, bool) {
		if i+4 > len(data) {
			return 0, false
		}
		var v rune
		for _, c := range data[i : i+4] {
			switch {
			case c >= '0' && c <= '9':
				v = v<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				v = v<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				v = v<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return v, true
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' || i+1 >= len(data) {
			continue
		}
		if data[i+1] != 'u' {
			i++ // an escaped character: \\ included, so that \\u is not read as an escape
			continue
		}
		v, ok := hex4(i + 2)
		if !ok {
			continue // malformed: the JSON reader says so
		}
		switch {
		case v >= 0xD800 && v <= 0xDBFF:
			if i+12 <= len(data) && data[i+6] == '\\' && data[i+7] == 'u' {
				if w, ok := hex4(i + 8); ok && w >= 0xDC00 && w <= 0xDFFF {
					i += 11
					continue
				}
			}
			fallthrough
		case v >= 0xDC00 && v <= 0xDFFF:
			line, col := jsonpos.LineCol(data, int64(i))
			return fmt.Errorf("tokenizer: a lone UTF-16 surrogate \\u%04X at line %d, column %d: not a character (tokenizers refuses the file)", v, line, col)
		}
		i += 5
	}
	return nil
}
