package nn_test

import (
	"fmt"
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
)

// scriptNet is written to net.py: torch.jit.script reads the class's source file.
const scriptNet = `
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.features(x))
`

// TestScriptModuleTrains is issue 3, item 5: a TorchScript model saved by Python trains
// in Go, and its state dict loads back into the Python model with strict=True.
func TestScriptModuleTrains(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "net.py"), []byte(scriptNet), 0o644))
	const prelude = "import sys, json, torch\nd = sys.argv[1]\nsys.path.insert(0, d)\nfrom net import Net\n"
	out := testpy.Run(t, prelude+`
torch.manual_seed(0)
m = Net()
torch.jit.script(m).save(d + "/model.pt")
x = torch.randn(64, 8)
y = x[:, :3].argmax(1)
torch.save({"x": x, "y": y}, d + "/data.pt")
print(json.dumps([[k, list(v.shape)] for k, v in m.state_dict().items()]))
`, []string{"torch"}, dir)

	m, err := nn.LoadScript(filepath.Join(dir, "model.pt"), torch.CPU)
	require.NoError(t, err)
	defer nn.Free(m)
	var got []string
	torch.WithScope(func() {
		for k, v := range nn.StateDict(m).All() {
			got = append(got, fmt.Sprintf("[%q, %s]", k, strings.ReplaceAll(fmt.Sprint(v.(*torch.Tensor).Shape()), " ", ", ")))
		}
	})
	assert.Equal(t, strings.TrimSpace(string(out)), "["+strings.Join(got, ", ")+"]", "the script module's state dict keys and shapes")
	assert.Len(t, nn.Parameters(m), 6)
	assert.Equal(t, int64(8*32+32+32+32+32*3+3), nn.NumParameters(m))

	data, err := checkpoint.Read(filepath.Join(dir, "data.pt"))
	require.NoError(t, err)
	x, err := torch.TensorFromCheckpoint(getTensor(t, data, "x"), torch.CPU)
	require.NoError(t, err)
	y, err := torch.TensorFromCheckpoint(getTensor(t, data, "y"), torch.CPU)
	require.NoError(t, err)
	defer x.Free()
	defer y.Free()

	// A plain SGD loop: p -= lr * grad.
	nn.SetTraining(m, true)
	lossFn := &nn.CrossEntropyLoss{}
	var losses []float64
	for range 50 {
		torch.WithScope(func() {
			loss := lossFn.Forward(m.Forward(x), y)
			loss.Backward()
			losses = append(losses, loss.Item())
			torch.NoGrad(func() {
				for _, p := range nn.Parameters(m) {
					p.SubInPlace(p.Grad(), 0.1)
					p.SetGrad(nil)
				}
			})
		})
	}
	assert.Less(t, losses[49], losses[0]/2, "the loss falls: %v", losses)

	// The trained state goes back to Python: as a state dict into the eager model, and as
	// a TorchScript file written by Save. Both give Go's evaluation-mode outputs.
	nn.SetTraining(m, false)
	torch.WithScope(func() {
		sd, err := torch.ToCheckpoint(nn.StateDict(m))
		require.NoError(t, err)
		require.NoError(t, checkpoint.Write(filepath.Join(dir, "trained.pt"), sd))
		ct, err := torch.TensorToCheckpoint(m.Forward(x))
		require.NoError(t, err)
		require.NoError(t, checkpoint.Write(filepath.Join(dir, "logits.pt"), ct))
	})
	require.NoError(t, m.Save(filepath.Join(dir, "saved.pt")))
	out = testpy.Run(t, prelude+`
m = Net()
m.load_state_dict(torch.load(d + "/trained.pt"), strict=True)
m.eval()
x = torch.load(d + "/data.pt")["x"]
want = torch.load(d + "/logits.pt")
s = torch.jit.load(d + "/saved.pt")
assert not s.training
print(int(m.features[1].num_batches_tracked), (m(x) - want).abs().max().item(), (s(x) - want).abs().max().item())
`, []string{"torch"}, dir)
	var nbt int
	var eagerDiff, scriptDiff float64
	_, err = fmt.Sscan(string(out), &nbt, &eagerDiff, &scriptDiff)
	require.NoError(t, err, string(out))
	assert.Equal(t, 50, nbt)
	assert.Less(t, eagerDiff, 1e-5)
	assert.Less(t, scriptDiff, 1e-5)
}

func TestLoadScriptErrors(t *testing.T) {
	_, err := nn.LoadScript(filepath.Join(t.TempDir(), "missing.pt"), torch.CPU)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.pt")
}
