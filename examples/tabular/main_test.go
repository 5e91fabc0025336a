package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch/data"
)

// TestTabular writes a CSV with numpy from Fashion-MNIST's files — three classes,
// each image's 4x4-pooled brightness as 49 features, the class name as the label — and
// trains on it: the named classes are recorded and it beats chance clearly.
func TestTabular(t *testing.T) {
	if _, err := data.FashionMNIST("", false); err != nil {
		t.Skipf("Fashion-MNIST is not installed: %v", err)
	}
	path := filepath.Join(t.TempDir(), "fashion.csv")
	testpy.Run(t, `
import sys, gzip, numpy as np
root = sys.argv[2] + "/"
with gzip.open(root + "t10k-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
with gzip.open(root + "t10k-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8)
names = {1: "trouser", 7: "sneaker", 8: "bag"}
pooled = x.reshape(-1, 7, 4, 7, 4).mean(axis=(2, 4)) / 255
with open(sys.argv[1], "w") as out:
    out.write(",".join(f"p{k}" for k in range(49)) + ",item\n")
    for c in names:
        for i in np.flatnonzero(y == c)[:100]:
            out.write(",".join(f"{v:.4f}" for v in pooled[i].ravel()) + "," + names[c] + "\n")
`, []string{"numpy"}, path, data.DefaultFashionMNISTDir)
	tt, err := run(path, "item", 5, t.TempDir())
	require.NoError(t, err)
	assert.Equal(t, []string{"bag", "sneaker", "trouser"}, tt.Config().ClassNames)
	assert.Greater(t, tt.History[len(tt.History)-1].ValAcc, 0.8)
}
