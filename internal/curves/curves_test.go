package curves_test

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/curves"
)

// sampleHistory is a plausible 20-epoch run, with validation skipped at epoch 7.
func sampleHistory() ([]float64, map[string][]float64) {
	const n = 20
	epochs := make([]float64, n)
	h := map[string][]float64{
		"train_loss":  make([]float64, n),
		"val_loss":    make([]float64, n),
		"val_acc":     make([]float64, n),
		"elapsed_sec": make([]float64, n),
	}
	for i := range n {
		e := float64(i + 1)
		epochs[i] = e
		h["train_loss"][i] = 2.3*math.Exp(-e/4) + 0.1
		h["val_loss"][i] = 2.3*math.Exp(-e/5) + 0.2 + 0.002*e*e/4
		h["val_acc"][i] = 0.95 - 0.85*math.Exp(-e/3)
		h["elapsed_sec"][i] = 12
	}
	h["val_loss"][6], h["val_acc"][6] = math.NaN(), math.NaN()
	return epochs, h
}

func decode(t *testing.T, path string) (w, h int) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	b := img.Bounds()
	return b.Dx(), b.Dy()
}

func TestWritePNG(t *testing.T) {
	dir := t.TempDir()
	epochs, h := sampleHistory()
	p := curves.FromHistory("mnist-cnn", epochs, h)
	require.Len(t, p.Panels, 2)
	assert.Equal(t, []string{"train_loss", "val_loss"}, []string{p.Panels[0].Lines[0].Name, p.Panels[0].Lines[1].Name})
	assert.Equal(t, "val_acc", p.Panels[1].Lines[0].Name)

	path := filepath.Join(dir, "curves.png")
	require.NoError(t, curves.WritePNG(path, p))
	w, hgt := decode(t, path)
	assert.Equal(t, 2*curves.DefaultPanelWidth, w)
	assert.Equal(t, curves.DefaultHeight, hgt)

	// Overwriting replaces the file and leaves no temporary file behind.
	p.Width, p.Height = 800, 300
	require.NoError(t, curves.WritePNG(path, p))
	w, hgt = decode(t, path)
	assert.Equal(t, [2]int{800, 300}, [2]int{w, hgt})
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "curves.png", entries[0].Name())

	if out := os.Getenv("CURVES_PNG"); out != "" { // to look at the picture
		require.NoError(t, curves.WritePNG(out, curves.FromHistory("mnist-cnn", epochs, h)))
	}
}

func TestWritePNGEdgeCases(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.png")

	t.Run("one epoch", func(t *testing.T) {
		p := curves.FromHistory("", []float64{1}, map[string][]float64{"train_loss": {0.7}})
		require.NoError(t, curves.WritePNG(path, p))
		decode(t, path)
	})
	t.Run("a panel without finite values", func(t *testing.T) {
		p := curves.FromHistory("", []float64{1, 2}, map[string][]float64{
			"train_loss": {0.7, 0.5}, "val_acc": {math.NaN(), math.Inf(1)}})
		require.NoError(t, curves.WritePNG(path, p))
		decode(t, path)
	})
	t.Run("long run", func(t *testing.T) {
		x, y := make([]float64, 500), make([]float64, 500)
		for i := range x {
			x[i], y[i] = float64(i), 1/float64(i+1)
		}
		p := curves.Plot{X: x, Panels: []curves.Panel{{Title: "loss", Lines: []curves.Line{{Name: "train", Y: y}}}}}
		require.NoError(t, curves.WritePNG(path, p))
		w, _ := decode(t, path)
		assert.Equal(t, curves.DefaultPanelWidth, w)
	})

	for name, p := range map[string]curves.Plot{
		"empty history": curves.FromHistory("", nil, map[string][]float64{"train_loss": nil}),
		"no panels":     {X: []float64{1}},
		"all NaN": curves.FromHistory("", []float64{1, 2}, map[string][]float64{
			"train_loss": {math.NaN(), math.NaN()}}),
	} {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, curves.WritePNG(filepath.Join(dir, "bad.png"), p), curves.ErrEmpty)
			assert.NoFileExists(t, filepath.Join(dir, "bad.png"))
		})
	}
	t.Run("length mismatch", func(t *testing.T) {
		p := curves.FromHistory("", []float64{1, 2, 3}, map[string][]float64{"train_loss": {1, 2}})
		assert.ErrorContains(t, curves.WritePNG(path, p), `line "train_loss" has 2 values for 3 x values`)
	})
	t.Run("missing directory", func(t *testing.T) {
		p := curves.FromHistory("", []float64{1}, map[string][]float64{"train_loss": {1}})
		assert.Error(t, curves.WritePNG(filepath.Join(dir, "no", "such", "c.png"), p))
	})
}
