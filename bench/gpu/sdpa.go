package main

import (
	"fmt"
	"math"

	"github.com/gotrain/gotrain/torch"
)

// sdpaCase is one attention shape and dtype: the backend libtorch picks for it and how
// far the fused kernel's output and gradients are from the fp32 reference.
type sdpaCase struct {
	Model   string  `json:"model"`
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"` // [batch, heads, length, head dim] of q, k and v
	Causal  bool    `json:"causal"`
	Backend string  `json:"backend"`
	// Errors are max|x − ref| / max|ref| for the output and the three gradients, ref
	// being softmax(q·kᵀ·scale + mask)·v in float32 on the same (rounded) inputs.
	Errors map[string]float64 `json:"errors"`
	// MathErrors are the same errors of the same plain ops run in the low precision:
	// the error a correct but unfused kernel makes, for scale.
	MathErrors map[string]float64 `json:"math_errors"`
	Tolerance  float64            `json:"tolerance"`
	Pass       bool               `json:"pass"`
	Failure    string             `json:"failure,omitempty"`
}

// sdpaResult is what `gpu sdpa` prints.
type sdpaResult struct {
	Device string     `json:"device"`
	Torch  string     `json:"torch"`
	Cases  []sdpaCase `json:"cases"`
	Pass   bool       `json:"pass"`
}

// tolerances are 4 units of roundoff of each dtype, relative to the largest value.
var tolerances = map[torch.DType]float64{torch.BFloat16: 4 * math.Pow(2, -8), torch.Float16: 4 * math.Pow(2, -11)}

func runSDPA(o options) (any, bool, error) {
	gc, gb, gt := gptSetup(o.size())
	vc, vb := vitSetup(o.size())
	vs := (vc.ImageSize/vc.PatchSize)*(vc.ImageSize/vc.PatchSize) + 1
	shapes := []struct {
		model  string
		shape  []int64
		causal bool
	}{
		// GPT2Attention: causal, no mask, q/k/v views [B, H, T, D] of c_attn's output.
		{"gpt", []int64{gb, gc.NHead, gt, gc.NEmbd / gc.NHead}, true},
		// torchvision's EncoderBlock through nn.MultiheadAttention: no mask, 197 tokens.
		{"vit", []int64{vb, vc.NumHeads, vs, vc.HiddenDim / vc.NumHeads}, false},
	}
	res := sdpaResult{Device: o.device.String(), Torch: torch.Version(), Pass: true}
	torch.ManualSeed(0)
	for _, s := range shapes {
		for _, dt := range []torch.DType{torch.BFloat16, torch.Float16} {
			c := sdpaCase{Model: s.model, DType: dt.String(), Shape: s.shape, Causal: s.causal, Tolerance: tolerances[dt]}
			if err := checkSDPA(&c, dt, o.device); err != nil {
				c.Failure = err.Error()
			}
			c.Pass = c.Failure == ""
			res.Pass = res.Pass && c.Pass
			res.Cases = append(res.Cases, c)
		}
	}
	return res, res.Pass, nil
}

// checkSDPA fills c.Backend, c.Errors and c.MathErrors, and sets c.Failure when the
// fused kernel is further from the reference than the tolerance (or than twice the
// low-precision math path, whichever is larger), or when CUDA falls back to the math
// kernel for a shape the fused kernels support.
func checkSDPA(c *sdpaCase, dt torch.DType, dev torch.Device) (err error) {
	defer torch.Recover(&err, "sdpa "+c.Model+" "+c.DType)
	torch.WithScope(func() {
		b, h, l, d := c.Shape[0], c.Shape[1], c.Shape[2], c.Shape[3]
		// [B, L, H, D] transposed to [B, H, L, D], the strides the models hand SDPA.
		leaf := func() *torch.Tensor {
			return torch.Randn([]int64{b, l, h, d}, torch.Float32, dev).ToDType(dt).Transpose(1, 2).Detach().SetRequiresGrad(true)
		}
		q, k, v := leaf(), leaf(), leaf()
		dout := torch.Randn([]int64{b, h, l, d}, torch.Float32, dev).ToDType(dt)
		scale := 1 / math.Sqrt(float64(d))
		c.Backend = torch.ScaledDotProductAttentionBackend(q, k, v, nil, 0, c.Causal, scale).String()

		fused := attentionGrads(func(q, k, v *torch.Tensor) *torch.Tensor {
			return torch.ScaledDotProductAttention(q, k, v, nil, 0, c.Causal, scale)
		}, q, k, v, dout)
		plain := func(q, k, v *torch.Tensor) *torch.Tensor { return plainAttention(q, k, v, scale, c.Causal) }
		up := func(x *torch.Tensor) *torch.Tensor { return x.Detach().ToDType(torch.Float32).SetRequiresGrad(true) }
		ref := attentionGrads(plain, up(q), up(k), up(v), dout.ToDType(torch.Float32))
		lowp := attentionGrads(plain, q.Detach().SetRequiresGrad(true), k.Detach().SetRequiresGrad(true), v.Detach().SetRequiresGrad(true), dout)

		c.Errors, c.MathErrors = map[string]float64{}, map[string]float64{}
		for i, name := range []string{"out", "dq", "dk", "dv"} {
			c.Errors[name] = relErr(fused[i], ref[i])
			c.MathErrors[name] = relErr(lowp[i], ref[i])
			if limit := max(c.Tolerance, 2*c.MathErrors[name]); !(c.Errors[name] <= limit) {
				c.Failure += fmt.Sprintf("%s: error %.3g > %.3g; ", name, c.Errors[name], limit)
			}
		}
		if c.Backend == torch.SDPError.String() {
			c.Failure += "no SDPA backend accepts these inputs; "
		}
		if dev.IsCUDA() && c.Backend == torch.SDPMath.String() {
			c.Failure += "CUDA picked the math kernel, not a fused one; "
		}
	})
	return nil
}

// attentionGrads runs attn forward and backward with output gradient dout and returns
// the output and the gradients of q, k and v.
func attentionGrads(attn func(q, k, v *torch.Tensor) *torch.Tensor, q, k, v, dout *torch.Tensor) []*torch.Tensor {
	out := attn(q, k, v)
	out.BackwardWith(dout, false)
	return []*torch.Tensor{out.Detach(), q.Grad(), k.Grad(), v.Grad()}
}

// plainAttention is softmax(q·kᵀ·scale + mask)·v in q's dtype, the causal mask hiding
// the positions after each query's own.
func plainAttention(q, k, v *torch.Tensor, scale float64, causal bool) *torch.Tensor {
	scores := q.Matmul(k.Transpose(-2, -1)).MulScalar(scale)
	if causal {
		l, s := q.Size(2), k.Size(2)
		scores = scores.MaskedFill(torch.Ones([]int64{l, s}, torch.Bool, q.Device()).Triu(1), math.Inf(-1))
	}
	return scores.Softmax(-1).Matmul(v)
}

// relErr is max|x − ref| / max|ref|, computed in float32.
func relErr(x, ref *torch.Tensor) float64 {
	diff := x.ToDType(torch.Float32).Sub(ref).Abs().Max().Item()
	return diff / ref.Abs().Max().Item()
}
