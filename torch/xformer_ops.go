package torch

// Temporary, hand-written methods over cgotorch/xformer.go: the ops attention and
// transformer models need. They become rows of the generated op table with these same
// signatures.

import "github.com/gotrain/gotrain/cgotorch"

// ScaledDotProductAttention is F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
// dropout_p=dropout, is_causal=causal, scale=scale) over [..., L, E] queries and
// [..., S, E] keys and values; libtorch picks the kernel (flash, memory-efficient, cuDNN or
// math). mask may be nil; a bool mask marks with true the positions that take part, a
// float mask is added to the scores. scale <= 0 means PyTorch's default 1/sqrt(E).
// Dropout is applied as given: pass 0 in evaluation.
func ScaledDotProductAttention(q, k, v, mask *Tensor, dropout float64, causal bool, scale float64) *Tensor {
	h, err := cgotorch.SDPA(q.Handle(), k.Handle(), v.Handle(), opt(mask), dropout, causal, scale)
	return must("scaled_dot_product_attention", h, err)
}

// SDPBackend is a kernel behind ScaledDotProductAttention (torch.nn.attention.SDPBackend).
type SDPBackend int

// The backends, numbered as sdp::SDPBackend.
const (
	SDPError SDPBackend = iota - 1
	SDPMath
	SDPFlashAttention
	SDPEfficientAttention
	SDPCuDNNAttention
	SDPOverrideable
)

var sdpNames = map[SDPBackend]string{SDPError: "ERROR", SDPMath: "MATH", SDPFlashAttention: "FLASH_ATTENTION",
	SDPEfficientAttention: "EFFICIENT_ATTENTION", SDPCuDNNAttention: "CUDNN_ATTENTION", SDPOverrideable: "OVERRIDEABLE"}

// String returns the name PyTorch gives the backend ("FLASH_ATTENTION").
func (b SDPBackend) String() string {
	if s, ok := sdpNames[b]; ok {
		return s
	}
	return "SDPBackend(?)"
}

// ScaledDotProductAttentionBackend returns the kernel ScaledDotProductAttention would
// run for these arguments (torch._fused_sdp_choice).
func ScaledDotProductAttentionBackend(q, k, v, mask *Tensor, dropout float64, causal bool, scale float64) SDPBackend {
	b, err := cgotorch.SDPABackend(q.Handle(), k.Handle(), v.Handle(), opt(mask), dropout, causal, scale)
	check("_fused_sdp_choice", err)
	return SDPBackend(b)
}

// Triu returns the upper triangle of the last two dimensions: elements on and above the
// diagonal-th diagonal, zeros elsewhere.
func (t *Tensor) Triu(diagonal int64) *Tensor {
	h, err := cgotorch.Triu(t.Handle(), diagonal)
	return must("triu", h, err)
}

// Tril returns the lower triangle of the last two dimensions: elements on and below the
// diagonal-th diagonal, zeros elsewhere.
func (t *Tensor) Tril(diagonal int64) *Tensor {
	h, err := cgotorch.Tril(t.Handle(), diagonal)
	return must("tril", h, err)
}

func wrapAll(op string, hs []cgotorch.Tensor, err error) []*Tensor {
	check(op, err)
	out := make([]*Tensor, len(hs))
	for i, h := range hs {
		out[i] = wrap(h)
	}
	return out
}

// Split cuts t along dim into views of size elements each (the last may be smaller), as
// torch.split(t, size, dim).
func (t *Tensor) Split(size, dim int64) []*Tensor {
	hs, err := cgotorch.Split(t.Handle(), size, dim, false)
	return wrapAll("split", hs, err)
}

// Chunk cuts t along dim into at most chunks views of equal size (the last may be
// smaller), as torch.chunk(t, chunks, dim).
func (t *Tensor) Chunk(chunks, dim int64) []*Tensor {
	hs, err := cgotorch.Split(t.Handle(), chunks, dim, true)
	return wrapAll("chunk", hs, err)
}

// Baddbmm returns beta·t + alpha·(b1 @ b2) for batches of matrices b1 [B, n, m] and
// b2 [B, m, p], as torch.baddbmm.
func (t *Tensor) Baddbmm(b1, b2 *Tensor, beta, alpha float64) *Tensor {
	h, err := cgotorch.Baddbmm(t.Handle(), b1.Handle(), b2.Handle(), beta, alpha)
	return must("baddbmm", h, err)
}

// Addmm returns beta·t + alpha·(m1 @ m2) for matrices, as torch.addmm (Hugging Face's
// Conv1D is addmm(bias, x, weight)).
func (t *Tensor) Addmm(m1, m2 *Tensor, beta, alpha float64) *Tensor {
	h, err := cgotorch.Addmm(t.Handle(), m1.Handle(), m2.Handle(), beta, alpha)
	return must("addmm", h, err)
}

// Multinomial draws numSamples indices from each row of the non-negative weights t
// (1-D or 2-D) with torch's default generator, as torch.multinomial: seeding with
// ManualSeed repeats the draws.
func (t *Tensor) Multinomial(numSamples int64, replacement bool) *Tensor {
	h, err := cgotorch.Multinomial(t.Handle(), numSamples, replacement)
	return must("multinomial", h, err)
}

// OneHot returns the int64 one-hot encoding of the class indices in t with numClasses
// classes (-1: one more than the largest index), as F.one_hot.
func (t *Tensor) OneHot(numClasses int64) *Tensor {
	h, err := cgotorch.OneHot(t.Handle(), numClasses)
	return must("one_hot", h, err)
}

// Sort sorts t along dim and returns the sorted values and their original indices, as
// torch.sort(t, dim=dim, descending=descending, stable=stable).
func (t *Tensor) Sort(dim int64, descending, stable bool) (values, indices *Tensor) {
	v, i, err := cgotorch.Sort(t.Handle(), dim, descending, stable)
	check("sort", err)
	return wrap(v), wrap(i)
}

// Scatter returns a copy of t with src[i][j] written at position index[i][j] of dim (for
// dim 1 of 2-D tensors; likewise for other ranks), as torch.scatter(t, dim, index, src).
func (t *Tensor) Scatter(dim int64, index, src *Tensor) *Tensor {
	h, err := cgotorch.Scatter(t.Handle(), dim, index.Handle(), src.Handle())
	return must("scatter", h, err)
}
