package models_test

import (
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

// TestInitMatchesPyTorch shows that default initialisation draws from the same generator
// in the same order as PyTorch: after the same torch.manual_seed, a Go model and its
// Python twin start with the same weights (up to float rounding of lo + u·(hi-lo)).
func TestInitMatchesPyTorch(t *testing.T) {
	dir := t.TempDir()
	testpy.Run(t, prelude(t)+`
torch.manual_seed(42)
cnn = small_cnn(10)
m = mlp(784, 64, 10)
torch.save({"cnn": cnn.state_dict(), "mlp": m.state_dict()}, d + "/init.pt")
`, []string{"torch"}, dir)
	ref, err := checkpoint.Read(filepath.Join(dir, "init.pt"))
	require.NoError(t, err)

	torch.ManualSeed(42)
	goModels := []struct {
		name string
		m    nn.Module
	}{{"cnn", models.SmallCNN(10)}, {"mlp", models.MLP(784, 64, 10)}}
	for _, gm := range goModels {
		defer nn.Free(gm.m)
		for _, p := range nn.NamedParameters(gm.m) {
			want, err := checkpoint.GetTensor(ref, gm.name, p.Name)
			require.NoError(t, err)
			assert.InDeltaSlice(t, want.Float64s(), p.Tensor.Float64s(), 1e-6, gm.name+"."+p.Name)
		}
	}
}
