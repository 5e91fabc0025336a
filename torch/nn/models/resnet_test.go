package models_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// TestMatchesTorchvision is issue 3, item 4: ResNet18's state dict has exactly the keys
// and shapes of torchvision.models.resnet18(), and with torchvision's weights it gives
// torchvision's logits.
func TestResNetMatchesTorchvision(t *testing.T) {
	dir := t.TempDir()
	out := testpy.Run(t, `
import sys, json, torch, torchvision
d = sys.argv[1]
torch.manual_seed(0)
m = torchvision.models.resnet18()
init = {k: m.state_dict()[k].clone() for k in ("conv1.weight", "layer2.0.downsample.0.weight", "layer4.1.conv2.weight", "fc.weight", "fc.bias")}
# Non-trivial running statistics, so that evaluation mode is really exercised.
with torch.no_grad():
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.normal_(0, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.uniform_(0.5, 1.5)
            mod.bias.normal_(0, 0.1)
m.eval()
x = torch.randn(2, 3, 64, 64)
with torch.no_grad():
    y = m(x)
torch.save({"state": m.state_dict(), "x": x, "y": y, "init": init}, d + "/tv.pt")
print(json.dumps([[k, list(v.shape)] for k, v in m.state_dict().items()]))
`, []string{"torch", "torchvision"}, dir)
	var want [][2]any
	require.NoError(t, json.Unmarshal(out, &want))

	torch.ManualSeed(0)
	m := models.ResNet18(1000)
	defer nn.Free(m)
	ref, err := checkpoint.Read(filepath.Join(dir, "tv.pt"))
	require.NoError(t, err)
	torch.WithScope(func() {
		// Same seed, same initial weights.
		init, err := checkpoint.GetDict(ref, "init")
		require.NoError(t, err)
		current := nn.StateDict(m)
		for k, v := range init.All() {
			got, _ := current.Get(k)
			assert.InDeltaSlice(t, v.(*checkpoint.Tensor).Float64s(), got.(*torch.Tensor).Float64s(), 1e-6, "initial %s", k)
		}

		var got [][2]any
		for k, v := range nn.StateDict(m).All() {
			var shape []any
			for _, d := range v.(*torch.Tensor).Shape() {
				shape = append(shape, float64(d))
			}
			if shape == nil {
				shape = []any{}
			}
			got = append(got, [2]any{k, shape})
		}
		require.Equal(t, want, got, "keys and shapes, in order")

		sd, err := checkpoint.GetDict(ref, "state")
		require.NoError(t, err)
		require.NoError(t, nn.LoadStateDict(m, sd, true))
		xc, err := checkpoint.GetTensor(ref, "x")
		require.NoError(t, err)
		x, err := torch.TensorFromCheckpoint(xc, torch.CPU)
		require.NoError(t, err)
		nn.SetTraining(m, false)
		var y *torch.Tensor
		torch.NoGrad(func() { y = m.Forward(x) })
		yc, err := checkpoint.GetTensor(ref, "y")
		require.NoError(t, err)
		require.Equal(t, yc.Shape, y.Shape())
		assert.InDeltaSlice(t, yc.Float64s(), y.Float64s(), 1e-4)
	})
}

func TestResNet18(t *testing.T) {
	m := models.ResNet18(10)
	defer nn.Free(m)
	assert.Equal(t, int64(11181642), nn.NumParameters(m))
	torch.WithScope(func() {
		y := m.Forward(torch.Randn([]int64{2, 3, 32, 32}, torch.Float32, torch.CPU))
		assert.Equal(t, []int64{2, 10}, y.Shape())
	})
}
