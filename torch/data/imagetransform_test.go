package data

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pyTransforms applies torchvision's transforms to two real images (a Fashion-MNIST
// image in RGB, 28x28, and a 56x84 RGB tiling of six of them) both as PIL images (the
// ImageFolder pipeline) and as float tensors, and prints the inputs and results.
const pyTransforms = `
import gzip, json, sys
import numpy as np, torch
from PIL import Image
import torchvision.transforms as T
import torchvision.transforms.functional as F
with gzip.open(f"{sys.argv[1]}/t10k-images-idx3-ubyte.gz") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28).astype(np.int32)
def rgb(k):
    g = images[k]
    return np.stack([g, 255 - g, (g * 7 + k) % 256], -1).astype(np.uint8)
small = Image.fromarray(rgb(3))
big = Image.fromarray(np.concatenate([np.concatenate([rgb(k), rgb(k + 1), rgb(k + 2)], 1) for k in (10, 20)], 0))
cases = json.loads(sys.argv[2])
out = {"images": {}, "pil": [], "tensor": []}
for name, im in (("small", small), ("big", big)):
    out["images"][name] = np.asarray(im).transpose(2, 0, 1).flatten().tolist()
mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
for c in cases:
    im = small if c["image"] == "small" else big
    kind = c["kind"]
    if kind == "resize":
        t = T.Resize(c["size"], max_size=c.get("max_size"))
    elif kind == "center":
        t = T.CenterCrop(c["size"])
    elif kind == "resized_crop":
        top, left, h, w = c["box"]
        t = lambda x, top=top, left=left, h=h, w=w, s=c["size"]: F.resized_crop(x, top, left, h, w, s)
    p = t(im)
    out["pil"].append(np.asarray(p).transpose(2, 0, 1).flatten().tolist())
    x = t(F.to_tensor(im))
    if c.get("normalize"):
        x = F.normalize(x, mean, std)
    out["tensor"].append(x.flatten().tolist())
print(json.dumps(out))
`

type transformCase struct {
	Image     string `json:"image"`
	Kind      string `json:"kind"`
	Size      []int  `json:"size"`
	MaxSize   *int   `json:"max_size,omitempty"`
	Box       []int  `json:"box,omitempty"`
	Normalize bool   `json:"normalize,omitempty"`
	vFirst    bool   // Pillow 13 runs the vertical pass first for this size
}

func (c transformCase) transform() Transform {
	switch c.Kind {
	case "resize":
		r := Resize{}
		if len(c.Size) == 1 {
			r.Size = c.Size[0]
		} else {
			r.Height, r.Width = c.Size[0], c.Size[1]
		}
		if c.MaxSize != nil {
			r.MaxSize = *c.MaxSize
		}
		return r
	case "center":
		return CenterCrop{Height: c.Size[0], Width: c.Size[len(c.Size)-1]}
	}
	return TransformFunc(func(s *Sample, _ *rand.Rand) error {
		f := s.Field(Input)
		cropField(f, c.Box[0], c.Box[1], c.Box[2], c.Box[3])
		return resizeField(f, c.Size[0], c.Size[1])
	})
}

// Tolerances of the resampling. Against torch's antialiased interpolate on float32
// tensors: the same weights, summed in the same order, but computed in float64 here, so
// results differ by float32 rounding (measured up to 5e-6 after Normalize's division
// by 0.225). Against PIL on uint8 images: the same fixed-point arithmetic, bit-exact
// when PIL runs the horizontal pass first, as its Resample.c reads; Pillow 13 runs the
// vertical pass first for some sizes (mostly a vertical downscale with a horizontal
// upscale), and its 8-bit intermediate then rounds differently, by one level at most.
const (
	resizeFloatTol = 1e-5
	resizeUint8Tol = 1
)

func TestImageTransformsMatchTorchvision(t *testing.T) {
	if ok, _ := exists(DefaultFashionMNISTDir); !ok {
		t.Skipf("%s is missing (apt-get install dataset-fashion-mnist)", DefaultFashionMNISTDir)
	}
	twenty5 := 25
	cases := []transformCase{
		{Image: "small", Kind: "resize", Size: []int{20}},
		{Image: "small", Kind: "resize", Size: []int{40}},
		{Image: "small", Kind: "resize", Size: []int{17, 33}, vFirst: true},
		{Image: "big", Kind: "resize", Size: []int{20}, Normalize: true},
		{Image: "big", Kind: "resize", Size: []int{24}, MaxSize: &twenty5},
		{Image: "big", Kind: "resize", Size: []int{64, 100}},
		{Image: "big", Kind: "resize", Size: []int{7, 9}},
		{Image: "big", Kind: "center", Size: []int{27}},
		{Image: "big", Kind: "center", Size: []int{31, 90}},
		{Image: "small", Kind: "center", Size: []int{33, 21}, Normalize: true},
		{Image: "big", Kind: "resized_crop", Size: []int{24, 24}, Box: []int{3, 5, 30, 41}},
		{Image: "big", Kind: "resized_crop", Size: []int{32, 48}, Box: []int{10, 0, 11, 84}},
	}
	caseJSON, err := json.Marshal(cases)
	require.NoError(t, err)
	var want struct {
		Images map[string][]uint8
		PIL    [][]uint8
		Tensor [][]float64
	}
	require.NoError(t, json.Unmarshal(testpy.Run(t, pyTransforms, []string{"torch", "torchvision", "PIL", "numpy"}, DefaultFashionMNISTDir, string(caseJSON)), &want))
	shapes := map[string][]int64{"small": {3, 28, 28}, "big": {3, 56, 84}}
	for k, c := range cases {
		var s Sample
		require.NoError(t, s.SetBytes(Input, torch.Uint8, shapes[c.Image], want.Images[c.Image]))
		require.NoError(t, c.transform().Apply(&s, nil))
		gotPIL := s.Field(Input).Data
		require.Len(t, gotPIL, len(want.PIL[k]), "%+v", c)
		diffs, worstLevel := 0, 0
		for i := range gotPIL {
			if d := int(gotPIL[i]) - int(want.PIL[k][i]); d != 0 {
				diffs++
				worstLevel = max(worstLevel, d, -d)
			}
		}
		t.Logf("%+v: %d of %d uint8 values differ from PIL's", c, diffs, len(gotPIL))
		assert.LessOrEqual(t, worstLevel, resizeUint8Tol, "%+v: uint8 pixels against PIL's", c)
		if !c.vFirst {
			assert.Zero(t, diffs, "%+v: crops, and resizes whose passes PIL runs in gotrain's order, are bit-exact", c)
		}
		require.NoError(t, s.SetBytes(Input, torch.Uint8, shapes[c.Image], want.Images[c.Image]))
		steps := []Transform{ToTensor(), c.transform()}
		if c.Normalize {
			steps = append(steps, Normalize{Mean: ImageNetMean, Std: ImageNetStd})
		}
		require.NoError(t, Compose(steps...).Apply(&s, nil))
		got := Values[float32](s.Field(Input))
		require.Len(t, got, len(want.Tensor[k]), "%+v", c)
		worst := 0.0
		for i := range got {
			worst = max(worst, math.Abs(float64(got[i])-want.Tensor[k][i]))
		}
		assert.LessOrEqual(t, worst, resizeFloatTol, "%+v: float32 path against torch's interpolate", c)
	}
}

// images is a dataset of uint8 RGB images of varying size, as ImageFolder yields.
type images struct{ n int }

func (d images) Len() int { return d.n }

func (d images) Get(i int, s *Sample) error {
	h, w := 20+i%7, 24+i%5
	px := s.Set(Input, torch.Uint8, []int64{3, int64(h), int64(w)}).Data
	r := rand.New(rand.NewPCG(uint64(i), 9))
	for k := range px {
		px[k] = uint8(r.IntN(256))
	}
	SetScalar(s, Label, int64(i%4))
	return nil
}

func TestRandomResizedCropAndFlipReproduce(t *testing.T) {
	aug := Compose(RandomResizedCrop{Height: 16, Width: 16}, RandomHorizontalFlip{P: 0.5}, ToTensor(), Normalize{Mean: ImageNetMean, Std: ImageNetStd})
	opts := LoaderOptions{BatchSize: 5, Shuffle: true, Seed: 21, Transform: aug, Workers: 3}
	full, err := readHost(t, mustLoader(t, images{40}, opts), 1, 0)
	require.NoError(t, err)
	require.Len(t, full, 8)
	opts.Workers = 1
	again, err := readHost(t, mustLoader(t, images{40}, opts), 1, 0)
	require.NoError(t, err)
	assert.Equal(t, full, again, "another run, another worker count: the same bits")
	resumed, err := readHost(t, mustLoader(t, images{40}, opts), 1, 5)
	require.NoError(t, err)
	assert.Equal(t, full[5:], resumed, "a resume at batch 5 sees the same augmentations")
	other, err := readHost(t, mustLoader(t, images{40}, opts), 2, 0)
	require.NoError(t, err)
	assert.NotEqual(t, full[0].Input, other[0].Input, "another epoch, other augmentations")
}

func TestRandomResizedCropWindows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var areas []float64
	for range 2000 {
		top, left, h, w := RandomResizedCrop{Height: 8, Width: 8}.params(30, 50, r)
		require.True(t, top >= 0 && left >= 0 && h > 0 && w > 0 && top+h <= 30 && left+w <= 50, "window %d,%d %dx%d", top, left, h, w)
		areas = append(areas, float64(h*w)/1500)
		ratio := float64(w) / float64(h)
		require.True(t, ratio > 0.5 && ratio < 2, "ratio %v near [3/4, 4/3] up to rounding", ratio)
	}
	slices.Sort(areas)
	assert.Less(t, areas[0], 0.15)
	assert.Greater(t, areas[len(areas)-1], 0.75, "the largest window of ratio 4/3 is 30x40, 80%")
	// A strip no window of ratio 3/4..4/3 fits: the fallback is its centered largest.
	top, left, h, w := RandomResizedCrop{Height: 8, Width: 8, Scale: [2]float64{0.99, 1}}.params(10, 100, r)
	assert.Equal(t, []int{0, 43, 10, 13}, []int{top, left, h, w})
}

func TestConvertImageDtype(t *testing.T) {
	var s Sample
	require.NoError(t, s.SetBytes(Input, torch.Uint8, []int64{1, 1, 3}, []byte{0, 128, 255}))
	require.NoError(t, ToTensor().Apply(&s, nil))
	assert.Equal(t, []float32{0, 128.0 / 255, 1}, Values[float32](s.Field(Input)))
	require.NoError(t, ConvertImageDtype{DType: torch.Uint8}.Apply(&s, nil))
	assert.Equal(t, []byte{0, 128, 255}, s.Field(Input).Data)
	// Every level, converted within the storage the float32 values left (in place).
	levels := make([]byte, 256)
	for v := range levels {
		levels[v] = byte(v)
	}
	require.NoError(t, s.SetBytes(Input, torch.Float32, []int64{1, 1, 256}, make([]byte, 4*256)))
	require.NoError(t, ConvertImageDtype{DType: torch.Uint8}.Apply(&s, nil))
	copy(s.Field(Input).Data, levels)
	require.NoError(t, ToTensor().Apply(&s, nil))
	for v, got := range Values[float32](s.Field(Input)) {
		require.Equal(t, float32(v)/255, got, "level %d", v)
	}
	scope := torch.NewScope()
	defer scope.Close()
	x := NormalizeImages(torch.FromSlice([]uint8{0, 51, 255}, 1, 1, 1, 3), []float32{0.2}, []float32{0.5})
	assert.InDeltaSlice(t, []float32{-0.4, 0, 1.6}, x.Float32s(), 1e-6)
}

// NormalizeImages is an op: misuse panics with a *torch.Error, which torch.Recover (and
// so Trainer.Run) returns as an error instead of crashing the program.
func TestNormalizeImagesMisuseIsATorchError(t *testing.T) {
	scope := torch.NewScope()
	defer scope.Close()
	normalize := func(x *torch.Tensor, mean, std []float32) (err error) {
		defer torch.Recover(&err, "normalizing")
		NormalizeImages(x, mean, std)
		return nil
	}
	images := torch.Zeros([]int64{2, 3, 4, 4}, torch.Uint8, torch.CPU)
	require.ErrorContains(t, normalize(torch.Zeros([]int64{4, 4}, torch.Uint8, torch.CPU), []float32{0.5}, []float32{0.5}),
		"NormalizeImages: images of shape [4 4] are not [N, C, H, W] or [C, H, W]")
	require.ErrorContains(t, normalize(images, []float32{0.5, 0.5}, []float32{0.5, 0.5}),
		"NormalizeImages: 2 means and 2 stds for images of shape [2 3 4 4]")
	require.ErrorContains(t, normalize(images, []float32{0.5}, nil), "1 means and 0 stds")
	require.NoError(t, normalize(images, ImageNetMean, ImageNetStd))
}
