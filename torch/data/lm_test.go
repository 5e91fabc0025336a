package data_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testsupport"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
)

// tinyTokenizer is a Llama-2-style tokenizer.json with 24 tokens ("</s>" is 2).
func tinyTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(filepath.Join("testdata", "tiny-llama-tokenizer.json"))
	require.NoError(t, err)
	return tok
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

// TestLMDocumentsArePacked: documents, from a text file or {"text"} lines, are
// tokenized, joined with EOS after each and cut into windows of the block size.
func TestLMDocumentsArePacked(t *testing.T) {
	tok := tinyTokenizer(t)
	docs := []string{"hello world", "hello", "world hello world", "hello hello"}
	var want []int64
	for _, d := range docs {
		want = append(append(want, tok.Encode(d, true)...), 2)
	}
	jsonl := ""
	for _, d := range docs {
		jsonl += `{"text": "` + d + `"}` + "\r\n\n"
	}
	for name, text := range map[string]string{"docs.txt": strings.Join(docs, "\n") + "\n", "docs.jsonl": jsonl} {
		ds, err := data.NewLMDataset(writeFile(t, name, text), tok, data.LMOptions{BlockSize: 4, EOS: 2})
		require.NoError(t, err, name)
		assert.Equal(t, data.Documents, ds.Kind)
		require.Equal(t, len(want)/4, ds.Len(), name)
		var got []int64
		for i := range ds.Len() {
			var s data.Sample
			require.NoError(t, ds.Get(i, &s))
			ids, labels := data.Values[int64](s.MustField(data.LMInputIDs)), data.Values[int64](s.MustField(data.LMLabels))
			assert.Equal(t, ids, labels, "a window's labels are its ids (the loss shifts them)")
			got = append(got, ids...)
		}
		assert.Equal(t, want[:len(got)], got, name)
	}
}

// TestLMPromptCompletion: the loss is on the completion only, and padded batches carry
// the attention mask and IgnoreIndex labels.
func TestLMPromptCompletion(t *testing.T) {
	tok := tinyTokenizer(t)
	path := writeFile(t, "pc.jsonl", `{"prompt": "hello", "completion": " world"}
{"prompt": "hello world hello", "completion": " world world"}
`)
	ds, err := data.NewLMDataset(path, tok, data.LMOptions{BlockSize: 16, EOS: 2})
	require.NoError(t, err)
	require.Equal(t, data.PromptCompletion, ds.Kind)
	var s data.Sample
	require.NoError(t, ds.Get(0, &s))
	prompt := tok.Encode("hello", true)
	completion := tok.Encode(" world", false)
	wantIDs := append(append(append([]int64{}, prompt...), completion...), 2)
	assert.Equal(t, wantIDs, data.Values[int64](s.MustField(data.LMInputIDs)))
	wantLabels := append([]int64{}, wantIDs...)
	for i := range prompt {
		wantLabels[i] = data.IgnoreIndex
	}
	assert.Equal(t, wantLabels, data.Values[int64](s.MustField(data.LMLabels)))

	l, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 2, Pad: data.LMPad(0), Inline: true})
	require.NoError(t, err)
	torch.WithScope(func() {
		it := l.Iter(context.Background(), 0, 0)
		defer it.Close()
		b, ok := it.Next()
		require.True(t, ok)
		ids, labels, mask := b.Get(data.LMInputIDs), b.Get(data.LMLabels), b.Get(data.MaskName(data.LMInputIDs))
		assert.Equal(t, ids.Shape(), labels.Shape())
		assert.Equal(t, ids.Shape(), mask.Shape())
		n := int(ids.Size(1))
		row0 := labels.Select(0, 0).Int64s()
		for j := len(wantIDs); j < n; j++ {
			assert.Equal(t, int64(data.IgnoreIndex), row0[j], "padding is not learned")
			assert.False(t, mask.Select(0, 0).Bools()[j])
		}
	})
}

// TestLMDataErrors: what a user gets wrong is an error naming the file and line.
func TestLMDataErrors(t *testing.T) {
	tok := tinyTokenizer(t)
	fifo := filepath.Join(t.TempDir(), "fifo.jsonl")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	for name, c := range map[string]struct {
		path, want string
		block      int
	}{
		"malformed line":   {writeFile(t, "a.jsonl", `{"text": "hello"}`+"\n"+`{"text": "hel`+"\n"), "a.jsonl:2: not a JSON object", 4},
		"empty completion": {writeFile(t, "b.jsonl", `{"prompt": "hello", "completion": ""}`+"\n"), "b.jsonl:1: the completion is empty", 8},
		"prompt too long":  {writeFile(t, "c.jsonl", `{"prompt": "hello world hello world", "completion": " world"}`+"\n"), "c.jsonl:1: the prompt is 5 tokens, and the block size is 4", 4},
		"mixed kinds":      {writeFile(t, "d.jsonl", `{"text": "hello"}`+"\n"+`{"prompt": "a", "completion": "b"}`+"\n"), "d.jsonl:2:", 4},
		"other keys":       {writeFile(t, "e.jsonl", `{"input": "hello"}`+"\n"), `want {"text"`, 4},
		"empty file":       {writeFile(t, "f.txt", "\n\n"), "holds no text", 4},
		"too little text":  {writeFile(t, "g.txt", "hello\n"), "make no window of 64", 64},
		"block size 1":     {writeFile(t, "h.txt", "hello\n"), "at least 2 tokens", 1},
		"a FIFO":           {fifo, "not a regular file", 4},
		"a directory":      {t.TempDir(), "not a regular file", 4},
	} {
		_, err := data.NewLMDataset(c.path, tok, data.LMOptions{BlockSize: c.block, EOS: 2})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}

	// A model of a smaller vocabulary than the tokenizer gives: the file and line are
	// named at load (documents, prompts) or at Get (a pair's completion), not an index
	// error at the first batch; an EOS outside it is refused at once.
	vocab := int64(20)
	docs := writeFile(t, "v.txt", "hello\nhello world\n")
	pairs := writeFile(t, "v.jsonl", `{"prompt": "hello", "completion": " hello"}`+"\n"+`{"prompt": "hello", "completion": " world"}`+"\n")
	for _, id := range tok.Encode("hello", true) {
		require.Less(t, id, vocab, "hello is inside the small vocabulary")
	}
	require.Greater(t, slices.Max(tok.Encode(" world", false)), vocab-1, "the test needs a token past the small vocabulary")
	_, err := data.NewLMDataset(docs, tok, data.LMOptions{BlockSize: 2, EOS: 2, VocabSize: vocab})
	require.ErrorContains(t, err, "v.txt:2: the tokenizer gives token id")
	require.ErrorContains(t, err, "outside the model's vocabulary of 20")
	ds, err := data.NewLMDataset(pairs, tok, data.LMOptions{BlockSize: 8, EOS: 2, VocabSize: vocab})
	require.NoError(t, err)
	var s data.Sample
	require.NoError(t, ds.Get(0, &s))
	require.ErrorContains(t, ds.Get(1, &s), "v.jsonl:2:")
	_, err = data.NewLMDataset(docs, tok, data.LMOptions{BlockSize: 2, EOS: 20, VocabSize: vocab})
	require.ErrorContains(t, err, "the end-of-sequence id 20 is outside the model's vocabulary of 20")
}

// budgetEncoder refuses texts holding "boom" as tokenizer.Tokenizer's TryEncode refuses
// a text past its budgets (and panics in Encode, as Encode does).
type budgetEncoder struct{ *tokenizer.Tokenizer }

func (b budgetEncoder) TryEncode(text string, add bool) ([]int64, error) {
	if strings.Contains(text, "boom") {
		return nil, tokenizer.ErrBudget
	}
	return b.Tokenizer.TryEncode(text, add)
}

func (b budgetEncoder) Encode(text string, add bool) []int64 {
	ids, err := b.TryEncode(text, add)
	if err != nil {
		panic(err)
	}
	return ids
}

// TestLMTokenizerBudget: a text the tokenizer refuses (TryEncode's ErrBudget) is an
// error naming the file and line, for documents and prompts at load and for a
// completion at Get, never a panic in a worker.
func TestLMTokenizerBudget(t *testing.T) {
	enc := budgetEncoder{tinyTokenizer(t)}
	docs := writeFile(t, "docs.txt", "hello world\nhello boom\nhello\n")
	_, err := data.NewLMDataset(docs, enc, data.LMOptions{BlockSize: 2, EOS: 2})
	require.ErrorIs(t, err, tokenizer.ErrBudget)
	assert.Contains(t, err.Error(), "docs.txt:2: ")

	prompts := writeFile(t, "p.jsonl", `{"prompt": "hello", "completion": " world"}`+"\n"+`{"prompt": "boom", "completion": " world"}`+"\n")
	_, err = data.NewLMDataset(prompts, enc, data.LMOptions{BlockSize: 8, EOS: 2})
	require.ErrorIs(t, err, tokenizer.ErrBudget)
	assert.Contains(t, err.Error(), "p.jsonl:2: the prompt: ")

	completions := writeFile(t, "c.jsonl", `{"prompt": "hello", "completion": " boom"}`+"\n")
	d, err := data.NewLMDataset(completions, enc, data.LMOptions{BlockSize: 8, EOS: 2})
	require.NoError(t, err)
	err = d.Get(0, &data.Sample{})
	require.ErrorIs(t, err, tokenizer.ErrBudget)
	assert.Contains(t, err.Error(), "c.jsonl:1: the completion: ")
}

// tinyTokenizerWith is tinyTokenizer with edit applied to the file's fields.
func tinyTokenizerWith(t *testing.T, edit func(m map[string]any)) *tokenizer.Tokenizer {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "tiny-llama-tokenizer.json"))
	require.NoError(t, err)
	raw, err = testsupport.EditJSON(raw, edit)
	require.NoError(t, err)
	tok, err := tokenizer.Parse(raw)
	require.NoError(t, err)
	return tok
}

// TestLMLongLine is issue 42's long line where the file is read, at a scale a test can
// write: the line limit (LMOptions.MaxLineBytes, 64 MiB by default) lowered to 6 MiB.
// One-line texts of 1 MB and 4 MB (the review's legal 60 MB line, which reached 3.4 GB
// and aborted) load, allocating under 40 bytes a byte of the line, the text, its ids and
// windows included, and about 4× for 4× the line; the 4 MB line past a 1 MiB limit is refused
// naming the file and the limit, having allocated a few times the limit, not the line;
// through a tokenizer whose Replace normalizer grows each "l" a thousandfold (the
// review's 4 MB line asked for 4 GB) the line is refused with ErrBudget naming the file
// and line, having allocated under 40 bytes a byte.
func TestLMLongLine(t *testing.T) {
	metaspace := map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}
	split := tinyTokenizerWith(t, func(m map[string]any) { m["normalizer"], m["pre_tokenizer"] = nil, metaspace })
	grow := tinyTokenizerWith(t, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"String": "l"}, "content": strings.Repeat("l", 1000)}
		m["pre_tokenizer"] = metaspace
	})
	file := func(n int) string { return writeFile(t, "line.txt", strings.Repeat("hello world ", n/12)+"\n") }
	small, large := file(1<<20), file(4<<20)
	var loaded [2]uint64
	for k, path := range []string{small, large} {
		var ds *data.LMDataset
		var err error
		loaded[k] = testsupport.AllocatedBy(func() {
			ds, err = data.NewLMDataset(path, split, data.LMOptions{BlockSize: 64, EOS: 2, MaxLineBytes: 6 << 20})
		})
		require.NoError(t, err)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		t.Logf("%d bytes: %d windows, %d bytes allocated (%.1f a byte)", fi.Size(), ds.Len(), loaded[k], float64(loaded[k])/float64(fi.Size()))
		require.GreaterOrEqual(t, ds.Len(), int(fi.Size()/12*2/64), "two tokens a word pair")
		var s data.Sample
		require.NoError(t, ds.Get(0, &s))
		assert.Equal(t, []int64{1, 18, 23, 18, 23}, data.Values[int64](s.MustField(data.LMInputIDs))[:5])
		require.Less(t, loaded[k], uint64(40*fi.Size()), "bytes allocated for a line of %d bytes", fi.Size())
	}
	require.LessOrEqual(t, loaded[1], 5*loaded[0], "allocation for 4× the line: linear (the slices' growth steps aside)")

	for _, c := range []struct {
		name    string
		tok     *tokenizer.Tokenizer
		maxLine int
		want    string
		bound   uint64
	}{
		{"past the line limit", split, 1 << 20, large + ": line 1 is longer than 1048576 bytes", 4 << 20},
		{"a normalizer that grows the line", grow, 6 << 20, large + ":1: ", 40 * 4 << 20},
	} {
		var err error
		got := testsupport.AllocatedBy(func() {
			_, err = data.NewLMDataset(large, c.tok, data.LMOptions{BlockSize: 64, EOS: 2, MaxLineBytes: c.maxLine})
		})
		t.Logf("%s: %d bytes allocated", c.name, got)
		require.Error(t, err, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
		if c.tok == grow {
			require.ErrorIs(t, err, tokenizer.ErrBudget)
		}
		assert.Less(t, got, c.bound, c.name)
	}
}
