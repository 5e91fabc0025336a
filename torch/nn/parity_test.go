package nn_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

const parityScript = `
import sys, collections, torch, torch.nn as nn
out = sys.argv[1]
torch.manual_seed(0)
m = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, stride=2, padding=2, dilation=2, groups=2, bias=False),
    nn.BatchNorm2d(16, momentum=0.2), nn.LeakyReLU(0.1),
    nn.Flatten(), nn.Dropout(0.0), nn.Linear(64, 10))
with torch.no_grad():
    for i in (1, 5):
        bn = m[i]
        bn.weight.uniform_(0.5, 1.5); bn.bias.normal_()
        bn.running_mean.normal_(0, 0.1); bn.running_var.uniform_(0.5, 1.5)
        bn.num_batches_tracked.fill_(3)
state = {k: v.clone() for k, v in m.state_dict().items()}
x = torch.randn(6, 3, 8, 8)
y = torch.tensor([0, 3, 9, 1, 3, 7])
loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)

def step():
    m.zero_grad(set_to_none=True)
    loss = loss_fn(m(x), y)
    loss.backward()
    return loss.detach(), collections.OrderedDict((n, p.grad.clone()) for n, p in m.named_parameters())

m.train()
train_loss, train_grads = step()
train_state = collections.OrderedDict((k, v.clone()) for k, v in m.state_dict().items())
m.eval()
eval_loss, eval_grads = step()
torch.save({"state": state, "x": x, "y": y,
            "train_loss": train_loss, "train_grads": train_grads, "train_state": train_state,
            "eval_loss": eval_loss, "eval_grads": eval_grads}, out)
`

func parityModel() *nn.Sequential {
	return nn.NewSequential(
		nn.NewConv2d(3, 8, 3, nn.Padding(1)), nn.NewBatchNorm2d(8), nn.NewReLU(), nn.NewMaxPool2d(2),
		nn.NewConv2d(8, 16, 3, nn.Stride(2), nn.Padding(2), nn.Dilation(2), nn.Groups(2), nn.NoBias()),
		nn.NewBatchNorm2d(16, nn.Momentum(0.2)), nn.NewLeakyReLU(0.1),
		nn.NewFlatten(), nn.NewDropout(0), nn.NewLinear(64, 10))
}

// assertClose compares a Go tensor with a checkpoint tensor element by element.
func assertClose(t *testing.T, name string, want *checkpoint.Tensor, got *torch.Tensor, tol float64) {
	t.Helper()
	require.Equal(t, want.Shape, got.Shape(), name)
	assert.InDeltaSlice(t, want.Float64s(), got.Float64s(), tol, name)
}

func getTensor(t *testing.T, v any, path ...any) *checkpoint.Tensor {
	t.Helper()
	ct, err := checkpoint.GetTensor(v, path...)
	require.NoError(t, err)
	return ct
}

// TestParityWithPyTorch is issue 3, item 1: the same network in Go and Python, with
// Python's weights loaded into Go, gives the same loss, gradients and running statistics.
func TestParityWithPyTorch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "parity.pt")
	testpy.Run(t, parityScript, []string{"torch"}, path)
	ref, err := checkpoint.Read(path)
	require.NoError(t, err)

	m := parityModel()
	defer nn.Free(m)
	torch.WithScope(func() {
		state, err := checkpoint.GetDict(ref, "state")
		require.NoError(t, err)
		sd, err := torch.FromCheckpoint(state, torch.CPU)
		require.NoError(t, err)
		require.NoError(t, nn.LoadStateDict(m, sd.(*checkpoint.Dict), true))
		assert.Equal(t, keys(state), keys(nn.StateDict(m)), "same keys in the same order")

		x, err := torch.TensorFromCheckpoint(getTensor(t, ref, "x"), torch.CPU)
		require.NoError(t, err)
		y, err := torch.TensorFromCheckpoint(getTensor(t, ref, "y"), torch.CPU)
		require.NoError(t, err)
		lossFn := &nn.CrossEntropyLoss{}
		lossFn.LabelSmoothing = 0.1

		step := func(mode string) {
			nn.ZeroGrad(m)
			loss := lossFn.Forward(m.Forward(x), y)
			loss.Backward()
			assertClose(t, mode+" loss", getTensor(t, ref, mode+"_loss"), loss, 1e-5)
			grads, err := checkpoint.GetDict(ref, mode+"_grads")
			require.NoError(t, err)
			require.Equal(t, grads.Len(), len(nn.NamedParameters(m)))
			for _, p := range nn.NamedParameters(m) {
				assertClose(t, mode+" grad "+p.Name, getTensor(t, grads, p.Name), p.Tensor.Grad(), 1e-5)
			}
		}
		nn.SetTraining(m, true)
		step("train")
		trainState, err := checkpoint.GetDict(ref, "train_state")
		require.NoError(t, err)
		for k, v := range nn.StateDict(m).All() {
			assertClose(t, "after a train step: "+k.(string), getTensor(t, trainState, k), v.(*torch.Tensor), 1e-5)
		}
		nn.SetTraining(m, false)
		step("eval")
	})
}

const optionsParityScript = `
import sys, torch, torch.nn as nn
out = sys.argv[1]
torch.manual_seed(0)
x = torch.randn(4, 3, 8, 8)
layers = {
    "maxpool_ceil": nn.MaxPool2d(3, stride=2, ceil_mode=True),
    "avgpool_exclude_pad": nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
    "avgpool_ceil_exclude_pad": nn.AvgPool2d(2, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    "bn_cumulative": nn.BatchNorm2d(3, momentum=None),
    "bn_no_affine": nn.BatchNorm2d(3, affine=False),
    "bn_no_running_stats": nn.BatchNorm2d(3, track_running_stats=False),
    "ln_no_affine": nn.LayerNorm([8], elementwise_affine=False),
}
res = {"x": x}
for name, m in layers.items():
    r = {}
    m.train()
    for i in range(3):
        r["out%d" % i] = m(x * (i + 1)).detach()
    m.eval()
    r["out3"] = m(x).detach()
    r["state"] = m.state_dict()
    res[name] = r
torch.save(res, out)
`

// TestLayerOptionsParity: the pooling and normalisation options that change a layer's
// arithmetic or its state (ceil_mode, count_include_pad=False, momentum=None,
// affine=False, track_running_stats=False, elementwise_affine=False) give PyTorch's
// outputs over three training batches and one in evaluation, and its state dict's keys
// and values.
func TestLayerOptionsParity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "options.pt")
	testpy.Run(t, optionsParityScript, []string{"torch"}, path)
	ref, err := checkpoint.Read(path)
	require.NoError(t, err)
	layers := map[string]nn.Layer{
		"maxpool_ceil":             nn.NewMaxPool2d(3, nn.Stride(2), nn.CeilMode()),
		"avgpool_exclude_pad":      nn.NewAvgPool2d(3, nn.Stride(2), nn.Padding(1), nn.ExcludePad()),
		"avgpool_ceil_exclude_pad": nn.NewAvgPool2d(2, nn.Stride(2), nn.Padding(1), nn.CeilMode(), nn.ExcludePad()),
		"bn_cumulative":            nn.NewBatchNorm2d(3, nn.CumulativeAverage()),
		"bn_no_affine":             nn.NewBatchNorm2d(3, nn.NoAffine()),
		"bn_no_running_stats":      nn.NewBatchNorm2d(3, nn.NoTrackRunningStats()),
		"ln_no_affine":             nn.NewLayerNorm([]int64{8}, nn.NoAffine()),
	}
	for name, m := range layers {
		t.Run(name, func(t *testing.T) {
			defer nn.Free(m)
			torch.WithScope(func() {
				x, err := torch.TensorFromCheckpoint(getTensor(t, ref, "x"), torch.CPU)
				require.NoError(t, err)
				nn.SetTraining(m, true)
				for i := range 4 {
					in := x.MulScalar(float64(i + 1))
					if i == 3 {
						nn.SetTraining(m, false)
						in = x
					}
					out := fmt.Sprintf("out%d", i)
					assertClose(t, out, getTensor(t, ref, name, out), m.Forward(in), 1e-5)
				}
				state, err := checkpoint.GetDict(ref, name, "state")
				require.NoError(t, err)
				sd := nn.StateDict(m)
				require.Equal(t, keys(state), keys(sd))
				for k, v := range sd.All() {
					assertClose(t, k.(string), getTensor(t, state, k), v.(*torch.Tensor), 1e-5)
				}
			})
		})
	}
}
