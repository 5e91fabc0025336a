package torch_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
)

// The inputs are built the same way on both sides from arange, so no numbers are typed twice.
const pyInputs = `
import torch, json, sys
torch.set_printoptions(precision=10)
a = (torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.37 - 1.5)
b = (torch.arange(12, dtype=torch.float32).reshape(3, 4).flip(1) * 0.21 + 0.1)
m = (torch.arange(20, dtype=torch.float32).reshape(4, 5) * 0.05 - 0.4)
x4 = (torch.arange(2*3*6*6, dtype=torch.float32).reshape(2, 3, 6, 6).sin())
w4 = (torch.arange(4*3*3*3, dtype=torch.float32).reshape(4, 3, 3, 3).cos() * 0.2)
bias4 = torch.arange(4, dtype=torch.float32) * 0.1
y = torch.tensor([1, 0, 3])
idx = torch.tensor([2, 0])
mask = a > 0
import torch.nn.functional as F
`

func goInputs() map[string]*torch.Tensor {
	ar := func(n int64, shape ...int64) *torch.Tensor {
		t := torch.Arange(0, float64(n), 1, torch.Float32, torch.CPU)
		if len(shape) == 0 {
			return t
		}
		return t.Reshape(shape...)
	}
	in := map[string]*torch.Tensor{}
	in["a"] = ar(12, 3, 4).MulScalar(0.37).SubScalar(1.5)
	in["b"] = ar(12, 3, 4).Flip(1).MulScalar(0.21).AddScalar(0.1)
	in["m"] = ar(20, 4, 5).MulScalar(0.05).SubScalar(0.4)
	in["x4"] = ar(2*3*6*6, 2, 3, 6, 6).Sin()
	in["w4"] = ar(4*3*3*3, 4, 3, 3, 3).Cos().MulScalar(0.2)
	in["bias4"] = ar(4).MulScalar(0.1)
	in["y"] = torch.FromSlice([]int64{1, 0, 3})
	in["idx"] = torch.FromSlice([]int64{2, 0})
	in["mask"] = in["a"].GtScalar(0)
	return in
}

type opCase struct {
	name string
	py   string
	go_  func(in map[string]*torch.Tensor) *torch.Tensor
}

func opCases() []opCase {
	T := func(in map[string]*torch.Tensor, k string) *torch.Tensor { return in[k] }
	return []opCase{
		{"add", "a + b", func(i map[string]*torch.Tensor) *torch.Tensor { return T(i, "a").Add(i["b"]) }},
		{"sub", "a - b", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Sub(i["b"]) }},
		{"mul", "a * b", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Mul(i["b"]) }},
		{"div", "a / b", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Div(i["b"]) }},
		{"broadcast", "a + b[0]", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Add(i["b"].Select(0, 0)) }},
		{"pow", "b ** 1.7", func(i map[string]*torch.Tensor) *torch.Tensor { return i["b"].PowScalar(1.7) }},
		{"rsub", "2 - a", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].RSubScalar(2) }},
		{"exp", "a.exp()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Exp() }},
		{"log", "b.log()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["b"].Log() }},
		{"sqrt", "b.sqrt()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["b"].Sqrt() }},
		{"abs", "a.abs()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Abs() }},
		{"neg", "-a", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Neg() }},
		{"clamp", "a.clamp(-0.5, 0.8)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Clamp(-0.5, 0.8) }},
		{"eq", "(a > b).float()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Gt(i["b"]).ToDType(torch.Float32) }},
		{"le_scalar", "(a <= 0.2).float()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].LeScalar(0.2).ToDType(torch.Float32) }},
		{"maximum", "torch.maximum(a, b)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Maximum(i["b"]) }},
		{"matmul", "a @ m", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Matmul(i["m"]) }},
		{"mm", "a.t().mm(b)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].T().MM(i["b"]) }},
		{"bmm", "torch.bmm(x4[0], x4[1].transpose(1, 2))", func(i map[string]*torch.Tensor) *torch.Tensor {
			return i["x4"].Select(0, 0).BMM(i["x4"].Select(0, 1).Transpose(1, 2))
		}},
		{"sum", "a.sum()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Sum() }},
		{"sum_dim", "a.sum(dim=1, keepdim=True)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].SumDims([]int64{1}, true) }},
		{"mean", "a.mean(dim=0)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].MeanDims([]int64{0}, false) }},
		{"max", "a.max()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Max() }},
		{"min", "a.min()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Min() }},
		{"max_dim", "a.max(dim=1).values", func(i map[string]*torch.Tensor) *torch.Tensor { v, _ := i["a"].MaxDim(1, false); return v }},
		{"argmax", "b.argmax(dim=1).float()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["b"].Argmax(1, false).ToDType(torch.Float32) }},
		{"topk", "m.topk(2, dim=1).values", func(i map[string]*torch.Tensor) *torch.Tensor { v, _ := i["m"].TopK(2, 1, true, true); return v }},
		{"topk_idx", "m.topk(2, dim=1).indices.float()", func(i map[string]*torch.Tensor) *torch.Tensor {
			_, ix := i["m"].TopK(2, 1, true, true)
			return ix.ToDType(torch.Float32)
		}},
		{"view", "a.view(4, 3)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].View(4, 3) }},
		{"permute", "x4.permute(0, 2, 3, 1).contiguous()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["x4"].Permute(0, 2, 3, 1).Contiguous() }},
		{"transpose", "a.transpose(0, 1)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Transpose(0, 1) }},
		{"flatten", "x4.flatten(1)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["x4"].Flatten(1, -1) }},
		{"squeeze", "a.unsqueeze(1).squeeze(1)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Unsqueeze(1).SqueezeDim(1) }},
		{"cat", "torch.cat([a, b], dim=1)", func(i map[string]*torch.Tensor) *torch.Tensor { return torch.Cat([]*torch.Tensor{i["a"], i["b"]}, 1) }},
		{"stack", "torch.stack([a, b])", func(i map[string]*torch.Tensor) *torch.Tensor { return torch.Stack([]*torch.Tensor{i["a"], i["b"]}, 0) }},
		{"index_select", "a.index_select(0, idx)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].IndexSelect(0, i["idx"]) }},
		{"narrow", "a.narrow(1, 1, 2)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Narrow(1, 1, 2) }},
		{"slice", "a[:, 1::2]", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Slice(1, 1, 4, 2) }},
		{"gather", "a.gather(1, y.unsqueeze(1))", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Gather(1, i["y"].Unsqueeze(1)) }},
		{"masked_fill", "a.masked_fill(mask, 9.5)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].MaskedFill(i["mask"], 9.5) }},
		{"masked_select", "a.masked_select(mask)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].MaskedSelect(i["mask"]) }},
		{"where", "torch.where(mask, a, b)", func(i map[string]*torch.Tensor) *torch.Tensor { return torch.Where(i["mask"], i["a"], i["b"]) }},
		{"relu", "a.relu()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].ReLU() }},
		{"leaky_relu", "F.leaky_relu(a, 0.1)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].LeakyReLU(0.1) }},
		{"gelu", "F.gelu(a)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].GELU(false) }},
		{"silu", "F.silu(a)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].SiLU() }},
		{"sigmoid", "a.sigmoid()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Sigmoid() }},
		{"tanh", "a.tanh()", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Tanh() }},
		{"softmax", "a.softmax(dim=1)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].Softmax(1) }},
		{"log_softmax", "a.log_softmax(dim=1)", func(i map[string]*torch.Tensor) *torch.Tensor { return i["a"].LogSoftmax(1) }},
		{"linear", "F.linear(a, m.t()[:, :4] if False else b, bias4[:3])", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.Linear(i["a"], i["b"], i["bias4"].Narrow(0, 0, 3))
		}},
		{"conv2d", "F.conv2d(x4, w4, bias4, stride=1, padding=1)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.Conv2d(i["x4"], i["w4"], i["bias4"], torch.Conv2dOptions{Padding: [2]int64{1, 1}})
		}},
		{"conv2d_stride", "F.conv2d(x4, w4, None, stride=2, dilation=2)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.Conv2d(i["x4"], i["w4"], nil, torch.Conv2dOptions{Stride: [2]int64{2, 2}, Dilation: [2]int64{2, 2}})
		}},
		{"max_pool2d", "F.max_pool2d(x4, 2)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.MaxPool2d(i["x4"], torch.Pool2dOptions{Kernel: [2]int64{2, 2}})
		}},
		{"avg_pool2d", "F.avg_pool2d(x4, 3, stride=2, padding=1)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.AvgPool2d(i["x4"], torch.Pool2dOptions{Kernel: [2]int64{3, 3}, Stride: [2]int64{2, 2}, Padding: [2]int64{1, 1}})
		}},
		{"adaptive_avg_pool2d", "F.adaptive_avg_pool2d(x4, (2, 3))", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.AdaptiveAvgPool2d(i["x4"], 2, 3)
		}},
		{"batch_norm_eval", "F.batch_norm(x4, bias4[:3], bias4[1:]+1, bias4[:3]+0.5, bias4[1:], training=False)", func(i map[string]*torch.Tensor) *torch.Tensor {
			bb := i["bias4"]
			return torch.BatchNorm(i["x4"], bb.Narrow(0, 0, 3), bb.Narrow(0, 1, 3).AddScalar(1), bb.Narrow(0, 0, 3).AddScalar(0.5), bb.Narrow(0, 1, 3), false, 0.1, 1e-5)
		}},
		{"batch_norm_train", "F.batch_norm(x4, None, None, None, None, training=True)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.BatchNorm(i["x4"], nil, nil, nil, nil, true, 0.1, 1e-5)
		}},
		{"layer_norm", "F.layer_norm(a, (4,), b[0], b[1])", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.LayerNorm(i["a"], []int64{4}, i["b"].Select(0, 0), i["b"].Select(0, 1), 1e-5)
		}},
		{"group_norm", "F.group_norm(x4.reshape(2, 6, 3, 6), 3)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.GroupNorm(i["x4"].Reshape(2, 6, 3, 6), 3, nil, nil, 1e-5)
		}},
		{"dropout_eval", "F.dropout(a, 0.5, training=False)", func(i map[string]*torch.Tensor) *torch.Tensor { return torch.Dropout(i["a"], 0.5, false) }},
		{"embedding", "F.embedding(y, m)", func(i map[string]*torch.Tensor) *torch.Tensor { return torch.Embedding(i["m"], i["y"], -1) }},
		{"cross_entropy", "F.cross_entropy(a, y)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.CrossEntropy(i["a"], i["y"], torch.CrossEntropyOptions{})
		}},
		{"cross_entropy_opts", "F.cross_entropy(a, y, weight=b[0], label_smoothing=0.1, ignore_index=0, reduction='sum')", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.CrossEntropy(i["a"], i["y"], torch.CrossEntropyOptions{Weight: i["b"].Select(0, 0), LabelSmoothing: 0.1, IgnoreIndex: 0, IgnoreIndexSet: true, Reduction: torch.ReductionSum})
		}},
		{"nll", "F.nll_loss(a.log_softmax(1), y, reduction='none')", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.NLLLoss(i["a"].LogSoftmax(1), i["y"], torch.CrossEntropyOptions{Reduction: torch.ReductionNone})
		}},
		{"mse", "F.mse_loss(a, b)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.MSELoss(i["a"], i["b"], torch.ReductionMean)
		}},
		{"l1", "F.l1_loss(a, b, reduction='sum')", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.L1Loss(i["a"], i["b"], torch.ReductionSum)
		}},
		{"smooth_l1", "F.smooth_l1_loss(a, b, beta=0.5)", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.SmoothL1Loss(i["a"], i["b"], torch.ReductionMean, 0.5)
		}},
		{"bce_logits", "F.binary_cross_entropy_with_logits(a, mask.float(), pos_weight=b[0])", func(i map[string]*torch.Tensor) *torch.Tensor {
			return torch.BCEWithLogits(i["a"], i["mask"].ToDType(torch.Float32), nil, i["b"].Select(0, 0), torch.ReductionMean)
		}},
	}
}

type pyResult struct {
	Shape  []int64   `json:"shape"`
	Values []float64 `json:"values"`
}

func runPython(t *testing.T, exprs map[string]string) map[string]pyResult {
	t.Helper()
	js, err := json.Marshal(exprs)
	require.NoError(t, err)
	script := pyInputs + `
exprs = json.loads(sys.argv[1])
out = {}
for k, e in exprs.items():
    r = eval(e)
    out[k] = {"shape": list(r.shape), "values": r.detach().double().flatten().tolist()}
print(json.dumps(out))
`
	var res map[string]pyResult
	require.NoError(t, json.Unmarshal(testpy.Run(t, script, []string{"torch"}, string(js)), &res))
	return res
}

func requireClose(t *testing.T, name string, want pyResult, gotShape []int64, got []float64, tol float64) {
	t.Helper()
	if len(want.Shape) == 0 {
		want.Shape = []int64{}
	}
	require.Equal(t, want.Shape, gotShape, "%s: shape", name)
	require.Len(t, got, len(want.Values), "%s: element count", name)
	for i := range got {
		diff := math.Abs(got[i] - want.Values[i])
		require.LessOrEqual(t, diff, tol*math.Max(1, math.Abs(want.Values[i])), "%s: element %d: go %v python %v", name, i, got[i], want.Values[i])
	}
}

func TestOpsMatchPyTorch(t *testing.T) {
	cases := opCases()
	exprs := map[string]string{}
	for _, c := range cases {
		exprs[c.name] = c.py
	}
	want := runPython(t, exprs)
	torch.WithScope(func() {
		in := goInputs()
		for _, c := range cases {
			got := c.go_(in)
			requireClose(t, c.name, want[c.name], got.Shape(), got.Float64s(), 1e-6)
		}
	})
}

// TestGradientsMatchPyTorch compares the loss and gradients of a small
// conv-batchnorm-pool-linear net at fixed weights.
func TestGradientsMatchPyTorch(t *testing.T) {
	script := pyInputs + `
w4.requires_grad_(); bias4.requires_grad_()
lw = (torch.arange(10*4*3*3, dtype=torch.float32).reshape(10, 36).cos() * 0.1).requires_grad_()
h = F.conv2d(x4, w4, bias4, padding=1)
h = F.batch_norm(h, None, None, training=True).relu()
h = F.max_pool2d(h, 2).flatten(1)
logits = F.linear(h, lw)
loss = F.cross_entropy(logits, torch.tensor([3, 7]))
loss.backward()
out = {k: {"shape": list(v.shape), "values": v.detach().double().flatten().tolist()} for k, v in
       {"loss": loss, "w4": w4.grad, "bias4": bias4.grad, "lw": lw.grad}.items()}
print(json.dumps(out))
`
	var want map[string]pyResult
	require.NoError(t, json.Unmarshal(testpy.Run(t, script, []string{"torch"}), &want))

	torch.WithScope(func() {
		in := goInputs()
		w4 := in["w4"].Detach().SetRequiresGrad(true)
		b4 := in["bias4"].Detach().SetRequiresGrad(true)
		lw := torch.Arange(0, 360, 1, torch.Float32, torch.CPU).Reshape(10, 36).Cos().MulScalar(0.1).SetRequiresGrad(true)
		h := torch.Conv2d(in["x4"], w4, b4, torch.Conv2dOptions{Padding: [2]int64{1, 1}})
		h = torch.BatchNorm(h, nil, nil, nil, nil, true, 0.1, 1e-5).ReLU()
		h = torch.MaxPool2d(h, torch.Pool2dOptions{Kernel: [2]int64{2, 2}}).Flatten(1, -1)
		loss := torch.CrossEntropy(torch.Linear(h, lw, nil), torch.FromSlice([]int64{3, 7}), torch.CrossEntropyOptions{})
		loss.Backward()
		requireClose(t, "loss", want["loss"], loss.Shape(), loss.Float64s(), 1e-6)
		for name, p := range map[string]*torch.Tensor{"w4": w4, "bias4": b4, "lw": lw} {
			g := p.Grad()
			require.NotNil(t, g, name)
			requireClose(t, name+".grad", want[name], g.Shape(), g.Float64s(), 1e-6)
		}
	})
}
