package models_test

import (
	"encoding/json"
	"os"
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
)

const loadBalancingPy = `
import sys, torch
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
d = sys.argv[1]
got = torch.load(d + "/in.pt")
out = {}
for masked in (False, True):
    logits = tuple(l.clone().requires_grad_() for l in got["logits"])
    loss = load_balancing_loss_func(logits, 5, 2, got["mask"] if masked else None)
    loss.backward()
    out["masked" if masked else "plain"] = loss.detach()
    for i, l in enumerate(logits):
        out[("masked" if masked else "plain") + "_grad%d" % i] = l.grad
torch.save(out, d + "/out.pt")
`

// TestLoadBalancingLossMatchesTransformers: the routers' auxiliary loss over two
// layers, over every token and over a padding mask's real tokens, and its gradients,
// equal transformers' load_balancing_loss_func.
func TestLoadBalancingLossMatchesTransformers(t *testing.T) {
	defer torch.NewScope().Close()
	dir := t.TempDir()
	torch.ManualSeed(5)
	logits := []*torch.Tensor{torch.Randn([]int64{12, 5}, torch.Float32, torch.CPU), torch.Randn([]int64{12, 5}, torch.Float32, torch.CPU).MulScalar(2)}
	mask := torch.FromSlice([]int64{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}).View(2, 6)
	in := checkpoint.NewDict()
	var list []any
	for _, l := range logits {
		ct, err := torch.TensorToCheckpoint(l)
		require.NoError(t, err)
		list = append(list, ct)
	}
	in.Set("logits", list)
	ct, err := torch.TensorToCheckpoint(mask)
	require.NoError(t, err)
	in.Set("mask", ct)
	require.NoError(t, checkpoint.Write(filepath.Join(dir, "in.pt"), in))
	testpy.Run(t, loadBalancingPy, []string{"torch", "transformers"}, dir)
	ref := readRef(t, filepath.Join(dir, "out.pt"))
	for _, name := range []string{"plain", "masked"} {
		var ls []*torch.Tensor
		for _, l := range logits {
			ls = append(ls, l.Detach().Clone().SetRequiresGrad(true))
		}
		var m *torch.Tensor
		if name == "masked" {
			m = mask
		}
		loss := models.LoadBalancingLoss(ls, 5, 2, m)
		requireClose(t, name, refTensor(t, ref, name), loss, 1e-6)
		loss.Backward()
		for i, l := range ls {
			requireClose(t, name+" grad", refTensor(t, ref, name+"_grad"+string(rune('0'+i))), l.Grad(), 1e-6)
		}
	}
}

// tinyMixtralJSON is a small Mixtral config.json as a map, for editing.
func tinyMixtralJSON() map[string]any {
	return map[string]any{
		"model_type": "mixtral", "vocab_size": 61, "hidden_size": 16, "intermediate_size": 24,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
		"max_position_embeddings": 32, "num_local_experts": 4, "num_experts_per_tok": 2,
	}
}

// TestMoeCheckpointErrors: expert sizes that disagree with the config, and a missing
// expert, are errors naming the tensor and its file; MoE settings out of range are
// errors naming the field.
func TestMoeCheckpointErrors(t *testing.T) {
	write := func(dir string, cfg map[string]any) {
		raw, err := json.Marshal(cfg)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, models.ConfigFile), raw, 0o644))
	}
	raw, err := json.Marshal(tinyMixtralJSON())
	require.NoError(t, err)
	m := newDecoder(t, buildMixtral, raw)
	dir := t.TempDir()
	require.NoError(t, models.SavePretrained(dir, m, models.SaveOptions{MaxShardSize: 8 << 10}))
	lm, err := models.LoadPretrained(dir, models.LoadOptions{})
	require.NoError(t, err, "the per-expert files load back")
	requireSameState(t, m, lm)
	nn.Free(lm)

	cfg := tinyMixtralJSON()
	cfg["intermediate_size"] = 20
	write(dir, cfg)
	_, err = models.LoadPretrained(dir, models.LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "model.layers.0.block_sparse_moe.experts.0.w1.weight has shape [24 16]; the config's sizes give [20 16]")
	assert.Contains(t, err.Error(), ".safetensors:", "the file is named")

	// Fused experts of the wrong size: the tensor and its file.
	fused := t.TempDir()
	c := tinyMixtralJSON()
	c["intermediate_size"] = 20
	torch.WithScope(func() {
		raw, err := json.Marshal(c)
		require.NoError(t, err)
		other := newDecoder(t, buildMixtral, raw)
		weights := checkpoint.NewDict()
		for _, e := range nn.StateTensors(other) {
			ct, err := torch.TensorToCheckpoint(e.Tensor.Detach())
			require.NoError(t, err)
			weights.Set(e.Name, ct)
		}
		require.NoError(t, checkpoint.WriteSafetensors(filepath.Join(fused, "model.safetensors"), weights, map[string]string{"format": "pt"}))
	})
	write(fused, tinyMixtralJSON())
	_, err = models.LoadPretrained(fused, models.LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "size mismatch for model.layers.0.mlp.experts.gate_up_proj")
	assert.Contains(t, err.Error(), "model.layers.0.mlp.experts.gate_up_proj is in "+filepath.Join(fused, "model.safetensors"))

	cfg = tinyMixtralJSON()
	cfg["num_local_experts"] = 5
	write(dir, cfg)
	_, err = models.LoadPretrained(dir, models.LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "model.layers.0.block_sparse_moe.experts.4.w1.weight is missing: the config has 5 experts")

	for field, v := range map[string]any{"num_experts_per_tok": 5, "num_local_experts": 0, "router_jitter_noise": 2} {
		cfg := tinyMixtralJSON()
		cfg[field] = v
		write(dir, cfg)
		_, err = models.LoadPretrained(dir, models.LoadOptions{})
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), field)
	}
	for field, v := range map[string]any{"moe_intermediate_size": 0, "decoder_sparse_step": 0, "num_experts": -1} {
		cfg := tinyMixtralJSON()
		cfg["model_type"] = "qwen3_moe"
		delete(cfg, "num_local_experts")
		cfg[field] = v
		write(dir, cfg)
		_, err = models.LoadPretrained(dir, models.LoadOptions{})
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), field)
	}
	assert.True(t, strings.Contains(strings.Join(models.Architectures(), " "), "qwen3_moe"))

	// num_experts 0: every layer dense, as transformers builds it.
	cfg = tinyMixtralJSON()
	cfg["model_type"], cfg["num_experts"] = "qwen3_moe", 0
	delete(cfg, "num_local_experts")
	raw, err = json.Marshal(cfg)
	require.NoError(t, err)
	dense := newDecoder(t, buildQwen3Moe, raw).(*models.Qwen3MoeForCausalLM)
	for _, l := range dense.Model.Layers {
		assert.IsType(t, &models.GatedMLP{}, l.MLP)
	}
}

// TestMoeGradientCheckpointing: with output_router_logits, the load-balancing loss's
// gradients reach every parameter through checkpointed layers as they do without
// checkpointing, for Mixtral and for Qwen3-MoE (a dense layer among sparse ones).
func TestMoeGradientCheckpointing(t *testing.T) {
	defer torch.NewScope().Close()
	mixtral := tinyMixtralJSON()
	qwen := tinyMixtralJSON()
	qwen["model_type"], qwen["num_hidden_layers"], qwen["mlp_only_layers"], qwen["moe_intermediate_size"] = "qwen3_moe", 3, []int{1}, 8
	for _, cfg := range []map[string]any{mixtral, qwen} {
		cfg["output_router_logits"], cfg["router_aux_loss_coef"] = true, 0.5
		raw, err := json.Marshal(cfg)
		require.NoError(t, err)
		build := buildMixtral
		if cfg["model_type"] == "qwen3_moe" {
			build = buildQwen3Moe
		}
		torch.ManualSeed(11)
		m := newDecoder(t, build, raw)
		for _, p := range nn.NamedParameters(m) {
			if !strings.Contains(p.Name, "norm") {
				nn.InitNormal(p.Tensor, 0, 0.3)
			}
		}
		ids := torch.Randint(0, 61, []int64{2, 9}, torch.Int64, torch.CPU)
		mask := torch.FromSlice([]int64{0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}).View(2, 9)
		in := models.DecoderInput{InputIDs: ids, AttentionMask: mask}
		grads := func(ckpt bool) (*torch.Tensor, map[string][]float64) {
			require.NoError(t, models.SetGradientCheckpointing(m, ckpt))
			nn.ZeroGrad(m)
			sum, n := models.LMLossSum(m, in, ids, models.LossFull)
			loss := sum.Div(n)
			loss.Backward()
			out := map[string][]float64{}
			for _, p := range nn.NamedParameters(m) {
				require.NotNil(t, p.Tensor.Grad(), p.Name)
				out[p.Name] = p.Tensor.Grad().Float64s()
			}
			return loss.Detach(), out
		}
		nn.SetTraining(m, true)
		plainLoss, plain := grads(false)
		ckptLoss, ckpt := grads(true)
		// The recorded logits are freed once the loss is taken: a step leaves nothing.
		before := torch.LiveTensors()
		torch.WithScope(func() { grads(true); grads(false) })
		assert.Equal(t, before, torch.LiveTensors(), "live tensors after two more steps")
		requireClose(t, "loss", plainLoss, ckptLoss, 0)
		for name, g := range plain {
			require.InDeltaSlice(t, g, ckpt[name], 1e-6, name)
		}
		// The auxiliary loss is part of it.
		var ce *torch.Tensor
		torch.NoGrad(func() { ce = models.CausalLMLoss(m.Forward(in), ids) })
		assert.Greater(t, plainLoss.Sub(ce).Abs().Item(), 1e-3, cfg["model_type"])
	}
}
