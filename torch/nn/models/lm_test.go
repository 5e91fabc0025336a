package models_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
)

// corpus returns the start of the text corpus scripts/setup.sh installs; it skips the
// test without it, except under CI.
func corpus(t *testing.T, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testpy.Root(), ".cache", "corpus", "kjv.txt"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("text corpus missing (scripts/setup.sh installs it): %v", err)
		}
		t.Skipf("text corpus missing; run scripts/setup.sh: %v", err)
	}
	return b[:min(n, len(b))]
}

func byteIDs(b []byte) []int64 {
	out := make([]int64, len(b))
	for i, c := range b {
		out[i] = int64(c)
	}
	return out
}

const trainedPy = `
import sys, json, torch
from transformers import GPT2LMHeadModel
m, info = GPT2LMHeadModel.from_pretrained(sys.argv[1], output_loading_info=True)
assert not info["missing_keys"] and not info["unexpected_keys"], info
prompt = torch.tensor([list(sys.argv[2].encode())])
out = m.generate(prompt, max_new_tokens=int(sys.argv[3]), do_sample=False, pad_token_id=0)
print(json.dumps(out[0, prompt.shape[1]:].tolist()))
`

// TestTrainedGPTMovesToTransformers is issue 14, acceptance 4 at test size: a byte-level
// GPT trained by gotrain on the real corpus (its loss falls) is saved as a Hugging Face
// directory, GPT2LMHeadModel.from_pretrained loads it, and its greedy continuation of a
// prompt equals gotrain's.
func TestTrainedGPTMovesToTransformers(t *testing.T) {
	text := corpus(t, 200_000)
	c := models.DefaultGPT2Config()
	c.VocabSize, c.NPositions, c.NEmbd, c.NLayer, c.NHead = 256, 128, 64, 2, 4
	c.BOSTokenID, c.EOSTokenID = nil, nil
	torch.ManualSeed(3)
	m := newGPT2(t, c)
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamOptions{LR: 1e-2, WeightDecay: 1e-2})
	require.NoError(t, err)
	ids := byteIDs(text)
	const batch, seq, steps = 16, 32, 200
	var first, last float64
	for step := 0; step < steps; step++ {
		torch.WithScope(func() {
			starts := torch.Randint(0, int64(len(ids)-seq), []int64{batch}, torch.Int64, torch.CPU).Int64s()
			rows := make([]int64, 0, batch*seq)
			for _, s := range starts {
				rows = append(rows, ids[s:s+seq]...)
			}
			opt.ZeroGrad(true)
			loss := m.Loss(torch.FromSlice(rows, batch, seq))
			loss.Backward()
			require.NoError(t, opt.Step())
			if step == 0 {
				first = loss.Item()
			}
			last = loss.Item()
		})
	}
	t.Logf("loss %.3f → %.3f after %d steps", first, last, steps)
	assert.Less(t, last, first-1.5, "training on the corpus lowers the loss")

	nn.SetTraining(m, false)
	dir := filepath.Join(t.TempDir(), "kjv-gpt")
	require.NoError(t, m.SavePretrained(dir))
	prompt := "And God said, "
	got, err := generate1(m, byteIDs([]byte(prompt)), models.GenerateOptions{MaxNewTokens: 40, IgnoreEOS: true})
	require.NoError(t, err)
	want := testpy.Run(t, trainedPy, []string{"torch", "transformers"}, dir, prompt, "40")
	js, err := json.Marshal(got)
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(js), "transformers continues the prompt as gotrain does")
	t.Logf("%q → %q", prompt, bytesOf(got))
}

func bytesOf(ids []int64) string {
	b := make([]byte, len(ids))
	for i, v := range ids {
		b[i] = byte(v)
	}
	return string(b)
}

// TestGPT2UnderBF16Autocast is what --amp bf16 runs: the forward pass and loss under CPU
// autocast, with gradients reaching every parameter and a loss close to fp32's.
func TestGPT2UnderBF16Autocast(t *testing.T) {
	torch.ManualSeed(2)
	m := newGPT2(t, tinyGPT2Config())
	torch.WithScope(func() {
		ids := torch.Randint(0, 61, []int64{2, 12}, torch.Int64, torch.CPU)
		full := m.Loss(ids).Item()
		var loss *torch.Tensor
		amp.Autocast(torch.CPU, torch.BFloat16, func() { loss = m.Loss(ids) })
		assert.Equal(t, torch.Float32, loss.DType(), "cross-entropy runs in float32 under autocast")
		assert.InDelta(t, full, loss.Item(), 0.05)
		loss.Backward()
		for _, p := range nn.NamedParameters(m) {
			require.NotNil(t, p.Tensor.Grad(), p.Name)
		}
	})
}
