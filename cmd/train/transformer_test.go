package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// smallCorpus writes the first n bytes of the corpus scripts/setup.sh installs to a file;
// the test is skipped without it, except under CI.
func smallCorpus(t *testing.T, n int) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(testpy.Root(), ".cache", "corpus", "kjv.txt"))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("text corpus missing (scripts/setup.sh installs it): %v", err)
		}
		t.Skipf("text corpus missing; run scripts/setup.sh: %v", err)
	}
	path := filepath.Join(t.TempDir(), "corpus.txt")
	require.NoError(t, os.WriteFile(path, text[:min(n, len(text))], 0o644))
	return path
}

// TestGPTTrainsOnTheCorpus runs the Trainer with the language-model step on the real
// corpus for two epochs: the validation loss falls, the history records the perplexity,
// and each epoch prints a sample.
func TestGPTTrainsOnTheCorpus(t *testing.T) {
	const block = 32
	train, val, err := readByteText(smallCorpus(t, 40_000), block, 0.1)
	require.NoError(t, err)
	assert.Equal(t, 36_000/block, train.Len())
	torch.ManualSeed(0)
	c := gptConfig(block)
	c.NLayer, c.NEmbd = 2, 64
	m, err := models.NewGPT2LMHeadModel(c)
	require.NoError(t, err)
	defer nn.Free(m)
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamOptions{LR: 3e-3, WeightDecay: 1e-2})
	require.NoError(t, err)
	trl, err := data.NewLoader(train, data.LoaderOptions{BatchSize: 32, Shuffle: true, Inline: true})
	require.NoError(t, err)
	val2, err := data.NewLoader(val, data.LoaderOptions{BatchSize: 32, Inline: true})
	require.NoError(t, err)
	var out bytes.Buffer
	tr, err := trainer.New(m, trl, val2, nil, opt, trainer.WithTrainStep(lmStep), trainer.WithEpochs(2),
		trainer.WithOutput(&out), trainer.WithRunDir(t.TempDir()), trainer.WithMonitor("val_loss", trainer.Min),
		trainer.WithCallbacks(&lmCallback{model: m, prompt: "And God said", tokens: 16, out: &out}))
	require.NoError(t, err)
	require.NoError(t, tr.Run(context.Background()))
	require.Len(t, tr.History, 2)
	for _, r := range tr.History {
		assert.InDelta(t, math.Exp(r.ValLoss), r.Metrics["val_perplexity"], 1e-9)
	}
	assert.Less(t, tr.History[1].ValLoss, tr.History[0].ValLoss, "the model learns")
	assert.Less(t, tr.History[1].ValLoss, math.Log(gptVocab), "better than uniform over bytes")
	assert.Contains(t, out.String(), `epoch 1: val perplexity`)
	assert.Contains(t, out.String(), `sample: "And God said`)
	t.Log(out.String())
}

func TestViTForTheData(t *testing.T) {
	m, err := vitModel([]int64{1, 28, 28}, 10)
	require.NoError(t, err)
	defer nn.Free(m)
	assert.Equal(t, int64(7), m.Config.PatchSize)
	torch.WithScope(func() {
		x := torch.Randn([]int64{2, 1, 28, 28}, torch.Float32, torch.CPU)
		assert.Equal(t, []int64{2, 10}, m.Forward(x).Shape())
	})
	_, err = vitModel([]int64{3, 32, 30}, 10)
	assert.Error(t, err)
	_, err = vitModel([]int64{784}, 10)
	assert.Error(t, err)
}

// TestTransformersResumeExactly interrupts `--model gpt` (on the corpus) and `--model vit`
// in the middle of epoch 2 and resumes them: the final state equals an uninterrupted
// run's bit for bit, as for every other model.
func TestTransformersResumeExactly(t *testing.T) {
	corpus := smallCorpus(t, 60_000)
	run := []string{"--epochs", "2", "--batch-size", "32", "--workers", "2", "--deterministic", "--seed", "3",
		"--log-every", "1", "--threads", "1"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"gpt", []string{"--model", "gpt", "--data", corpus, "--block-size", "32"}},
		{"vit", []string{"--model", "vit", "--synthetic", "2048"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append(append([]string{}, tc.args...), run...)
			out, err := child(append(args, "--runs-dir", dir, "--experiment", "ref")...).CombinedOutput()
			require.NoError(t, err, string(out))
			log := interruptAt(t, child(append(args, "--runs-dir", dir, "--experiment", "cut")...), "epoch 2 batch 10/")
			assert.Contains(t, log, "--resume")
			last := filepath.Join(dir, "cut", "checkpoints", "last.pt")
			out, err = child("--resume", last).CombinedOutput()
			require.NoError(t, err, string(out))
			assert.Contains(t, string(out), "resumed from")
			sameState(t, filepath.Join(dir, "ref", "checkpoints", "last.pt"), last)
		})
	}
}
