package torch_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
)

// Attention inputs, built from arange on both sides: queries [2, 2, 5, 4] and keys and
// values [2, 2, 6, 4], a bool mask (true takes part) and an additive float mask [5, 6].
const pyAttnInputs = `
import torch, json, sys
import torch.nn.functional as F
def ar(*shape):
    n = 1
    for s in shape: n *= s
    return torch.arange(n, dtype=torch.float32).reshape(*shape)
q = (ar(2, 2, 5, 4) * 0.31).sin()
k = (ar(2, 2, 6, 4) * 0.17).cos()
v = (ar(2, 2, 6, 4) * 0.23).sin() * 2
w = (ar(2, 2, 5, 4) * 0.07).cos()
bmask = (ar(5, 6) % 3) != 1
fmask = (ar(5, 6) * 0.4).sin()
sq = (ar(5, 5) * 0.3).cos()
`

func goAttnInputs() map[string]*torch.Tensor {
	ar := func(shape ...int64) *torch.Tensor {
		n := int64(1)
		for _, s := range shape {
			n *= s
		}
		return torch.Arange(0, float64(n), 1, torch.Float32, torch.CPU).Reshape(shape...)
	}
	return map[string]*torch.Tensor{
		"q":     ar(2, 2, 5, 4).MulScalar(0.31).Sin(),
		"k":     ar(2, 2, 6, 4).MulScalar(0.17).Cos(),
		"v":     ar(2, 2, 6, 4).MulScalar(0.23).Sin().MulScalar(2),
		"w":     ar(2, 2, 5, 4).MulScalar(0.07).Cos(),
		"bmask": ar(5, 6).RemainderScalar(3).NeScalar(1),
		"fmask": ar(5, 6).MulScalar(0.4).Sin(),
		"sq":    ar(5, 5).MulScalar(0.3).Cos(),
	}
}

// sdpaCases are F.scaled_dot_product_attention's keyword arguments (as Python source) and
// the same call from Go.
var sdpaCases = []struct {
	name, py string
	mask     string
	causal   bool
	scale    float64
}{
	{"unmasked", "", "", false, 0},
	{"causal", "is_causal=True", "", true, 0},
	{"bool_mask", "attn_mask=bmask", "bmask", false, 0},
	{"float_mask", "attn_mask=fmask", "fmask", false, 0},
	{"scaled", "scale=0.9", "", false, 0.9},
	{"causal_scaled", "is_causal=True, scale=0.3", "", true, 0.3},
}

// TestScaledDotProductAttentionMatchesPyTorch is issue 14, acceptance 2 on the CPU: the
// output and the gradients of q, k and v equal PyTorch's for causal, masked and unmasked
// attention.
func TestScaledDotProductAttentionMatchesPyTorch(t *testing.T) {
	script := pyAttnInputs + `
out = {}
for name, kw in json.loads(sys.argv[1]).items():
    qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
    o = eval("F.scaled_dot_product_attention(qq, kk, vv" + (", " + kw if kw else "") + ")")
    (o * w).sum().backward()
    for part, r in (("out", o), ("q", qq.grad), ("k", kk.grad), ("v", vv.grad)):
        out[name + "." + part] = {"shape": list(r.shape), "values": r.detach().double().flatten().tolist()}
print(json.dumps(out))
`
	kws := map[string]string{}
	for _, c := range sdpaCases {
		kws[c.name] = c.py
	}
	js, err := json.Marshal(kws)
	require.NoError(t, err)
	var want map[string]pyResult
	require.NoError(t, json.Unmarshal(testpy.Run(t, script, []string{"torch"}, string(js)), &want))

	torch.WithScope(func() {
		in := goAttnInputs()
		for _, c := range sdpaCases {
			q := in["q"].Detach().SetRequiresGrad(true)
			k := in["k"].Detach().SetRequiresGrad(true)
			v := in["v"].Detach().SetRequiresGrad(true)
			var mask *torch.Tensor
			if c.mask != "" {
				mask = in[c.mask]
			}
			o := torch.ScaledDotProductAttention(q, k, v, mask, 0, c.causal, c.scale)
			o.Mul(in["w"]).Sum().Backward()
			for part, got := range map[string]*torch.Tensor{"out": o, "q": q.Grad(), "k": k.Grad(), "v": v.Grad()} {
				require.NotNil(t, got, c.name+"."+part)
				requireClose(t, c.name+"."+part, want[c.name+"."+part], got.Shape(), got.Float64s(), 1e-5)
			}
		}
		// The CPU has one fused kernel choice to report; the GPU script checks CUDA's.
		b := torch.ScaledDotProductAttentionBackend(in["q"], in["k"], in["v"], nil, 0, false, 0)
		assert.Contains(t, []torch.SDPBackend{torch.SDPMath, torch.SDPFlashAttention}, b, b.String())
	})
}

// TestTransformerOpsMatchPyTorch covers the other ops the transformer models are built
// from, each against the same expression in PyTorch.
func TestTransformerOpsMatchPyTorch(t *testing.T) {
	type tcase struct {
		name, py string
		go_      func(in map[string]*torch.Tensor) *torch.Tensor
	}
	f32 := func(x *torch.Tensor) *torch.Tensor { return x.ToDType(torch.Float32) }
	cases := []tcase{
		{"triu", "sq.triu(1)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["sq"].Triu(1) }},
		{"triu_neg", "fmask.triu(-1)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["fmask"].Triu(-1) }},
		{"tril", "sq.tril(0)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["sq"].Tril(0) }},
		{"tril_batched", "q.tril(-2)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["q"].Tril(-2) }},
		{"split", "torch.stack([p.sum() for p in fmask.split(4, 1)] + [torch.tensor(float(len(fmask.split(4, 1))))])", func(i map[string]*torch.Tensor) *torch.Tensor {
			return sumsAndCount(i["fmask"].Split(4, 1))
		}},
		{"split_last", "fmask.split(4, 1)[-1]", func(i map[string]*torch.Tensor) *torch.Tensor { p := i["fmask"].Split(4, 1); return p[len(p)-1] }},
		{"chunk", "torch.stack([p.sum() for p in sq.chunk(3, 0)] + [torch.tensor(float(len(sq.chunk(3, 0))))])", func(i map[string]*torch.Tensor) *torch.Tensor {
			return sumsAndCount(i["sq"].Chunk(3, 0))
		}},
		{"chunk_qkv", "torch.cat(k.chunk(2, -1), 0)", func(i map[string]*torch.Tensor) *torch.Tensor { return torch.Cat(i["k"].Chunk(2, -1), 0) }},
		{"baddbmm", "torch.baddbmm(fmask, q[0], k[1].transpose(1, 2), beta=0.5, alpha=-1.5)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return i["fmask"].Baddbmm(i["q"].Select(0, 0), i["k"].Select(0, 1).Transpose(1, 2), 0.5, -1.5)
		}},
		{"addmm", "torch.addmm(fmask[0], q[0, 0], k[0, 1].t())", func(i map[string]*torch.Tensor) *torch.Tensor {
			return i["fmask"].Select(0, 0).Addmm(i["q"].Select(0, 0).Select(0, 0), i["k"].Select(0, 0).Select(0, 1).T(), 1, 1)
		}},
		{"one_hot", "F.one_hot((sq * 3).abs().long(), 4).float()", func(i map[string]*torch.Tensor) *torch.Tensor {
			return f32(i["sq"].MulScalar(3).Abs().ToDType(torch.Int64).OneHot(4))
		}},
		{"one_hot_inferred", "F.one_hot((sq * 3).abs().long()).float()", func(i map[string]*torch.Tensor) *torch.Tensor {
			return f32(i["sq"].MulScalar(3).Abs().ToDType(torch.Int64).OneHot(-1))
		}},
		{"sort_values", "fmask.sort(dim=1, descending=True).values", func(i map[string]*torch.Tensor) *torch.Tensor { v, _ := i["fmask"].Sort(1, true, true); return v }},
		{"sort_indices", "fmask.sort(dim=0, stable=True).indices.float()", func(i map[string]*torch.Tensor) *torch.Tensor {
			_, ix := i["fmask"].Sort(0, false, true)
			return f32(ix)
		}},
		{"scatter", "torch.zeros(5, 6).scatter(1, fmask.argsort(1), fmask)", func(i map[string]*torch.Tensor) *torch.Tensor {
			_, ix := i["fmask"].Sort(1, false, true)
			return torch.Zeros([]int64{5, 6}, torch.Float32, torch.CPU).Scatter(1, ix, i["fmask"])
		}},
		{"scatter_add", "torch.ones(5, 6).scatter_add(1, (sq * 3).abs().clamp(0, 5).long(), fmask)", func(i map[string]*torch.Tensor) *torch.Tensor {
			ix := i["sq"].MulScalar(3).Abs().Clamp(0, 5).ToDType(torch.Int64)
			return torch.Ones([]int64{5, 6}, torch.Float32, torch.CPU).ScatterAdd(1, ix, i["fmask"])
		}},
		{"index_add", "fmask.index_add(0, torch.tensor([4, 0, 4]), fmask[:3] * 2)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return i["fmask"].IndexAdd(0, torch.FromSlice([]int64{4, 0, 4}), i["fmask"].Narrow(0, 0, 3).MulScalar(2))
		}},
		{"bincount", "torch.bincount(torch.tensor([3, 0, 3, 1]), minlength=6).float()", func(i map[string]*torch.Tensor) *torch.Tensor {
			return f32(torch.FromSlice([]int64{3, 0, 3, 1}).Bincount(nil, 6))
		}},
		{"bincount_weights", "torch.bincount(torch.tensor([3, 0, 3, 1]), weights=fmask[0, :4], minlength=2)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.FromSlice([]int64{3, 0, 3, 1}).Bincount(i["fmask"].Select(0, 0).Narrow(0, 0, 4), 2)
		}},
		{"multinomial", "(torch.manual_seed(7), torch.multinomial(fmask.exp(), 3))[1].float()", func(i map[string]*torch.Tensor) *torch.Tensor {
			torch.ManualSeed(7)
			return f32(i["fmask"].Exp().Multinomial(3, false))
		}},
		{"multinomial_replacement", "(torch.manual_seed(8), torch.multinomial(fmask.exp(), 9, True))[1].float()", func(i map[string]*torch.Tensor) *torch.Tensor {
			torch.ManualSeed(8)
			return f32(i["fmask"].Exp().Multinomial(9, true))
		}},
	}
	script := pyAttnInputs + `
out = {}
for name, e in json.loads(sys.argv[1]).items():
    r = eval(e)
    out[name] = {"shape": list(r.shape), "values": r.detach().double().flatten().tolist()}
print(json.dumps(out))
`
	exprs := map[string]string{}
	for _, c := range cases {
		exprs[c.name] = c.py
	}
	js, err := json.Marshal(exprs)
	require.NoError(t, err)
	var want map[string]pyResult
	require.NoError(t, json.Unmarshal(testpy.Run(t, script, []string{"torch"}, string(js)), &want))
	torch.WithScope(func() {
		in := goAttnInputs()
		for _, c := range cases {
			got := c.go_(in)
			requireClose(t, c.name, want[c.name], got.Shape(), got.Float64s(), 1e-6)
		}
	})
}

// sumsAndCount is the sum of each part and the number of parts, as one float tensor.
func sumsAndCount(parts []*torch.Tensor) *torch.Tensor {
	s := make([]*torch.Tensor, 0, len(parts)+1)
	for _, p := range parts {
		s = append(s, p.Sum())
	}
	return torch.Stack(append(s, torch.Scalar(float64(len(parts)))), 0)
}

func TestSplitChunkErrors(t *testing.T) {
	torch.WithScope(func() {
		x := torch.Zeros([]int64{4, 3}, torch.Float32, torch.CPU)
		assert.Len(t, x.Chunk(8, 0), 4, "chunk returns fewer parts when the size runs out")
		assert.Panics(t, func() { x.Split(0, 0) })
		assert.Panics(t, func() { x.Chunk(2, 5) })
		assert.Panics(t, func() { torch.ScaledDotProductAttention(x, x.Reshape(3, 4), x, nil, 0, false, 0) })
	})
}
