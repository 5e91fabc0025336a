package models_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// lossAndGrads runs loss forward and backward and returns its value and the gradients
// of ts, which it then clears.
func lossAndGrads(loss func() *torch.Tensor, ts []*torch.Tensor) (value float64, grads [][]float64) {
	torch.WithScope(func() {
		l := loss()
		value = l.Item()
		l.Backward()
		for _, x := range ts {
			grads = append(grads, x.Grad().Float64s())
			x.SetGrad(nil)
		}
	})
	return value, grads
}

// shiftedCount is the number of label tokens CausalLMLoss counts in labels [b, t]: all
// but the first position of each row, less the IgnoreIndex ones.
func shiftedCount(labels []int64, b, t int) int64 {
	n := int64(0)
	for r := range b {
		for _, l := range labels[r*t+1 : (r+1)*t] {
			if l != models.IgnoreIndex {
				n++
			}
		}
	}
	return n
}

// The chunked loss is the unchunked float32 loss: its value, its sum and label count,
// and the gradients of the hidden states and the head's weight (1e-6), for chunks that
// divide the positions, that do not, and one chunk; with gradients off too.
func TestChunkedCausalLMLossGradients(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer torch.NewScope().Close()
	torch.ManualSeed(5)
	const b, tt, v = 2, 7, 50
	hidden := torch.Randn([]int64{b, tt, 8}, torch.Float32, torch.CPU).SetRequiresGrad(true)
	head := nn.NewLinear(8, v, nn.NoBias())
	defer nn.Free(head)
	labels := torch.Randint(0, v, []int64{b, tt}, torch.Int64, torch.CPU).Int64s()
	labels[2], labels[tt+4], labels[tt+5] = models.IgnoreIndex, models.IgnoreIndex, models.IgnoreIndex
	y := torch.FromSlice(labels, b, tt)
	params := []*torch.Tensor{hidden, head.Weight}

	want, wantGrads := lossAndGrads(func() *torch.Tensor { return models.CausalLMLoss(head.Forward(hidden), y) }, params)
	count := shiftedCount(labels, b, tt)
	for _, chunk := range []int64{1, 3, 5, 0} {
		name := fmt.Sprintf("chunk %d", chunk)
		before := torch.LiveCheckpoints()
		got, grads := lossAndGrads(func() *torch.Tensor {
			return models.ChunkedCausalLMLoss(hidden, models.LMHead{Layer: head}, y, chunk)
		}, params)
		require.InDelta(t, want, got, 1e-6, name)
		for i := range params {
			require.InDeltaSlice(t, wantGrads[i], grads[i], 1e-6, "%s: gradient %d", name, i)
		}
		require.Equal(t, before, torch.LiveCheckpoints(), "%s: the backward pass frees the chunks' nodes", name)
		torch.WithScope(func() {
			sum, n := models.ChunkedCausalLMLossSum(hidden, models.LMHead{Layer: head}, y, chunk)
			require.Equal(t, count, int64(n.Item()), name)
			require.InDelta(t, want*float64(count), sum.Item(), 1e-5, name)
		})
		torch.NoGrad(func() {
			require.InDelta(t, want, models.ChunkedCausalLMLoss(hidden, models.LMHead{Layer: head}, y, chunk).Item(), 1e-6, name)
		})
	}
	sum, n := models.CausalLMLossSum(head.Forward(hidden), y)
	require.Equal(t, count, int64(n.Item()))
	require.InDelta(t, want*float64(count), sum.Item(), 1e-5)
}

// chunkedLossPy computes, for the inputs it draws, the loss of transformers'
// ForCausalLMLoss (logits upcast to float32) in bfloat16 and float32, with and without
// Gemma 2's final soft-capping as Gemma2ForCausalLM.forward applies it, as the mean and
// as the sum (num_items_in_batch=1), and the float32 gradients.
const chunkedLossPy = `
import sys, torch
import torch.nn.functional as F
from transformers.loss.loss_utils import ForCausalLMLoss
torch.manual_seed(0)
B, T, H, V = 2, 6, 8, 40
labels = torch.randint(0, V, (B, T))
labels[0, 2] = -100
labels[1, 4:] = -100
out = {"labels": labels}
for name, dt, cap in [("bf16", torch.bfloat16, 0.0), ("bf16_cap", torch.bfloat16, 3.0), ("f32_cap", torch.float32, 2.0)]:
    h = (torch.randn(B, T, H) * 2).to(dt).requires_grad_()
    w = torch.randn(V, H).to(dt).requires_grad_()
    logits = F.linear(h, w)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    mean = ForCausalLMLoss(logits, labels, V)
    total = ForCausalLMLoss(logits, labels, V, num_items_in_batch=1)
    mean.backward()
    out[name] = {"h": h.detach(), "w": w.detach(), "mean": mean.detach(), "sum": total.detach(),
                 "h_grad": h.grad, "w_grad": w.grad}
torch.save(out, sys.argv[1])
`

// The chunked loss of bfloat16 hidden states and head is transformers' ForCausalLMLoss
// of the bfloat16 logits upcast to float32, with and without soft-capping; in float32
// the soft-capped loss's gradients are PyTorch's too.
func TestChunkedCausalLMLossMatchesTransformers(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer torch.NewScope().Close()
	path := filepath.Join(t.TempDir(), "ref.pt")
	testpy.Run(t, chunkedLossPy, []string{"torch", "transformers"}, path)
	ref := readRef(t, path)
	labels := refTensor(t, ref, "labels")
	for _, c := range []struct {
		name  string
		cap   float64
		grads bool
	}{{"bf16", 0, false}, {"bf16_cap", 3, false}, {"f32_cap", 2, true}} {
		h := refTensor(t, ref, c.name, "h").SetRequiresGrad(c.grads)
		head := &nn.Linear{Weight: refTensor(t, ref, c.name, "w").SetRequiresGrad(c.grads)}
		lm := models.LMHead{Layer: head, SoftCap: c.cap}
		loss := models.ChunkedCausalLMLoss(h, lm, labels, 5)
		require.Equal(t, torch.Float32, loss.DType(), c.name)
		require.InDelta(t, refTensor(t, ref, c.name, "mean").Item(), loss.Item(), 1e-6, c.name)
		sum, _ := models.ChunkedCausalLMLossSum(h, lm, labels, 5)
		require.InDelta(t, refTensor(t, ref, c.name, "sum").Item(), sum.Item(), 1e-5, c.name)
		if c.grads {
			loss.Backward()
			requireClose(t, c.name+" h grad", refTensor(t, ref, c.name, "h_grad"), h.Grad(), 1e-6)
			requireClose(t, c.name+" w grad", refTensor(t, ref, c.name, "w_grad"), head.Weight.Grad(), 1e-6)
		}
	}
}

// A decoder's chunked loss (LMLoss, LossChunked) gives the loss and gradients of its
// unchunked one: a Llama with LoRA on lm_head (the adapter's weights get theirs) and a
// GPT-2 whose head is tied to the embeddings (the shared weight gets both parts).
func TestLMLossChunkedDecoders(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer torch.NewScope().Close()
	torch.ManualSeed(2)
	lc := models.DefaultLlamaConfig()
	lc.VocabSize, lc.HiddenSize, lc.IntermediateSize, lc.NumHiddenLayers = 61, 16, 24, 1
	lc.NumAttentionHeads, lc.NumKeyValueHeads, lc.MaxPositionEmbeddings = 2, 1, 32
	llama, err := models.NewLlamaForCausalLM(lc)
	require.NoError(t, err)
	defer nn.Free(llama)
	adapter, err := lora.Inject(llama, lora.Config{R: 2, Alpha: 4, TargetModules: lora.Modules("lm_head", "q_proj")})
	require.NoError(t, err)
	for _, p := range adapter.Parameters() {
		nn.InitNormal(p, 0, 0.5) // B starts at zero, which would leave A no gradient
	}
	gc := models.DefaultGPT2Config()
	gc.VocabSize, gc.NPositions, gc.NEmbd, gc.NLayer, gc.NHead = 61, 32, 16, 1, 2
	gc.BOSTokenID, gc.EOSTokenID = nil, nil
	gpt2, err := models.NewGPT2LMHeadModel(gc)
	require.NoError(t, err)
	defer nn.Free(gpt2)

	ids := torch.Randint(0, 61, []int64{2, 9}, torch.Int64, torch.CPU)
	labels := ids.Clone()
	torch.NoGrad(func() { labels.Narrow(1, 0, 3).Fill(models.IgnoreIndex) })
	for name, m := range map[string]models.CausalLM{"llama+lora": llama, "gpt2 tied": gpt2} {
		nn.SetTraining(m, false) // no dropout
		params := nn.TrainableParameters(m)
		loss := func(mode models.LossMode) func() *torch.Tensor {
			return func() *torch.Tensor { return models.LMLoss(m, models.DecoderInput{InputIDs: ids}, labels, mode) }
		}
		want, wantGrads := lossAndGrads(loss(models.LossFull), params)
		got, grads := lossAndGrads(loss(models.LossChunked), params)
		require.InDelta(t, want, got, 1e-6, name)
		for i := range params {
			require.InDeltaSlice(t, wantGrads[i], grads[i], 1e-6, "%s: gradient %d", name, i)
		}
	}
}
