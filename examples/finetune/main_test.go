package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
)

// jpegTree writes Fashion-MNIST test images of three classes as tinted RGB JPEGs into
// root/train and root/val.
func jpegTree(t *testing.T, root string) []string {
	fm, err := data.FashionMNIST("", false)
	if err != nil {
		t.Skipf("Fashion-MNIST is not installed: %v", err)
	}
	tints := map[byte]color.RGBA{0: {255, 200, 200, 255}, 5: {200, 255, 200, 255}, 8: {200, 200, 255, 255}}
	names := map[byte]string{0: "tshirt", 5: "sandal", 8: "bag"}
	seen := map[byte]int{}
	px := fm.Width * fm.Height
	for i, label := range fm.Labels {
		tint, ok := tints[label]
		if !ok || seen[label] >= 12 {
			continue
		}
		split := "train"
		if seen[label] >= 8 {
			split = "val"
		}
		seen[label]++
		img := image.NewRGBA(image.Rect(0, 0, fm.Width, fm.Height))
		for k, v := range fm.Pixels[i*px : (i+1)*px] {
			img.Set(k%fm.Width, k/fm.Width, color.RGBA{uint8(int(v) * int(tint.R) / 255), uint8(int(v) * int(tint.G) / 255), uint8(int(v) * int(tint.B) / 255), 255})
		}
		dir := filepath.Join(root, split, names[label])
		require.NoError(t, os.MkdirAll(dir, 0o755))
		var buf bytes.Buffer
		require.NoError(t, jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}))
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%05d.jpg", i)), buf.Bytes(), 0o644))
	}
	return []string{"bag", "sandal", "tshirt"}
}

// TestFinetune loads torchvision's resnet18 state dict (written by torchvision itself,
// seeded instead of downloaded) into every layer but fc, and fine-tunes one epoch on a
// JPEG ImageFolder tree.
func TestFinetune(t *testing.T) {
	dir := t.TempDir()
	classes := jpegTree(t, filepath.Join(dir, "tree"))
	weights := filepath.Join(dir, "resnet18.pth")
	testpy.Run(t, `
import sys, torch, torchvision
torch.manual_seed(0)
torch.save(torchvision.models.resnet18().state_dict(), sys.argv[1])
`, []string{"torch", "torchvision"}, weights)

	m, err := pretrained(weights, len(classes))
	require.NoError(t, err)
	raw, err := checkpoint.Read(weights)
	require.NoError(t, err)
	for _, key := range []string{"conv1.weight", "layer4.1.bn2.running_var"} {
		want, err := checkpoint.GetTensor(raw, key)
		require.NoError(t, err)
		torch.WithScope(func() {
			got, ok := nn.StateDict(m).Get(key)
			require.True(t, ok, key)
			require.Equal(t, want.Float64s(), got.(*torch.Tensor).Float64s(), "%s is torchvision's", key)
		})
	}
	nn.Free(m)

	tt, err := run(options{Data: filepath.Join(dir, "tree"), Weights: weights, RunDir: filepath.Join(dir, "run"), Epochs: 1, ImageSize: 32, BatchSize: 8})
	require.NoError(t, err)
	require.Len(t, tt.History, 1)
	assert.False(t, tt.History[0].ValAcc != tt.History[0].ValAcc, "val_acc recorded")
	assert.Equal(t, classes, tt.Config().ClassNames)
	_, err = os.Stat(filepath.Join(dir, "run", "checkpoints", "best_model.pth"))
	require.NoError(t, err)
}
