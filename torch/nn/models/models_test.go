package models_test

import (
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
	"github.com/gotrain/gotrain/torch/nn/models"
)

func prelude(t *testing.T) string {
	dir, err := filepath.Abs("testdata")
	require.NoError(t, err)
	return "import sys, torch\nsys.path.insert(0, " + `"` + dir + `"` + ")\nfrom models import mlp, small_cnn\nd = sys.argv[1]\n"
}

// TestModelsLoadBothWays loads Python's models.py weights into the Go models (same
// outputs) and the Go models' weights into Python with strict=True.
func TestModelsLoadBothWays(t *testing.T) {
	dir := t.TempDir()
	testpy.Run(t, prelude(t)+`
torch.manual_seed(0)
x = torch.randn(4, 1, 28, 28)
out = {"x": x}
for name, m in (("mlp", mlp(784, 64, 10)), ("cnn", small_cnn(10))):
    m.eval()
    out[name] = m.state_dict()
    out[name + "_y"] = m(x)
torch.save(out, d + "/py.pt")
`, []string{"torch"}, dir)
	ref, err := checkpoint.Read(filepath.Join(dir, "py.pt"))
	require.NoError(t, err)

	goModels := map[string]*nn.Sequential{"mlp": models.MLP(784, 64, 10), "cnn": models.SmallCNN(10)}
	out := checkpoint.NewDict()
	torch.WithScope(func() {
		xc, err := checkpoint.GetTensor(ref, "x")
		require.NoError(t, err)
		x, err := torch.TensorFromCheckpoint(xc, torch.CPU)
		require.NoError(t, err)
		for name, m := range goModels {
			defer nn.Free(m)
			sd, err := checkpoint.GetDict(ref, name)
			require.NoError(t, err)
			goSD, err := torch.ToCheckpoint(nn.StateDict(m))
			require.NoError(t, err)
			out.Set(name, goSD)

			require.NoError(t, nn.LoadStateDict(m, sd, true), name)
			nn.SetTraining(m, false)
			var y *torch.Tensor
			torch.NoGrad(func() { y = m.Forward(x) })
			want, err := checkpoint.GetTensor(ref, name+"_y")
			require.NoError(t, err)
			assert.InDeltaSlice(t, want.Float64s(), y.Float64s(), 1e-5, name)
		}
		require.NoError(t, checkpoint.Write(filepath.Join(dir, "go.pt"), out))
	})
	got := testpy.Run(t, prelude(t)+`
sd = torch.load(d + "/go.pt")
mlp(784, 64, 10).load_state_dict(sd["mlp"], strict=True)
small_cnn(10).load_state_dict(sd["cnn"], strict=True)
print("ok")
`, []string{"torch"}, dir)
	assert.Equal(t, "ok", strings.TrimSpace(string(got)))
}

func TestModelShapes(t *testing.T) {
	cnn := models.SmallCNN(10)
	defer nn.Free(cnn)
	mlp := models.MLP(784, 128, 10)
	defer nn.Free(mlp)
	assert.Equal(t, int64(421834), nn.NumParameters(cnn))
	assert.Equal(t, "1.weight", nn.NamedParameters(mlp)[0].Name)
	torch.WithScope(func() {
		x := torch.Randn([]int64{2, 1, 28, 28}, torch.Float32, torch.CPU)
		assert.Equal(t, []int64{2, 10}, cnn.Forward(x).Shape())
		assert.Equal(t, []int64{2, 10}, mlp.Forward(x).Shape())
	})
	_, err := os.Stat(filepath.Join("testdata", "models.py"))
	require.NoError(t, err)
}
