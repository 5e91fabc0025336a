package models_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
)

// recordPy is shared by the Python sides of the parity tests: the state dict, the logits
// and loss of fwd(), the gradients, and the state after one AdamW step.
const recordPy = `
import os, sys, collections, torch
d, mode = sys.argv[1], sys.argv[2]
def record(m, fwd):
    state = collections.OrderedDict((k, v.clone()) for k, v in m.state_dict().items())
    logits, loss = fwd()
    loss.backward()
    grads = collections.OrderedDict((n, p.grad.clone()) for n, p in m.named_parameters())
    torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-3).step()
    after = collections.OrderedDict((k, v.clone()) for k, v in m.state_dict().items())
    return {"state": state, "logits": logits.detach(), "loss": loss.detach(), "grads": grads, "after": after}
`

func readRef(t *testing.T, path string) any {
	t.Helper()
	ref, err := checkpoint.Read(path)
	require.NoError(t, err)
	return ref
}

func refTensor(t *testing.T, ref any, path ...any) *torch.Tensor {
	t.Helper()
	ct, err := checkpoint.GetTensor(ref, path...)
	require.NoError(t, err)
	x, err := torch.TensorFromCheckpoint(ct, torch.CPU)
	require.NoError(t, err)
	return x
}

func requireClose(t *testing.T, name string, want, got *torch.Tensor, tol float64) {
	t.Helper()
	require.Equal(t, want.Shape(), got.Shape(), name)
	require.InDeltaSlice(t, want.Float64s(), got.Float64s(), tol, name)
}

// stepMatches loads the reference state into m strictly, and checks that fwd's logits and
// loss, the gradients after backward and the state after one AdamW step equal the
// reference's within 1e-5. The step has eps 1e-3: some gradients are zero up to rounding
// (attention's key bias), and a first Adam step divides them by their own size, so with
// the default 1e-8 their rounding noise alone would move the weights by ±lr.
func stepMatches(t *testing.T, m nn.Module, ref any, fwd func() (logits, loss *torch.Tensor)) {
	t.Helper()
	state, err := checkpoint.GetDict(ref, "state")
	require.NoError(t, err)
	require.NoError(t, nn.LoadStateDict(m, state, true))
	var names []any
	for k := range nn.StateDict(m).All() {
		names = append(names, k)
	}
	require.Equal(t, state.Keys(), names, "same state-dict keys in the same order")
	logits, loss := fwd()
	requireClose(t, "logits", refTensor(t, ref, "logits"), logits, 1e-5)
	requireClose(t, "loss", refTensor(t, ref, "loss"), loss, 1e-5)
	loss.Backward()
	grads, err := checkpoint.GetDict(ref, "grads")
	require.NoError(t, err)
	require.Equal(t, grads.Len(), len(nn.NamedParameters(m)), "one gradient per parameter (tied ones once)")
	for _, p := range nn.NamedParameters(m) {
		require.NotNil(t, p.Tensor.Grad(), p.Name)
		requireClose(t, "grad "+p.Name, refTensor(t, grads, p.Name), p.Tensor.Grad(), 1e-5)
	}
	opt, err := optim.NewAdamW(nn.Parameters(m), optim.AdamOptions{LR: 1e-2, Eps: 1e-3, WeightDecay: 1e-2})
	require.NoError(t, err)
	require.NoError(t, opt.Step())
	for k, v := range nn.StateDict(m).All() {
		requireClose(t, "after AdamW "+k.(string), refTensor(t, ref, "after", k), v.(*torch.Tensor), 1e-5)
	}
}

const gpt2Py = recordPy + `
from transformers import GPT2Config, GPT2LMHeadModel
cfg = GPT2Config(vocab_size=61, n_positions=40, n_embd=16, n_layer=2, n_head=4,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=60, eos_token_id=60)
if mode == "make":
    torch.manual_seed(0)
    m = GPT2LMHeadModel(cfg)
    # Weights larger than the initial ones, so that greedy decoding does not repeat one token.
    with torch.no_grad():
        for n, p in m.named_parameters():
            if ".ln_" not in n:
                p.normal_(0, 0.3)
    m.train()
    ids = torch.randint(0, 61, (3, 11))
    def fwd():
        out = m(ids, labels=ids)
        return out.logits, out.loss
    r = record(m, fwd)
    r["ids"] = ids
    m.eval()
    prompt = ids[:1, :5]
    r["prompt"] = prompt[0]
    r["greedy"] = m.generate(prompt, max_new_tokens=25, do_sample=False, pad_token_id=0)[0, 5:]
    m.save_pretrained(d + "/hf")
    m.save_pretrained(d + "/hf_sharded", max_shard_size="20KB")
    with torch.no_grad():
        r["hf_logits"] = m(ids).logits
    torch.save(r, d + "/ref.pt")
else:
    got = torch.load(d + "/go.pt")
    m, info = GPT2LMHeadModel.from_pretrained(d + "/go_hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert m.lm_head.weight.data_ptr() == m.transformer.wte.weight.data_ptr(), "tied"
    sd = m.state_dict()
    for k, v in got["state"].items():
        assert torch.equal(sd[k], v), k  # the weights transformers loaded are Go's, to the bit
    # The logits within 2e-4 (|logits| up to ~4): on these same files, the first forward
    # of a Python process now and then (about one in twenty, seen in CI) differs by
    # 1.1e-4 from the next forward of the same model, which agrees with Go's to 7e-7;
    # 1e-5 tested that noise of the first call, not the model.
    with torch.no_grad():
        torch.testing.assert_close(m(got["ids"]).logits, got["logits"], rtol=0, atol=2e-4)
    sharded = GPT2LMHeadModel.from_pretrained(d + "/go_hf_sharded")
    assert len([f for f in os.listdir(d + "/go_hf_sharded") if f.endswith(".safetensors")]) > 1, "sharded"
    with torch.no_grad():
        torch.testing.assert_close(sharded(got["ids"]).logits, m(got["ids"]).logits, rtol=0, atol=0)
    m2 = GPT2LMHeadModel(cfg)
    m2.load_state_dict(got["state"], strict=True)
    m2.eval()
    with torch.no_grad():
        torch.testing.assert_close(m2(got["ids"]).logits, got["logits"], rtol=0, atol=2e-4)
    new = m.generate(got["prompt"][None], max_new_tokens=25, do_sample=False, pad_token_id=0)[0, len(got["prompt"]):]
    assert new.tolist() == got["greedy"].tolist(), (new.tolist(), got["greedy"].tolist())
    print("ok")
`

func tinyGPT2Config() models.GPT2Config {
	c := models.DefaultGPT2Config()
	eos := int64(60)
	c.VocabSize, c.NPositions, c.NEmbd, c.NLayer, c.NHead = 61, 40, 16, 2, 4
	c.ResidPdrop, c.EmbdPdrop, c.AttnPdrop = 0, 0, 0
	c.BOSTokenID, c.EOSTokenID = &eos, &eos
	return c
}

func newGPT2(t *testing.T, c models.GPT2Config) *models.GPT2LMHeadModel {
	t.Helper()
	m, err := models.NewGPT2LMHeadModel(c)
	require.NoError(t, err)
	t.Cleanup(func() { nn.Free(m) })
	return m
}

// TestGPT2MatchesTransformers is issue 14, acceptances 1 and 3 for GPT-2: transformers'
// GPT2LMHeadModel and the Go model load each other's state dicts and Hugging Face
// directories strictly, and agree on logits, loss, gradients, one AdamW step and greedy
// generation (with and without the KV cache), token for token.
func TestGPT2MatchesTransformers(t *testing.T) {
	dir := t.TempDir()
	testpy.Run(t, gpt2Py, []string{"torch", "transformers"}, dir, "make")
	ref := readRef(t, filepath.Join(dir, "ref.pt"))
	c := tinyGPT2Config()
	eos := *c.EOSTokenID

	torch.WithScope(func() {
		ids := refTensor(t, ref, "ids")
		prompt := refTensor(t, ref, "prompt").Int64s()
		want := refTensor(t, ref, "greedy").Int64s()
		// Scopes belong to goroutines and t.Run starts one per subtest: each opens its own,
		// or its tensors would be left to the garbage collector.
		t.Run("step", func(t *testing.T) {
			defer torch.NewScope().Close()
			m := newGPT2(t, c)
			assert.Equal(t, "transformer.wte.weight", nn.NamedParameters(m)[0].Name)
			stepMatches(t, m, ref, func() (*torch.Tensor, *torch.Tensor) {
				return m.Forward(models.DecoderInput{InputIDs: ids}), m.Loss(ids)
			})
		})
		t.Run("pretrained_dir_and_greedy", func(t *testing.T) {
			defer torch.NewScope().Close()
			m := loadGPT2(t, filepath.Join(dir, "hf"))
			wantConfig := c
			wantConfig.Architectures = []string{"GPT2LMHeadModel"}
			assert.Equal(t, wantConfig, m.Config)
			torch.NoGrad(func() {
				requireClose(t, "logits", refTensor(t, ref, "hf_logits"), m.Forward(models.DecoderInput{InputIDs: ids}), 1e-5)
			})
			got, err := generate1(m, prompt, models.GenerateOptions{MaxNewTokens: 25, StopTokens: []int64{eos}})
			require.NoError(t, err)
			assert.Equal(t, want, got, "greedy equals generate(do_sample=False)")
			t.Logf("greedy continuation: %v", got)
			uncached, err := generate1(m, prompt, models.GenerateOptions{MaxNewTokens: 25, StopTokens: []int64{eos}, NoCache: true})
			require.NoError(t, err)
			assert.Equal(t, got, uncached, "the KV cache changes no token")

			sharded := loadGPT2(t, filepath.Join(dir, "hf_sharded"))
			shards, err := filepath.Glob(filepath.Join(dir, "hf_sharded", "model-*-of-*.safetensors"))
			require.NoError(t, err)
			require.Greater(t, len(shards), 1, "transformers wrote shards")
			torch.NoGrad(func() {
				requireClose(t, "sharded logits", m.Forward(models.DecoderInput{InputIDs: ids}), sharded.Forward(models.DecoderInput{InputIDs: ids}), 0)
			})

			// Prompts of different lengths in one batch, left-padded, get the tokens
			// each gets alone.
			short, long := ids.Select(0, 1).Narrow(0, 0, 3).Int64s(), ids.Select(0, 2).Narrow(0, 0, 8).Int64s()
			both, err := models.Generate(m, [][]int64{short, long}, models.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true})
			require.NoError(t, err)
			for i, p := range [][]int64{short, long} {
				alone, err := generate1(m, p, models.GenerateOptions{MaxNewTokens: 12, IgnoreEOS: true})
				require.NoError(t, err)
				assert.Equal(t, alone, both[i], "row %d of a left-padded batch", i)
			}
		})
		t.Run("go_to_transformers", func(t *testing.T) {
			defer torch.NewScope().Close()
			torch.ManualSeed(5)
			m := newGPT2(t, c)
			for _, p := range nn.NamedParameters(m) {
				if !strings.Contains(p.Name, ".ln_") {
					nn.InitNormal(p.Tensor, 0, 0.3)
				}
			}
			nn.SetTraining(m, false)
			require.NoError(t, m.SavePretrained(filepath.Join(dir, "go_hf")))
			require.NoError(t, models.SavePretrained(filepath.Join(dir, "go_hf_sharded"), m, models.SaveOptions{MaxShardSize: 4 << 10}))
			sd, err := nn.CheckpointStateDict(m)
			require.NoError(t, err)
			var logits *torch.Tensor
			torch.NoGrad(func() { logits = m.Forward(models.DecoderInput{InputIDs: ids}) })
			greedy, err := generate1(m, prompt, models.GenerateOptions{MaxNewTokens: 25, IgnoreEOS: true})
			require.NoError(t, err)
			t.Logf("Go model's greedy continuation: %v", greedy)
			out := checkpoint.NewDict()
			for k, v := range map[string]*torch.Tensor{"ids": ids, "logits": logits,
				"prompt": torch.FromSlice(prompt), "greedy": torch.FromSlice(greedy)} {
				ct, err := torch.TensorToCheckpoint(v)
				require.NoError(t, err)
				out.Set(k, ct)
			}
			out.Set("state", sd)
			require.NoError(t, checkpoint.Write(filepath.Join(dir, "go.pt"), out))
			res := testpy.Run(t, gpt2Py, []string{"torch", "transformers"}, dir, "check")
			assert.Equal(t, "ok", strings.TrimSpace(string(res)))
		})
	})
}

// TestGPT2Generation covers the decoding options: EOS and max-token stops, and seeded
// sampling with temperature, top-k and top-p that repeats, with and without the cache.
func TestGPT2Generation(t *testing.T) {
	torch.ManualSeed(1)
	m := newGPT2(t, tinyGPT2Config())
	nn.SetTraining(m, false)
	prompt := []int64{3, 14, 15, 9}
	greedy, err := generate1(m, prompt, models.GenerateOptions{MaxNewTokens: 10, IgnoreEOS: true})
	require.NoError(t, err)
	require.Len(t, greedy, 10)
	eos := greedy[3]
	stopped, err := generate1(m, prompt, models.GenerateOptions{MaxNewTokens: 10, StopTokens: []int64{eos}})
	require.NoError(t, err)
	first := 0
	for greedy[first] != eos {
		first++
	}
	assert.Equal(t, greedy[:first+1], stopped, "stops after the first EOS, which it includes")

	seed := int64(42)
	opts := models.GenerateOptions{MaxNewTokens: 20, Sample: true, Temperature: 0.8, TopK: 20, TopP: 0.9, Seed: &seed}
	a, err := generate1(m, prompt, opts)
	require.NoError(t, err)
	b, err := generate1(m, prompt, opts)
	require.NoError(t, err)
	assert.Equal(t, a, b, "the same seed draws the same tokens")
	opts.NoCache = true
	c, err := generate1(m, prompt, opts)
	require.NoError(t, err)
	assert.Equal(t, a, c, "sampling with and without the cache sees the same logits")

	_, err = generate1(m, prompt, models.GenerateOptions{MaxNewTokens: 40, IgnoreEOS: true})
	assert.Error(t, err, "past n_positions")
	_, err = generate1(m, nil, models.GenerateOptions{MaxNewTokens: 1, IgnoreEOS: true})
	assert.Error(t, err)
}

// TestSampleLogitsFilters checks top-k and top-p against what they must keep: with
// top-k 1 or a tiny top-p only the most likely token can be drawn.
func TestSampleLogitsFilters(t *testing.T) {
	torch.WithScope(func() {
		logits := torch.FromSlice([]float32{0.1, 2.5, -1, 2.4, 0, 0.3, 2.45, -3}, 2, 4)
		for i := 0; i < 20; i++ {
			assert.Equal(t, []int64{1, 2}, models.SampleLogits(logits, 1, 1, 0).Int64s())
			assert.Equal(t, []int64{1, 2}, models.SampleLogits(logits, 1, 0, 0.01).Int64s())
			k2 := models.SampleLogits(logits, 5, 2, 0).Int64s()
			assert.Contains(t, []int64{1, 3}, k2[0])
			assert.Contains(t, []int64{1, 2}, k2[1])
		}
	})
}

// loadGPT2 opens a Hugging Face directory through the registry and checks that it
// holds a GPT-2.
func loadGPT2(t *testing.T, dir string) *models.GPT2LMHeadModel {
	t.Helper()
	m, err := models.LoadPretrained(dir, models.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { nn.Free(m) })
	g, ok := m.(*models.GPT2LMHeadModel)
	require.True(t, ok, "model_type gpt2 builds a GPT2LMHeadModel, not %T", m)
	return g
}

// generate1 is models.Generate for one prompt.
func generate1(m models.CausalLM, prompt []int64, o models.GenerateOptions) ([]int64, error) {
	out, err := models.Generate(m, [][]int64{prompt}, o)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}
