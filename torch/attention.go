package torch

// ScaledDotProductAttention is F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
// dropout_p=dropout, is_causal=causal, scale=scale) over [..., L, E] queries and
// [..., S, E] keys and values; libtorch picks the kernel (flash, memory-efficient, cuDNN or
// math). mask may be nil; a bool mask marks with true the positions that take part, a
// float mask is added to the scores. scale <= 0 means PyTorch's default 1/sqrt(E).
// Dropout is applied as given: pass 0 in evaluation.
func ScaledDotProductAttention(q, k, v, mask *Tensor, dropout float64, causal bool, scale float64) *Tensor {
	return scaledDotProductAttention(q, k, v, mask, dropout, causal, scale, scale > 0)
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
	return SDPBackend(sdpBackend(q, k, v, mask, dropout, causal, scale, scale > 0))
}
