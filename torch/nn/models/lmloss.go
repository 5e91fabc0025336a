package models

import (
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// The language-model loss, unchunked (from the logits) and chunked (from the final
// hidden states and the output head).
//
// With a large vocabulary the logits are the largest tensors of a training step: for
// Qwen2's 151,936 tokens, a batch of 2 × 512 positions has 622 MB of float32 logits, and
// cross-entropy saves as much again for backward. The chunked loss computes the logits of
// a few hundred positions at a time, takes their loss, and keeps none of them: each
// chunk runs under torch.Checkpoint, which saves only the chunk's hidden states and
// labels and recomputes the chunk's logits in the backward pass. The price is the output
// head's matrix product done twice for the forward pass (three matmuls become four).

// IgnoreIndex is the label that contributes no loss, as transformers' -100.
const IgnoreIndex = -100

// ChunkedLossMinVocab is the vocabulary size from which LMLoss chunks the loss by
// default (LossAuto). At 32,000 tokens (Llama 2, Mistral) the float32 logits of a
// batch of 8 × 1024 positions are 1 GB, which cross-entropy doubles; below it (GPT-2's
// 50,257 is above) the logits rarely dominate a step and the recomputation is not worth
// its time.
const ChunkedLossMinVocab = 32000

// chunkElements bounds the logits of one chunk: 2^25 values, 128 MB in float32 (220
// positions of a 151,936-token vocabulary, 1,048 of 32,000).
const chunkElements = 1 << 25

// LMHead turns final hidden states into logits: the output layer, and the soft-capping
// some models apply to its output.
type LMHead struct {
	// Layer is the model's lm_head. Its Forward goes through a LoRA adapter injected on
	// lm_head (nn.Linear's Wrapper), whose weights then get their gradients.
	Layer *nn.Linear
	// SoftCap is config.json's final_logit_softcapping (Gemma 2): the logits become
	// tanh(logits/SoftCap)·SoftCap. 0: none.
	SoftCap float64
}

// Logits returns the head's logits of hidden [..., hidden_size], in the head's dtype,
// soft-capped as Gemma2ForCausalLM.forward does (in that dtype, before the loss upcasts
// them).
func (h LMHead) Logits(hidden *torch.Tensor) *torch.Tensor {
	logits := h.Layer.Forward(hidden)
	if h.SoftCap > 0 {
		logits = logits.DivScalar(h.SoftCap).Tanh().MulScalar(h.SoftCap)
	}
	return logits
}

// parameters are the tensors the head reads that may need gradients: the adapter's
// weights and the base layer's when a LoRA adapter wraps it, the layer's otherwise.
func (h LMHead) parameters() []*torch.Tensor {
	if m, ok := h.Layer.Wrapper.(nn.Module); ok {
		return nn.Parameters(m)
	}
	// The fields, not the registered parameters: a Linear built as a literal has none.
	return []*torch.Tensor{h.Layer.Weight, h.Layer.Bias}
}

// HiddenStateLM is a CausalLM whose loss can be computed from its final hidden states
// and output head (ChunkedCausalLMLossSum), without the logits of the whole sequence.
// Forward(in) is HiddenStates(in) through OutputHead().Logits. The decoders of this
// package (Llama, Qwen2, Mistral, GPT-2) are.
type HiddenStateLM interface {
	CausalLM
	// HiddenStates returns the final hidden states [B, T, hidden_size] of in's tokens,
	// after the final norm: what the output head turns into logits.
	HiddenStates(in DecoderInput) *torch.Tensor
	// OutputHead returns the output head, tied or not.
	OutputHead() LMHead
}

// LossMode says how LMLoss computes the loss.
type LossMode int

const (
	// LossAuto chunks the loss of a HiddenStateLM whose vocabulary has at least
	// ChunkedLossMinVocab tokens, and takes it from the whole logits otherwise.
	LossAuto LossMode = iota
	// LossChunked chunks the loss of any HiddenStateLM.
	LossChunked
	// LossFull takes the loss from the whole logits (Forward).
	LossFull
)

// shiftedLabels returns labels [B, T] shifted left by one position, the last position
// IgnoreIndex, flattened to [B·T]: the label of each position's logits. As in
// transformers, the labels are shifted rather than the logits, which saves a copy of
// the largest activation.
func shiftedLabels(labels *torch.Tensor) *torch.Tensor {
	b, t := labels.Size(0), labels.Size(1)
	pad := torch.Full([]int64{b, 1}, IgnoreIndex, labels.DType(), labels.Device())
	return torch.Cat([]*torch.Tensor{labels.Narrow(1, 1, t-1), pad}, 1).Reshape(-1)
}

// labelCount is the number of label tokens of shifted labels (those not IgnoreIndex),
// an int64 scalar on their device.
func labelCount(target *torch.Tensor) *torch.Tensor {
	return target.NeScalar(IgnoreIndex).Sum()
}

// CausalLMLoss is the next-token cross-entropy of logits [B, T, V] against labels
// [B, T] (the logits at t predict labels at t+1), the mean over the label tokens,
// ignoring labels of IgnoreIndex — transformers' ForCausalLMLoss: half-precision logits
// are upcast to float32 first.
func CausalLMLoss(logits, labels *torch.Tensor) *torch.Tensor {
	if logits.DType() != torch.Float32 && logits.DType() != torch.Float64 {
		logits = logits.ToDType(torch.Float32)
	}
	return torch.CrossEntropy(logits.Reshape(-1, logits.Size(2)), shiftedLabels(labels), torch.CrossEntropyOptions{})
}

// CausalLMLossSum is CausalLMLoss as the sum of the token losses, with the number of
// label tokens (an int64 scalar): sum/count is the mean, and summing both over
// micro-batches weights each by its tokens (transformers' num_items_in_batch).
func CausalLMLossSum(logits, labels *torch.Tensor) (sum, count *torch.Tensor) {
	if logits.DType() != torch.Float32 && logits.DType() != torch.Float64 {
		logits = logits.ToDType(torch.Float32)
	}
	target := shiftedLabels(labels)
	sum = torch.CrossEntropy(logits.Reshape(-1, logits.Size(2)), target, torch.CrossEntropyOptions{Reduction: torch.ReductionSum})
	return sum, labelCount(target)
}

// ChunkedCausalLMLossSum is CausalLMLossSum of head.Logits(hidden) computed chunk by
// chunk over the B·T positions of hidden [B, T, hidden_size], so that the logits of
// only one chunk exist at a time, in the forward pass and in the backward pass. Each
// chunk's logits are upcast to float32 (ForCausalLMLoss's logits.float()), and none is
// saved for backward: the chunk is recomputed there (torch.Checkpoint). chunk is the
// number of positions per chunk; 0 picks as many as make 2^25 logits. The gradients of
// hidden and of the head's weights are those of the unchunked loss.
func ChunkedCausalLMLossSum(hidden *torch.Tensor, head LMHead, labels *torch.Tensor, chunk int64) (sum, count *torch.Tensor) {
	target := shiftedLabels(labels)
	h := hidden.Reshape(-1, hidden.Size(2))
	n := h.Size(0)
	if chunk <= 0 {
		chunk = max(1, chunkElements/head.Layer.Weight.Size(0))
	}
	// Equal chunks rather than a short last one: the same number of chunks, each smaller.
	chunks := (n + chunk - 1) / chunk
	chunk = (n + chunks - 1) / chunks
	params := head.parameters()
	loss := func(in []*torch.Tensor) []*torch.Tensor {
		logits := head.Logits(in[0])
		if logits.DType() != torch.Float32 && logits.DType() != torch.Float64 {
			logits = logits.ToDType(torch.Float32)
		}
		return []*torch.Tensor{torch.CrossEntropy(logits, in[1], torch.CrossEntropyOptions{Reduction: torch.ReductionSum})}
	}
	parts := make([]*torch.Tensor, 0, chunks)
	for start := int64(0); start < n; start += chunk {
		c := min(chunk, n-start)
		// With gradients off Checkpoint is the plain call: the Local frees each chunk's
		// logits before the next.
		parts = append(parts, torch.Local(func() *torch.Tensor {
			return torch.Checkpoint(loss, []*torch.Tensor{h.Narrow(0, start, c), target.Narrow(0, start, c)}, params)[0]
		}))
	}
	if len(parts) == 1 {
		sum = parts[0]
	} else {
		sum = torch.Stack(parts, 0).Sum()
	}
	return sum, labelCount(target)
}

// ChunkedCausalLMLoss is the mean form of ChunkedCausalLMLossSum: CausalLMLoss of
// head.Logits(hidden) and labels, chunked.
func ChunkedCausalLMLoss(hidden *torch.Tensor, head LMHead, labels *torch.Tensor, chunk int64) *torch.Tensor {
	sum, count := ChunkedCausalLMLossSum(hidden, head, labels, chunk)
	return sum.Div(count)
}

// forwarder is the part of CausalLM the unchunked loss needs.
type forwarder interface {
	Forward(in DecoderInput) *torch.Tensor
}

// headed is the part of HiddenStateLM the chunked loss needs.
type headed interface {
	forwarder
	HiddenStates(in DecoderInput) *torch.Tensor
	OutputHead() LMHead
}

// chunked says whether LMLoss chunks m's loss in mode.
func chunked(m forwarder, mode LossMode) bool {
	hm, ok := m.(headed)
	switch {
	case !ok || mode == LossFull:
		return false
	case mode == LossChunked:
		return true
	}
	return hm.OutputHead().Layer.Weight.Size(0) >= ChunkedLossMinVocab
}

// LMLossSum returns m's next-token loss on in against labels [B, T] as the sum of the
// token losses and the number of label tokens (CausalLMLossSum), computed chunk by
// chunk (ChunkedCausalLMLossSum, default chunk) when mode says so.
func LMLossSum(m CausalLM, in DecoderInput, labels *torch.Tensor, mode LossMode) (sum, count *torch.Tensor) {
	return lmLossSum(m, chunked(m, mode), in, labels)
}

func lmLossSum(m forwarder, chunk bool, in DecoderInput, labels *torch.Tensor) (sum, count *torch.Tensor) {
	ts := torch.LocalN(func() []*torch.Tensor {
		var s, c *torch.Tensor
		aux := withRouterLoss(m, in, func() {
			if hm, ok := m.(headed); ok && chunk {
				s, c = ChunkedCausalLMLossSum(hm.HiddenStates(in), hm.OutputHead(), labels, 0)
			} else {
				s, c = CausalLMLossSum(m.Forward(in), labels)
			}
		})
		if aux != nil {
			// sum/count is then the mean plus the auxiliary loss, as transformers' loss.
			s = s.Add(aux.Mul(c))
		}
		return []*torch.Tensor{s, c}
	})
	return ts[0], ts[1]
}

// routed is a model whose loss adds its routers' auxiliary loss (a mixture of experts
// with output_router_logits, moe.go).
type routed interface {
	routerAuxLoss(mask *torch.Tensor, forward func()) *torch.Tensor
}

// withRouterLoss runs forward, m's forward on in, and returns the auxiliary loss of its
// routers over in's tokens, or nil when m has none.
func withRouterLoss(m forwarder, in DecoderInput, forward func()) *torch.Tensor {
	r, ok := m.(routed)
	if !ok {
		forward()
		return nil
	}
	return r.routerAuxLoss(in.AttentionMask, forward)
}

// LMLoss is the mean form of LMLossSum: transformers' loss for labels=, the mean
// cross-entropy over the label tokens. The tensors it makes besides the loss (the
// logits of an unchunked loss among them) are freed when it returns, unless autograd
// saved them.
func LMLoss(m CausalLM, in DecoderInput, labels *torch.Tensor, mode LossMode) *torch.Tensor {
	return lmLoss(m, chunked(m, mode), in, labels)
}

func lmLoss(m forwarder, chunk bool, in DecoderInput, labels *torch.Tensor) *torch.Tensor {
	return torch.Local(func() *torch.Tensor {
		if chunk {
			sum, count := lmLossSum(m, true, in, labels)
			return sum.Div(count)
		}
		var loss *torch.Tensor
		if aux := withRouterLoss(m, in, func() { loss = CausalLMLoss(m.Forward(in), labels) }); aux != nil {
			loss = loss.Add(aux)
		}
		return loss
	})
}
