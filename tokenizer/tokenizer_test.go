package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// tinyFile is a small byte-level BPE tokenizer.json written by hand (GPT-2's layout):
// enough merges to build "hello", " world" and "lo".
func tinyFile(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	vocab := map[string]any{}
	for b := range 256 {
		vocab[string(byteLevelRunes[b])] = len(vocab)
	}
	merges := [][2]string{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"l", "d"}, {"Ġwor", "ld"}}
	for _, m := range merges {
		vocab[m[0]+m[1]] = len(vocab)
	}
	n := len(vocab)
	file := map[string]any{
		"version": "1.0",
		"added_tokens": []any{
			map[string]any{"id": n, "content": "<|endoftext|>", "special": true, "normalized": false},
			map[string]any{"id": n + 1, "content": "<mask>", "special": false, "normalized": false, "lstrip": true},
		},
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": map[string]any{
			"type": "TemplateProcessing",
			"single": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "<|endoftext|>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
			},
			"special_tokens": map[string]any{"<|endoftext|>": map[string]any{"id": "<|endoftext|>", "ids": []int{n}, "tokens": []string{"<|endoftext|>"}}},
		},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "fuse_unk": false, "byte_fallback": false,
			"vocab": vocab, "merges": merges,
		},
	}
	if edit != nil {
		edit(file)
	}
	data, err := json.Marshal(file)
	require.NoError(t, err)
	return data
}

func model(m map[string]any) map[string]any { return m["model"].(map[string]any) }

func TestTinyEncodeDecode(t *testing.T) {
	tok, err := Parse(tinyFile(t, nil))
	require.NoError(t, err)
	hello, _ := tok.TokenToID("hello")
	world, _ := tok.TokenToID("Ġworld")
	eot, _ := tok.TokenToID("<|endoftext|>")
	require.Equal(t, []int64{hello, world}, tok.Encode("hello world", false))
	require.Equal(t, []int64{eot, hello, world}, tok.Encode("hello world", true))
	require.Equal(t, "hello world", tok.Decode(tok.Encode("hello world", true), true))
	require.Equal(t, "<|endoftext|>hello world", tok.Decode(tok.Encode("hello world", true), false))
	require.Equal(t, 256+9+2, tok.VocabSize())
	bos, ok := tok.BOS()
	require.True(t, ok)
	require.Equal(t, eot, bos)
	require.True(t, tok.IsSpecial(eot))
	require.False(t, tok.IsSpecial(hello))
	require.Len(t, tok.AddedTokens(), 2)
	require.Equal(t, "<mask>", tok.AddedTokens()[1].Content)
	// Invalid UTF-8 is encoded as U+FFFD.
	require.Equal(t, tok.Encode("a\uFFFDb", false), tok.Encode("a\xffb", false))
	// AppendEncode appends.
	buf := tok.AppendEncode([]int64{-7}, "hello", false)
	require.Equal(t, []int64{-7, hello}, buf)
}

func TestDecodeStreamCompletesCharacters(t *testing.T) {
	tok, err := Parse(tinyFile(t, nil))
	require.NoError(t, err)
	ids := tok.Encode("hello é€😀 world", false)
	s := tok.NewDecodeStream(false)
	var got strings.Builder
	var chunks []string
	for _, id := range ids {
		out, err := s.Step(id)
		require.NoError(t, err)
		if out != "" {
			chunks = append(chunks, out)
		}
		got.WriteString(out)
	}
	require.Equal(t, "hello é€😀 world", got.String())
	for _, c := range chunks {
		require.NotContains(t, c, "\uFFFD", "a chunk ended inside a character: %q", chunks)
	}
	// An unfinished character stays held back until Flush.
	euro := tok.Encode("€", false)
	require.Len(t, euro, 3)
	s = tok.NewDecodeStream(false)
	for _, id := range euro[:2] {
		out, err := s.Step(id)
		require.NoError(t, err)
		require.Equal(t, "", out)
	}
	require.Equal(t, "\uFFFD", s.Flush())
}

// TestConcurrentEncode encodes from many goroutines at once (as the loader's workers
// do) and gets what one goroutine gets; run with -race it checks the cache's locking.
func TestConcurrentEncode(t *testing.T) {
	tok, err := Parse(tinyFile(t, nil))
	require.NoError(t, err)
	texts := make([]string, 200)
	for i := range texts {
		texts[i] = fmt.Sprintf("hello world %d <mask> héllo wörld %d", i%17, i)
	}
	want := make([][]int64, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s, true)
	}
	fresh, err := Parse(tinyFile(t, nil)) // an empty cache, filled concurrently
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range texts {
				i := (k + g*25) % len(texts)
				if got := fresh.Encode(texts[i], true); fmt.Sprint(got) != fmt.Sprint(want[i]) {
					errs <- fmt.Sprintf("goroutine %d text %q: %v, want %v", g, texts[i], got, want[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name        string
		edit        func(m map[string]any)
		raw         string
		want        string
		unsupported bool
	}{
		{name: "truncated", raw: `{"model": {"type": "BPE", "vocab": {`, want: "unexpected end of JSON input"},
		{name: "syntax", raw: "{\n  \"model\": {\n    \"type\": BPE}}", want: "malformed JSON at line 3, column 13"},
		{name: "wrong type", raw: `{"added_tokens": 5}`, want: "field added_tokens"},
		{name: "no model", raw: `{"version": "1.0"}`, want: "the file has no model"},
		{name: "version", edit: func(m map[string]any) { m["version"] = "2.0" }, want: `unknown tokenizer.json version "2.0"`},
		{name: "model type", edit: func(m map[string]any) { model(m)["type"] = "WordLevel" }, want: `tokenizer: model.type "WordLevel" is not supported (supported: BPE, Unigram, WordPiece)`, unsupported: true},
		{name: "wordpiece max chars", edit: func(m map[string]any) {
			model(m)["type"] = "WordPiece"
			model(m)["max_input_chars_per_word"] = -1
		}, want: `model.max_input_chars_per_word is -1, negative`},
		{name: "bert processing", edit: func(m map[string]any) {
			m["post_processor"] = map[string]any{"type": "BertProcessing", "sep": []any{"[SEP]", "x"}}
		}, want: `post_processor.sep: not a [token, id] pair`},
		{name: "dropout", edit: func(m map[string]any) { model(m)["dropout"] = 0.1 }, want: "model.dropout is 0.1", unsupported: true},
		{name: "merge not in vocab", edit: func(m map[string]any) {
			model(m)["merges"] = []any{[]string{"h", "zz"}}
		}, want: `model.merges[0]: "zz" is not in model.vocab`},
		{name: "merged not in vocab", edit: func(m map[string]any) {
			model(m)["merges"] = []any{[]string{"x", "y"}}
		}, want: `model.merges[0]: the merged token "xy" is not in model.vocab`},
		{name: "merge string", edit: func(m map[string]any) { model(m)["merges"] = []any{"h e l"} }, want: `model.merges[0]: "h e l" is not two tokens`},
		{name: "merge triple", edit: func(m map[string]any) { model(m)["merges"] = []any{[]string{"h", "e", "l"}} }, want: "model.merges[0]: a list of 3 strings"},
		{name: "negative id", edit: func(m map[string]any) { model(m)["vocab"].(map[string]any)["bad"] = -1 }, want: `token "bad" has id -1`},
		{name: "unk", edit: func(m map[string]any) { model(m)["unk_token"] = "<unk>" }, want: `model.unk_token "<unk>" is not in model.vocab`},
		{name: "pre-tokenizer", edit: func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "UnicodeScripts"} }, want: `pre_tokenizer: pre-tokenizer "UnicodeScripts" is not supported`, unsupported: true},
		{name: "nested pre-tokenizer", edit: func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "ByteLevel"}, map[string]any{"type": "CharDelimiterSplit"}}}
		}, want: `pre_tokenizer.pretokenizers[1]: pre-tokenizer "CharDelimiterSplit" is not supported`, unsupported: true},
		{name: "regex", edit: func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\d++`}, "behavior": "Isolated", "invert": false}
		}, want: `pre_tokenizer.pattern: the regular expression "\\d++" is not supported by the regex engine`, unsupported: true},
		{name: "behavior", edit: func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "Sideways", "invert": false}
		}, want: `unknown split behavior "Sideways"`},
		{name: "normalizer", edit: func(m map[string]any) { m["normalizer"] = map[string]any{"type": "ByteLevel"} }, want: `normalizer: normalizer "ByteLevel" is not supported`, unsupported: true},
		{name: "replace regex", edit: func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": "a{2}+"}, "content": " "}
		}, want: `normalizer.pattern: the regular expression "a{2}+" is not supported by the regex engine`, unsupported: true},
		{name: "decoder", edit: func(m map[string]any) { m["decoder"] = map[string]any{"type": "BPEDecoder"} }, want: `decoder: decoder "BPEDecoder" is not supported`, unsupported: true},
		{name: "nested decoder", edit: func(m map[string]any) {
			m["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{nil, map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "CTC"}}}}}
		}, want: `decoder.decoders[1].decoders[0]: decoder "CTC" is not supported`, unsupported: true},
		{name: "sequence list", edit: func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": "NFC"}
		}, want: "normalizer: json: cannot unmarshal string into Go struct field .normalizers"},
		{name: "post-processor", edit: func(m map[string]any) { m["post_processor"] = map[string]any{"type": "Roberta"} }, want: `post_processor: post-processor "Roberta" is not supported`, unsupported: true},
		{name: "template token", edit: func(m map[string]any) {
			m["post_processor"].(map[string]any)["special_tokens"] = map[string]any{}
		}, want: `special token "<|endoftext|>" is not in special_tokens`},
		{name: "metaspace", edit: func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "add_prefix_space": false, "prepend_scheme": "always"}
		}, want: `add_prefix_space false does not match prepend_scheme "always"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(c.raw)
			if c.raw == "" {
				data = tinyFile(t, c.edit)
			}
			_, err := Parse(data)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
			require.Equal(t, c.unsupported, errors.Is(err, ErrUnsupported), "%v", err)
		})
	}
}

func TestLoadFileChecks(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "missing.json"))
	require.ErrorIs(t, err, os.ErrNotExist)

	_, err = Load(dir)
	require.ErrorContains(t, err, ", not a regular file")

	big := filepath.Join(dir, "big.json")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxFileSize+1)) // sparse: no disk used
	require.NoError(t, f.Close())
	_, err = Load(big)
	require.ErrorContains(t, err, "more than the 268435456 it may have")

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{\"model\": nul}"), 0o644))
	_, err = Load(bad)
	require.ErrorContains(t, err, bad)
	require.ErrorContains(t, err, "malformed JSON at line 1")

	// LoadDir: tokenizer_config.json is optional, and its tokens must exist.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tinyFile(t, nil), 0o644))
	tok, err := LoadDir(dir)
	require.NoError(t, err)
	_, ok := tok.PAD()
	require.False(t, ok)
	cfg := filepath.Join(dir, "tokenizer_config.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"bos_token": {"content": "hello", "lstrip": false}, "eos_token": "<|endoftext|>", "pad_token": null}`), 0o644))
	tok, err = LoadDir(dir)
	require.NoError(t, err)
	bos, _ := tok.BOS()
	hello, _ := tok.TokenToID("hello")
	require.Equal(t, hello, bos)
	_, ok = tok.PAD()
	require.False(t, ok)
	require.NoError(t, os.WriteFile(cfg, []byte(`{"bos_token": null}`), 0o644))
	tok, err = LoadDir(dir)
	require.NoError(t, err)
	_, ok = tok.BOS()
	require.False(t, ok, "a null bos_token means none")
	_, ok = tok.EOS()
	require.True(t, ok, "an absent eos_token keeps the guess")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"eos_token": "<nope>"}`), 0o644))
	_, err = LoadDir(dir)
	require.ErrorContains(t, err, `eos_token "<nope>" is not in the vocabulary`)
	require.NoError(t, os.WriteFile(cfg, []byte(`{"eos_token": 7}`), 0o644))
	_, err = LoadDir(dir)
	require.ErrorContains(t, err, "eos_token: expected a string or an object")

	// added_tokens_decoder must agree with tokenizer.json's added tokens: transformers adds
	// the ones it lacks, which would change the ids (a directory whose tokenizer.json lost
	// tokens that its tokenizer_config.json still lists).
	eot, _ := tok.TokenToID("<|endoftext|>")
	mask, _ := tok.TokenToID("<mask>")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, `{"added_tokens_decoder": {"%d": {"content": "<mask>"}, "%d": {"content": "<|endoftext|>", "special": true}}}`, mask, eot), 0o644))
	_, err = LoadDir(dir)
	require.NoError(t, err)
	for raw, want := range map[string]string{
		fmt.Sprintf(`{"added_tokens_decoder": {"%d": {"content": "<think>"}}}`, mask+1): fmt.Sprintf(`added_tokens_decoder[%d] "<think>" is not an added token`, mask+1),
		fmt.Sprintf(`{"added_tokens_decoder": {"%d": {"content": "<mask>"}}}`, eot):     fmt.Sprintf(`added_tokens_decoder[%d] "<mask>" is not an added token`, eot),
		`{"added_tokens_decoder": {"0": {"content": "a"}}}`:                             `added_tokens_decoder[0] "a" is not an added token`,
		`{"added_tokens_decoder": {"x": {"content": "a"}}}`:                             `key "x" is not a token id`,
	} {
		require.NoError(t, os.WriteFile(cfg, []byte(raw), 0o644))
		_, err = LoadDir(dir)
		require.ErrorContains(t, err, want, raw)
		if !strings.Contains(want, "key") {
			require.ErrorIs(t, err, ErrUnsupported, raw)
		}
	}
}

// FuzzParse: no input makes Parse, Encode or Decode panic. go test runs the seeds;
// go test -fuzz=FuzzParse explores.
func FuzzParse(f *testing.F) {
	f.Add(tinyFile(f, nil), "hello <mask> world", int64(3))
	f.Add([]byte(`{"model":{"merges":[],"vocab":{"a":0}}}`), "aaa", int64(0))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"<0x61>":1},"byte_fallback":true,"merges":[]},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"decoder":{"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Strip","content":" ","start":3,"stop":3}]}}`), "a b", int64(1))
	f.Add([]byte(`{"normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},"pre_tokenizer":{"type":"BertPreTokenizer"},"model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":5,"vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"a":3,"##b":4,"ab":5,"##":6,"é":7}},"post_processor":{"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]},"decoder":{"type":"WordPiece","prefix":"##","cleanup":true}}`), "Ab abb, É 中b ##b aaaaaa\x00", int64(4))
	f.Add([]byte(`{"model":{"type":"WordPiece","unk_token":"x","continuing_subword_prefix":"","vocab":{"a":0,"b":1}},"post_processor":{"type":"RobertaProcessing","sep":["b",1],"cls":["a",0],"trim_offsets":true,"add_prefix_space":true}}`), " ab ba c", int64(1))
	f.Fuzz(func(t *testing.T, data []byte, text string, id int64) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		ids := tok.Encode(text, true)
		if oids, offs := tok.EncodeOffsets(text, true); len(oids) != len(ids) || len(offs) != len(ids) {
			t.Fatalf("EncodeOffsets gives %d ids and %d offsets, Encode %d ids", len(oids), len(offs), len(ids))
		}
		_ = tok.Decode(append(ids, id, -id), false)
		s := tok.NewDecodeStream(true)
		for _, i := range ids {
			_, _ = s.Step(i)
		}
		_ = s.Flush()
	})
}

// bertFile is a small BERT-style tokenizer.json: BertNormalizer, BertPreTokenizer,
// WordPiece with max_input_chars_per_word 5, BertProcessing, the WordPiece decoder.
const bertFile = `{"version":"1.0","added_tokens":[
 {"id":1,"content":"[CLS]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
 {"id":2,"content":"[SEP]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
 "normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
 "pre_tokenizer":{"type":"BertPreTokenizer"},
 "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":5,
  "vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"a":3,"##b":4,"ab":5,"##":6,"e":7,"中":8,",":9,"##a":10}},
 "post_processor":{"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]},
 "decoder":{"type":"WordPiece","prefix":"##","cleanup":true}}`

// TestWordPieceBert checks a small BERT-style file without Python, against tokenizers'
// answers for it (0.23): longest match first, a word with no match or longer than
// max_input_chars_per_word is [UNK] over the whole word, the normalizer's removals,
// spaces and stripped accents, the offsets, and the decoder's joins and cleanup.
func TestWordPieceBert(t *testing.T) {
	tok, err := Parse([]byte(bertFile))
	require.NoError(t, err)
	cases := []struct {
		text    string
		ids     []int64
		offsets [][2]int
		decoded string
	}{
		{"Ab abb, É 中b", []int64{1, 5, 5, 4, 9, 7, 8, 0, 2},
			[][2]int{{0, 0}, {0, 2}, {3, 5}, {5, 6}, {6, 7}, {8, 10}, {11, 14}, {14, 15}, {0, 0}}, "ab abb, e 中 [UNK]"},
		{"aaaaa aaaaaa", []int64{1, 3, 10, 10, 10, 10, 0, 2},
			[][2]int{{0, 0}, {0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {6, 12}, {0, 0}}, "aaaaa [UNK]"},
		{"a\u0301\x00b\u200bA\u3000ab", []int64{1, 5, 10, 5, 2},
			[][2]int{{0, 0}, {0, 5}, {8, 9}, {12, 14}, {0, 0}}, "aba ab"},
	}
	for _, c := range cases {
		require.Equal(t, c.ids, tok.Encode(c.text, true), c.text)
		ids, offs := tok.EncodeOffsets(c.text, true)
		require.Equal(t, c.ids, ids, c.text)
		require.Equal(t, c.offsets, offs, c.text)
		require.Equal(t, c.decoded, tok.Decode(c.ids, true), c.text)
	}
	bos, _ := tok.BOS()
	require.Equal(t, int64(1), bos, "[CLS] is what BertProcessing puts first")
}

// TestBertNormalizerOptions reads BertNormalizer's options as tokenizers does
// (strip_accents null or absent follows lowercase) and normalizes as it does (its
// answers, 0.23). The other options, which tokenizers requires, default to its
// constructor's (true) here.
func TestBertNormalizerOptions(t *testing.T) {
	text := "Ça\u00a0Va\x00 中文 É\u200b"
	for _, c := range []struct{ json, want string }{
		{`{"type":"BertNormalizer","strip_accents":null,"lowercase":false}`, "Ça Va  中  文  É"},
		{`{"type":"BertNormalizer","strip_accents":true,"lowercase":false}`, "Ca Va  中  文  E"},
		{`{"type":"BertNormalizer","strip_accents":false,"lowercase":true}`, "ça va  中  文  é"},
		{`{"type":"BertNormalizer","clean_text":false,"handle_chinese_chars":false,"strip_accents":null,"lowercase":true}`, "ca\u00a0va\x00 中文 e\u200b"},
		{`{"type":"BertNormalizer"}`, "ca va  中  文  e"},
	} {
		n, err := parseComponent(normalizers, json.RawMessage(c.json), "normalizer")
		require.NoError(t, err, c.json)
		require.Equal(t, c.want, n.normalize(text), c.json)
		require.Equal(t, c.want, normalizeAligned(n, initialAlignment(text), normLimit(len(text))).text, c.json)
	}
}

// TestInvalidUTF8AsPythonReplaces: a text that is not UTF-8 is encoded as Python's
// bytes.decode("utf-8", errors="replace") (Rust's from_utf8_lossy) reads it: one U+FFFD
// per maximal invalid subsequence, not one per run of bad bytes; offsets cover each
// U+FFFD's bytes.
func TestInvalidUTF8AsPythonReplaces(t *testing.T) {
	tok, err := Parse(tinyFile(t, nil))
	require.NoError(t, err)
	// The decodings are Python's (3.11).
	for in, want := range map[string]string{
		"a\xff\xfeb":       "a\uFFFD\uFFFDb",
		"\xe2\x82":         "\uFFFD",
		"\xe2\x82x":        "\uFFFDx",
		"\xf0\x9f\x98 hi":  "\uFFFD hi",
		"\xed\xa0\x80":     "\uFFFD\uFFFD\uFFFD",
		"\xc0\xaf":         "\uFFFD\uFFFD",
		"\xf4\x90\x80\x80": "\uFFFD\uFFFD\uFFFD\uFFFD",
	} {
		require.Equal(t, want, lossyString(in), "%q", in)
		require.Equal(t, tok.Encode(want, false), tok.Encode(in, false), "%q", in)
	}
	ids, offsets := tok.EncodeOffsets("a\xff\xfeb", false)
	require.Equal(t, tok.Encode("a\uFFFD\uFFFDb", false), ids)
	require.Equal(t, [2]int{0, 1}, offsets[0])
	require.Equal(t, [2]int{3, 4}, offsets[len(offsets)-1])
}

// TestParseRefusesWhatSerdeRefuses: a tokenizer.json that is not UTF-8, or spells a lone
// UTF-16 surrogate in an escape, is refused (tokenizers' serde_json refuses both; Go's
// JSON reader would load U+FFFD in their place); a surrogate pair and an escaped
// backslash before "u" are fine.
func TestParseRefusesWhatSerdeRefuses(t *testing.T) {
	good := string(tinyFile(t, nil))
	withToken := func(content string) []byte {
		return []byte(strings.Replace(good, `"content":"\u003cmask\u003e"`, `"content":"`+content+`"`, 1))
	}
	require.True(t, strings.Contains(good, `"content":"\u003cmask\u003e"`), "the mask token's content as the file spells it")
	for content, want := range map[string]string{
		`\ud800`:       `lone UTF-16 surrogate \uD800`,
		`a\udc80b`:     `lone UTF-16 surrogate \uDC80`,
		`\ud83d\u0041`: `lone UTF-16 surrogate \uD83D`,
	} {
		_, err := Parse(withToken(content))
		require.Error(t, err, content)
		require.Contains(t, err.Error(), want, content)
		require.Contains(t, err.Error(), "line 1, column", content)
	}
	for _, content := range []string{`\ud83d\ude00`, `\\ud800`, `\u00e9`} {
		_, err := Parse(withToken(content))
		require.NoError(t, err, content)
	}
	_, err := Parse(append([]byte(good[:len(good)-1]), []byte(",\"x\":\"\xff\"}")...))
	require.ErrorContains(t, err, "not UTF-8 at line 1")
}
