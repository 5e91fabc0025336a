package models_test

// Adding a model architecture (docs/extending.md, "A model architecture"): one file with
// the model (a type implementing models.CausalLM, and models.Pretrained to write its
// config.json) and an init that registers it by its config.json model_type. This file
// adds one from a test: it saves to a Hugging Face-style directory (sharded), loads back
// by model_type, trains through the Trainer with its own step, and generates through
// the shared Generate with and without the KV cache.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// tinyModelType is the architecture's config.json model_type; a registered type must be
// unique, so a test's own is named as no real one is.
const tinyModelType = "gotrain-test-tiny"

// TinyConfig is the architecture's config.json.
type TinyConfig struct {
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures,omitempty"`
	VocabSize     int64    `json:"vocab_size"`
	HiddenSize    int64    `json:"hidden_size"`
}

// TinyLM is a one-layer, one-head decoder: token embeddings, causal self-attention with
// a residual connection, and the output projection. Its parameters' names are its
// state-dict keys and the tensor names of its safetensors files.
type TinyLM struct {
	nn.Base
	Config     TinyConfig
	Embed      *nn.Embedding
	Q, K, V, O *nn.Linear
	Head       *nn.Linear
}

// NewTinyLM builds the model of config c, or says which field it cannot build.
func NewTinyLM(c TinyConfig) (*TinyLM, error) {
	if c.VocabSize < 1 || c.VocabSize > 1<<20 {
		return nil, fmt.Errorf("vocab_size %d is not in [1, 2^20]", c.VocabSize)
	}
	if c.HiddenSize < 1 || c.HiddenSize > 1<<12 {
		return nil, fmt.Errorf("hidden_size %d is not in [1, 4096]", c.HiddenSize)
	}
	m := &TinyLM{Config: c}
	h := c.HiddenSize
	m.Embed = nn.Register(&m.Base, "embed_tokens", nn.NewEmbedding(c.VocabSize, h))
	m.Q = nn.Register(&m.Base, "q_proj", nn.NewLinear(h, h))
	m.K = nn.Register(&m.Base, "k_proj", nn.NewLinear(h, h))
	m.V = nn.Register(&m.Base, "v_proj", nn.NewLinear(h, h))
	m.O = nn.Register(&m.Base, "o_proj", nn.NewLinear(h, h))
	m.Head = nn.Register(&m.Base, "lm_head", nn.NewLinear(h, c.VocabSize))
	return m, nil
}

// Forward returns the logits [B, T, vocab] (models.CausalLM). With a cache it attends
// to the cached positions too, and appends this call's keys and values.
func (m *TinyLM) Forward(in models.DecoderInput) *torch.Tensor {
	h := m.Embed.Forward(in.InputIDs) // [B, T, H]
	q := m.Q.Forward(h).Unsqueeze(1)  // one head: [B, 1, T, H]
	k, v := m.K.Forward(h).Unsqueeze(1), m.V.Forward(h).Unsqueeze(1)
	if in.Cache != nil {
		k, v = in.Cache.Update(0, k, v) // layer 0's keys and values, cached ones first
	}
	mask, causal := in.SDPAMask() // causal, padding and cache as transformers masks them
	a := torch.ScaledDotProductAttention(q, k, v, mask, 0, causal, 0).Select(1, 0)
	in.Cache.Advance(in.InputIDs.Size(1))
	return m.Head.Forward(h.Add(m.O.Forward(a)))
}

// DecoderConfig returns the vocabulary; no context limit, no BOS or EOS (models.CausalLM).
func (m *TinyLM) DecoderConfig() models.DecoderConfig {
	return models.DecoderConfig{VocabSize: m.Config.VocabSize, BOS: -1}
}

// PretrainedConfig returns config.json's contents (models.Pretrained).
func (m *TinyLM) PretrainedConfig() any {
	c := m.Config
	c.ModelType, c.Architectures = tinyModelType, []string{"TinyForCausalLM"}
	return c
}

func init() {
	models.RegisterArchitecture(models.Architecture{ModelType: tinyModelType, Class: "TinyForCausalLM",
		New: func(config []byte) (models.CausalLM, error) {
			var c TinyConfig
			if err := json.Unmarshal(config, &c); err != nil {
				return nil, err
			}
			return NewTinyLM(c)
		}})
}

// writeCycle writes n uint16 tokens 0, 1, ..., vocab-1, 0, 1, ... as nanoGPT's train.bin.
func writeCycle(t *testing.T, path string, n, vocab int) {
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(i%vocab))
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

func TestExtendArchitecture(t *testing.T) {
	const vocab = 8
	assert.Contains(t, models.Architectures(), tinyModelType)
	dir := t.TempDir()

	// Save sharded (each shard at most 1 KiB), load back by model_type.
	torch.ManualSeed(1)
	built, err := NewTinyLM(TinyConfig{VocabSize: vocab, HiddenSize: 16})
	require.NoError(t, err)
	initial := filepath.Join(dir, "initial")
	require.NoError(t, models.SavePretrained(initial, built, models.SaveOptions{MaxShardSize: 1024}))
	assert.FileExists(t, filepath.Join(initial, "model.safetensors.index.json"))
	loaded, err := models.LoadPretrained(initial, models.LoadOptions{})
	require.NoError(t, err)
	model, ok := loaded.(*TinyLM)
	require.True(t, ok, "LoadPretrained built a %T", loaded)
	for i, p := range nn.NamedParameters(built) {
		assert.Equal(t, p.Tensor.Float32s(), nn.NamedParameters(model)[i].Tensor.Float32s(), p.Name)
	}

	// Train it on a cycle of tokens through the Trainer, with a step typed over TinyLM.
	tokens := filepath.Join(dir, "train.bin")
	writeCycle(t, tokens, 2000, vocab)
	ds, err := data.OpenTokens(tokens, 16, data.TokenOptions{VocabSize: vocab, Stride: 3})
	require.NoError(t, err)
	loader, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 16, Shuffle: true})
	require.NoError(t, err)
	opt, err := optim.NewAdamW(nn.Parameters(model), optim.AdamOptions{LR: 1e-2})
	require.NoError(t, err)
	step := func(m *TinyLM, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		logits := m.Forward(models.DecoderInput{InputIDs: b.Get(data.LMInputIDs)})
		return torch.CrossEntropy(logits.Reshape(-1, vocab), b.Get(data.LMLabels).Reshape(-1), torch.CrossEntropyOptions{}), nil
	}
	tr, err := trainer.New(model, loader, nil, nil, opt, trainer.WithTrainStep(step),
		trainer.WithEpochs(3), trainer.WithModelConfig(tinyModelType), trainer.WithOutput(io.Discard))
	require.NoError(t, err)
	require.NoError(t, tr.Run(context.Background()))
	first, last := tr.History[0].TrainLoss, tr.History[2].TrainLoss
	t.Logf("train_loss by epoch: %.4f %.4f %.4f", first, tr.History[1].TrainLoss, last)
	assert.Less(t, last, 0.05, "the next token of a cycle is learnt")

	// The trained model saves and loads again, and generates the cycle, with and without
	// the KV cache, from prompts of different lengths (left-padded together).
	trained := filepath.Join(dir, "trained")
	require.NoError(t, models.SavePretrained(trained, model, models.SaveOptions{}))
	again, err := models.LoadPretrained(trained, models.LoadOptions{})
	require.NoError(t, err)
	want := [][]int64{{6, 7, 0, 1, 2}, {4, 5, 6, 7, 0}}
	for _, noCache := range []bool{false, true} {
		out, err := models.Generate(again, [][]int64{{5}, {1, 2, 3}}, models.GenerateOptions{MaxNewTokens: 5, NoCache: noCache})
		require.NoError(t, err)
		assert.Equal(t, want, out, "NoCache %v", noCache)
	}
}
