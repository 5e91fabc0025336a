package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testsupport"
)

// tokenizerVariant copies the model directory and changes its tokenizer.json: the same
// vocabulary and merges, with edit applied to the file's fields.
func tokenizerVariant(t *testing.T, model string, edit func(m map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(model)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Type().IsRegular() {
			copyFile(t, filepath.Join(model, e.Name()), filepath.Join(dir, e.Name()))
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	require.NoError(t, err)
	raw, err = testsupport.EditJSON(raw, edit)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644))
	return dir
}

// runMaxRSS runs the command as a child with the line limit lowered to maxLine bytes
// and returns its output, its error and its peak resident memory in bytes (rusage's
// ru_maxrss, kilobytes on Linux).
func runMaxRSS(t *testing.T, maxLine int, args ...string) (string, error, int64) {
	t.Helper()
	cmd := child(args...)
	cmd.Env = append(cmd.Env, "TRAIN_TEST_MAX_LINE_BYTES="+strconv.Itoa(maxLine))
	out, err := cmd.CombinedOutput()
	require.NotNil(t, cmd.ProcessState, "%v: %s", err, out)
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	require.True(t, ok)
	return string(out), err, ru.Maxrss << 10
}

// TestFineTuneScaledInputs is issue 42's acceptance 2 for cmd/train, on inputs scaled
// down with the line limit (maxLMLineBytes, 64 MiB by default) lowered to 4 MiB: a
// one-line text of 3.5 MB (the review's 60 MB line under the 64 MiB limit) trains; the
// same line past a 1 MiB limit, and through a tokenizer.json whose Replace normalizer
// grows each "l" a thousandfold (the review's 4 MB line asked for 4 GB and aborted),
// are refused naming the file and line. None is a fatal error, and the child's peak
// RSS stays within 24 bytes a byte of the line above a run on a small file of the same
// words (the list of pieces of the whole line took 52 to 58 bytes a byte, the grown
// text 250 times the line).
func TestFineTuneScaledInputs(t *testing.T) {
	model := tinyLlamaDir(t)
	// Metaspace splits the line into words (as Mistral's and Gemma's files do), so the
	// pre-tokenizer, not one BPE word, is what the line goes through; the tokens are the
	// directory's ("▁hello", "▁world").
	split := tokenizerVariant(t, model, func(m map[string]any) {
		m["normalizer"] = nil
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}
	})
	grow := tokenizerVariant(t, model, func(m map[string]any) {
		m["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"String": "l"}, "content": strings.Repeat("l", 1000)}
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}
	})
	dataDir := t.TempDir()
	small := filepath.Join(dataDir, "small.txt")
	require.NoError(t, os.WriteFile(small, []byte(strings.Repeat("hello world hello world\n", 1000)), 0o644))
	const lineBytes = 3_500_000
	long := filepath.Join(dataDir, "long.txt")
	line := strings.Repeat("hello world ", lineBytes/12)
	require.NoError(t, os.WriteFile(long, []byte(line+"\n"), 0o644))

	args := func(model, data string) []string {
		return []string{"--model", model, "--data", data, "--batch-size", "4", "--max-steps", "1", "--limit", "64",
			"--optimizer", "adamw", "--lr", "1e-3", "--scheduler", "none", "--threads", "1", "--workers", "1",
			"--runs-dir", t.TempDir()}
	}
	out, err, base := runMaxRSS(t, 4<<20, args(split, small)...)
	require.NoError(t, err, "%s", out)
	t.Logf("a small file: peak RSS %d MB", base>>20)

	for _, c := range []struct {
		name    string
		model   string
		maxLine int
		want    string // "" for a run that trains
	}{
		{"a 3.5 MB line under a 4 MiB limit", split, 4 << 20, ""},
		{"the line past a 1 MiB limit", split, 1 << 20, long + ": line 1 is longer than 1048576 bytes"},
		{"a normalizer that grows the line", grow, 4 << 20, long + ":1: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err, peak := runMaxRSS(t, c.maxLine, args(c.model, long)...)
			t.Logf("peak RSS %d MB, %.1f bytes a byte of the line over the small file's", peak>>20, float64(peak-base)/lineBytes)
			assert.NotContains(t, out, "fatal error", "no runtime abort")
			assert.NotContains(t, out, "goroutine ", "no panic")
			if c.want == "" {
				require.NoError(t, err, "%s", out)
				assert.Contains(t, out, "perplexity")
			} else {
				require.Error(t, err, "%s", out)
				assert.Contains(t, out, c.want)
			}
			if c.model == grow {
				assert.Contains(t, out, "over the limit of", "the budget's message")
			}
			assert.Less(t, peak-base, int64(24*lineBytes), "peak RSS over the small file's run")
		})
	}
}
