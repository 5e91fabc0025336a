package models_test

import (
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

const vitPy = recordPy + `
import torch.nn.functional as F
from torchvision.models import VisionTransformer
def make():
    return VisionTransformer(image_size=16, patch_size=4, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=12, num_classes=5)
if mode == "make":
    torch.manual_seed(0)
    m = make()
    # torchvision starts the head at zero; move every weight so the gradients say something.
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    m.train()
    x = torch.randn(3, 3, 16, 16)
    y = torch.tensor([4, 0, 2])
    def fwd():
        logits = m(x)
        return logits, F.cross_entropy(logits, y)
    r = record(m, fwd)
    r["x"], r["y"] = x, y
    torch.save(r, d + "/ref.pt")
else:
    got = torch.load(d + "/go.pt")
    m = make()
    m.load_state_dict(got["state"], strict=True)
    m.eval()
    with torch.no_grad():
        torch.testing.assert_close(m(got["x"]), got["logits"], rtol=0, atol=1e-5)
    print("ok")
`

func tinyViT(t *testing.T) *models.VisionTransformer {
	m, err := models.NewVisionTransformer(models.ViTConfig{ImageSize: 16, PatchSize: 4, NumLayers: 2, NumHeads: 2, HiddenDim: 8, MLPDim: 12, NumClasses: 5})
	require.NoError(t, err)
	return m
}

// TestViTMatchesTorchvision is issue 14, acceptance 1 for the ViT: torchvision's
// VisionTransformer and the Go model load each other's state dicts strictly and agree on
// logits, loss, gradients and one AdamW step.
func TestViTMatchesTorchvision(t *testing.T) {
	dir := t.TempDir()
	testpy.Run(t, vitPy, []string{"torch", "torchvision"}, dir, "make")
	ref := readRef(t, filepath.Join(dir, "ref.pt"))
	torch.WithScope(func() {
		x, y := refTensor(t, ref, "x"), refTensor(t, ref, "y")
		m := tinyViT(t)
		defer nn.Free(m)
		stepMatches(t, m, ref, func() (*torch.Tensor, *torch.Tensor) {
			logits := m.Forward(x)
			return logits, torch.CrossEntropy(logits, y, torch.CrossEntropyOptions{})
		})

		g := tinyViT(t)
		defer nn.Free(g)
		for _, p := range nn.Parameters(g) {
			torch.NoGrad(func() { p.AddInPlace(torch.Randn(p.Shape(), torch.Float32, torch.CPU), 0.2) })
		}
		nn.SetTraining(g, false)
		out := checkpoint.NewDict()
		sd, err := nn.CheckpointStateDict(g)
		require.NoError(t, err)
		out.Set("state", sd)
		var logits *torch.Tensor
		torch.NoGrad(func() { logits = g.Forward(x) })
		for k, v := range map[string]*torch.Tensor{"x": x, "logits": logits} {
			ct, err := torch.TensorToCheckpoint(v)
			require.NoError(t, err)
			out.Set(k, ct)
		}
		require.NoError(t, checkpoint.Write(filepath.Join(dir, "go.pt"), out))
	})
	res := testpy.Run(t, vitPy, []string{"torch", "torchvision"}, dir, "check")
	assert.Equal(t, "ok", strings.TrimSpace(string(res)))
}

func TestViTShapes(t *testing.T) {
	m, err := models.NewVisionTransformer(models.ViTConfig{ImageSize: 28, PatchSize: 7, NumLayers: 1, NumHeads: 2, HiddenDim: 16, MLPDim: 32, NumClasses: 10, InChannels: 1})
	require.NoError(t, err)
	defer nn.Free(m)
	names := nn.NamedParameters(m)
	assert.Equal(t, "class_token", names[0].Name)
	assert.Equal(t, "encoder.layers.encoder_layer_0.self_attention.in_proj_weight", names[6].Name)
	torch.WithScope(func() {
		x := torch.Randn([]int64{2, 1, 28, 28}, torch.Float32, torch.CPU)
		assert.Equal(t, []int64{2, 10}, m.Forward(x).Shape())
		assert.Panics(t, func() { m.Forward(torch.Randn([]int64{2, 1, 32, 32}, torch.Float32, torch.CPU)) })
	})
}

// TestViTConfigErrors: a ViT's sizes often come from a flag or from the data, so a bad
// one is an error naming the field and its value, returned before anything is built.
func TestViTConfigErrors(t *testing.T) {
	ok := models.ViTConfig{ImageSize: 16, PatchSize: 4, NumLayers: 1, NumHeads: 2, HiddenDim: 8, MLPDim: 12, NumClasses: 5}
	for _, c := range []struct {
		edit func(c *models.ViTConfig)
		want string
	}{
		{func(c *models.ViTConfig) { c.ImageSize = 0 }, "image_size 0 is outside"},
		{func(c *models.ViTConfig) { c.PatchSize = 0 }, "patch_size 0 is outside"},
		{func(c *models.ViTConfig) { c.PatchSize = 32 }, "patch_size 32 is outside [1, 16]"},
		{func(c *models.ViTConfig) { c.PatchSize = 5 }, "image_size 16 is not divisible by patch_size 5"},
		{func(c *models.ViTConfig) { c.NumLayers = -1 }, "num_layers -1 is outside"},
		{func(c *models.ViTConfig) { c.NumHeads = 3 }, "hidden_dim 8 is not divisible by num_heads 3"},
		{func(c *models.ViTConfig) { c.NumHeads = 0 }, "num_heads 0 is outside"},
		{func(c *models.ViTConfig) { c.HiddenDim = -8 }, "hidden_dim -8 is outside"},
		{func(c *models.ViTConfig) { c.MLPDim = 0 }, "mlp_dim 0 is outside"},
		{func(c *models.ViTConfig) { c.NumClasses = -1 }, "num_classes -1 is outside"},
		{func(c *models.ViTConfig) { c.InChannels = -3 }, "in_channels -3 is outside"},
		{func(c *models.ViTConfig) { c.Dropout = 1.5 }, "dropout 1.5 is not a probability"},
		{func(c *models.ViTConfig) { c.AttentionDropout = -0.1 }, "attention_dropout -0.1 is not a probability"},
		{func(c *models.ViTConfig) { c.ImageSize, c.PatchSize = 1<<20, 1 }, "tokens 1099511627777 is outside"},
		{func(c *models.ViTConfig) { c.HiddenDim, c.MLPDim, c.NumHeads, c.NumLayers = 1<<17, 1<<19, 1, 1000 }, "more than this machine's"},
	} {
		t.Run(c.want, func(t *testing.T) {
			cfg := ok
			c.edit(&cfg)
			before := torch.LiveTensors()
			m, err := models.NewVisionTransformer(cfg)
			require.ErrorContains(t, err, "models: ViTConfig: ")
			require.ErrorContains(t, err, c.want)
			require.Nil(t, m)
			require.Equal(t, before, torch.LiveTensors(), "nothing was allocated")
		})
	}
}
