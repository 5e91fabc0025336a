package data

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data/internal/libjpeg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pyImageTree writes an ImageFolder tree from real Fashion-MNIST test images with Pillow
// (PNG and JPEG (baseline, progressive, 4:4:4 chroma), grayscale, RGB, palette and RGBA,
// nested folders, upper-case and non-image extensions, a truncated PNG and a truncated
// JPEG), then prints torchvision's listing and PIL's pixels of every readable image in
// RGB and L.
const pyImageTree = `
import gzip, json, os, sys
import numpy as np
from PIL import Image
from torchvision.datasets import ImageFolder
src, root = sys.argv[1], sys.argv[2]
with gzip.open(f"{src}/t10k-images-idx3-ubyte.gz") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
def rgb(k):
    g = images[k].astype(np.int32)
    return Image.fromarray(np.stack([g, 255 - g, (g * 7 + k) % 256], -1).astype(np.uint8), "RGB")
def gray(k):
    return Image.fromarray(images[k], "L")
plan = [
    ("Bag", "a.png", lambda k: gray(k).save), ("Bag", "b.jpg", lambda k: rgb(k).save),
    ("Bag", "sub/c.PNG", lambda k: rgb(k).save), ("Bag", "sub/deeper/d.jpeg", lambda k: gray(k).save),
    ("Bag", "sub-x/e.png", lambda k: rgb(k).convert("P", palette=Image.ADAPTIVE, colors=64).save),
    ("Coat", "z.png", lambda k: rgb(k).convert("RGBA").save), ("Coat", "y.jpg", lambda k: rgb(k).save),
    ("Coat", "notes.txt", None), ("Coat", "x.npy", None), ("Coat", "broken.png", "Bag/a.png"),
    ("Coat", "cut.jpg", "Bag/b.jpg"),
    ("T-shirt_top", "1.jpg", lambda k: gray(k).save), ("T-shirt_top", "10.png", lambda k: gray(k).save),
    ("T-shirt_top", "2.png", lambda k: rgb(k).save), ("T-shirt_top", "q/r/s.jpg", lambda k: rgb(k).save),
    ("T-shirt_top", "p.jpg", lambda k: rgb(k).save, {"progressive": True}),
    ("T-shirt_top", "full-chroma.jpg", lambda k: rgb(k).save, {"subsampling": 0}),
]
for k, (cls, name, save, *opts) in enumerate(plan):
    p = os.path.join(root, cls, name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    if save is None:
        open(p, "w").write("not an image")
    elif isinstance(save, str):  # the first half of that file
        buf = open(os.path.join(root, save), "rb").read()
        open(p, "wb").write(buf[: len(buf) // 2])
    elif name.lower().endswith((".jpg", ".jpeg")):
        save(k)(p, quality=90, **(opts[0] if opts else {}))
    else:
        save(k)(p)
os.makedirs(os.path.join(root, "empty_is_no_class_file"), exist_ok=True)
open(os.path.join(root, "empty_is_no_class_file", "readme.md"), "w").write("x")
open(os.path.join(root, "top.png"), "w").write("files at the top are no class")
try:
    ImageFolder(root)
    raise SystemExit("ImageFolder accepted a class folder without images")
except FileNotFoundError:
    pass
os.remove(os.path.join(root, "empty_is_no_class_file", "readme.md"))
os.rmdir(os.path.join(root, "empty_is_no_class_file"))
ds = ImageFolder(root)
out = {"classes": ds.classes, "samples": [], "rgb": {}, "gray": {}}
for path, c in ds.samples:
    rel = os.path.relpath(path, root)
    out["samples"].append([rel, c])
    try:
        im = Image.open(path)
        im.load()
    except Exception:
        continue
    out["rgb"][rel] = np.asarray(im.convert("RGB")).transpose(2, 0, 1).flatten().tolist()
    out["gray"][rel] = np.asarray(im.convert("L")).flatten().tolist()
print(json.dumps(out))
`

// JPEG tolerances against PIL (libjpeg-turbo), per decoder: mean absolute difference
// per image and largest single difference, in 8-bit levels. libjpeg-turbo is PIL's own
// decoder with PIL's settings (islow IDCT, fancy upsampling), so its pixels are PIL's
// (measured: mean 0, max 0). Go's decoder, behind libjpeg's chroma upsampling and color
// conversion in gotrain, has its own integer IDCT, so a few pixels differ by a level or
// two (measured: mean <= 0.06, max 2 on these images).
var jpegTolerances = []struct {
	name      string
	libjpeg   bool
	mean, max float64
}{
	{"libjpeg-turbo", true, 0, 0},
	{"Go's image/jpeg", false, 0.25, 4},
}

func TestImageFolderMatchesTorchvision(t *testing.T) {
	if ok, _ := exists(DefaultFashionMNISTDir); !ok {
		t.Skipf("%s is missing (apt-get install dataset-fashion-mnist)", DefaultFashionMNISTDir)
	}
	root := t.TempDir()
	var want struct {
		Classes   []string
		Samples   [][2]any
		RGB, Gray map[string][]int
	}
	out := testpy.Run(t, pyImageTree, []string{"torchvision", "PIL", "numpy"}, DefaultFashionMNISTDir, root)
	require.NoError(t, json.Unmarshal(out, &want))

	ds, err := NewImageFolder(root, ImageFolderOptions{})
	require.NoError(t, err)
	assert.Equal(t, want.Classes, ds.Classes)
	var got [][2]any
	for _, im := range ds.Images {
		rel, err := filepath.Rel(root, im.Path)
		require.NoError(t, err)
		got = append(got, [2]any{rel, float64(im.Class)})
	}
	require.Equal(t, want.Samples, got, "the (path, class) sequence is torchvision's")
	require.Len(t, want.RGB, len(want.Samples)-2, "all but the truncated files decode in PIL")

	gray, err := NewImageFolder(root, ImageFolderOptions{Mode: Gray})
	require.NoError(t, err)
	for _, tol := range jpegTolerances {
		t.Run(tol.name, func(t *testing.T) {
			if tol.libjpeg && !libjpeg.Available {
				t.Skip("built without libjpeg (build tag nolibjpeg or no cgo)")
			}
			defer func(v bool) { useLibjpeg = v }(useLibjpeg)
			useLibjpeg = tol.libjpeg
			jpegs := 0
			for i, im := range ds.Images {
				rel := got[i][0].(string)
				for _, c := range []struct {
					ds   *ImageFolder
					want []int
					ch   int64
				}{{ds, want.RGB[rel], 3}, {gray, want.Gray[rel], 1}} {
					var s Sample
					err := c.ds.Get(i, &s)
					if c.want == nil {
						assert.ErrorContains(t, err, im.Path, "a corrupt file is an error naming it")
						continue
					}
					require.NoError(t, err, rel)
					f := s.Field(Input)
					require.Equal(t, []int64{c.ch, 28, 28}, f.Shape, rel)
					assert.Equal(t, int64(im.Class), Scalar[int64](&s, Label))
					px := make([]int, len(f.Data))
					for k, v := range f.Data {
						px[k] = int(v)
					}
					if ext := strings.ToLower(filepath.Ext(rel)); ext != ".jpg" && ext != ".jpeg" {
						assert.Equal(t, c.want, px, "%s: lossless pixels equal PIL's", rel)
						continue
					}
					jpegs++
					sum, worst := 0.0, 0.0
					for k := range px {
						d := math.Abs(float64(px[k] - c.want[k]))
						sum += d
						worst = max(worst, d)
					}
					mean := sum / float64(len(px))
					t.Logf("%s (%d channels): JPEG mean |diff| %.3f, max %.0f", rel, c.ch, mean, worst)
					assert.LessOrEqual(t, mean, tol.mean, rel)
					assert.LessOrEqual(t, worst, tol.max, rel)
				}
			}
			assert.Equal(t, 14, jpegs, "7 JPEGs (baseline 4:2:0, progressive, 4:4:4, gray), in RGB and L")
		})
	}

	skip, err := NewImageFolder(root, ImageFolderOptions{SkipCorrupt: true, Float: true})
	require.NoError(t, err)
	var s Sample
	for i := range skip.Len() {
		require.NoError(t, skip.Get(i, &s))
		if want.RGB[got[i][0].(string)] != nil {
			var u8 Sample
			require.NoError(t, ds.Get(i, &u8))
			f := s.Field(Input)
			require.Equal(t, torch.Float32, f.DType)
			for k, v := range Values[float32](f) {
				require.Equal(t, float32(u8.Field(Input).Data[k])/255, v, "Float is the uint8 pixels / 255 (%s)", got[i][0])
			}
		}
	}
	corrupt, n := skip.Corrupt()
	assert.Equal(t, []string{filepath.Join(root, "Coat", "broken.png"), filepath.Join(root, "Coat", "cut.jpg")}, corrupt)
	assert.Equal(t, int64(3), n, "broken.png is replaced by y.jpg after cut.jpg, cut.jpg by y.jpg")

	require.NoError(t, os.Mkdir(filepath.Join(root, "NoImages"), 0o755))
	_, err = NewImageFolder(root, ImageFolderOptions{})
	assert.ErrorContains(t, err, "found no valid file for the classes NoImages")
}
