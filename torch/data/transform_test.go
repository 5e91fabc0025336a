package data

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gotrain/gotrain/torch"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRandomCropIsAWindowOfThePaddedImage(t *testing.T) {
	// A 2x3x4 image with values 1..24, padded by 2 on every side.
	const c, h, w, pad = 2, 3, 4, 2
	padded := func(k, y, x int) float32 {
		y, x = y-pad, x-pad
		if y < 0 || y >= h || x < 0 || x >= w {
			return 0
		}
		return float32(k*h*w + y*w + x + 1)
	}
	window := func(top, left int) string {
		var v []float32
		for k := range c {
			for y := range 3 {
				for x := range 2 {
					v = append(v, padded(k, top+y, left+x))
				}
			}
		}
		return fmt.Sprint(v)
	}
	windows := map[string]bool{}
	for top := 0; top+3 <= h+2*pad; top++ {
		for left := 0; left+2 <= w+2*pad; left++ {
			windows[window(top, left)] = true
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for range 300 {
		var s Sample
		in := SetValues[float32](&s, Input, c, h, w)
		for i := range in {
			in[i] = float32(i + 1)
		}
		require.NoError(t, RandomCrop{Height: 3, Width: 2, Padding: pad}.Apply(&s, r))
		require.Equal(t, []int64{c, 3, 2}, s.Field(Input).Shape)
		got := fmt.Sprint(Values[float32](s.Field(Input)))
		require.True(t, windows[got], "crop %s is no window of the padded image", got)
		seen[got] = true
	}
	assert.Equal(t, windows, seen, "every window occurs")

	err := RandomCrop{Height: 8, Width: 2, Padding: 2}.Apply(floatSample([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 1, 3, 4), r)
	assert.ErrorContains(t, err, "crop 8x2 does not fit a 3x4 sample padded by 2")
}

func TestRandomHorizontalFlip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := floatSample([]float32{1, 2, 3, 4, 5, 6}, 1, 2, 3)
	require.NoError(t, RandomHorizontalFlip{P: 1}.Apply(s, r))
	assert.Equal(t, []float32{3, 2, 1, 6, 5, 4}, Values[float32](s.Field(Input)))
	require.NoError(t, RandomHorizontalFlip{P: 0}.Apply(s, r))
	assert.Equal(t, []float32{3, 2, 1, 6, 5, 4}, Values[float32](s.Field(Input)))
	u := &Sample{}
	require.NoError(t, u.SetBytes("image", torch.Uint8, []int64{1, 1, 3}, []byte{7, 8, 9}))
	require.NoError(t, RandomHorizontalFlip{P: 1, Field: "image"}.Apply(u, r))
	assert.Equal(t, []byte{9, 8, 7}, u.Field("image").Data, "any dtype, any field")
}

func TestNormalizePerChannel(t *testing.T) {
	s := floatSample([]float32{1, 2, 3, 4}, 2, 1, 2)
	require.NoError(t, Normalize{Mean: []float32{1, 2}, Std: []float32{2, 4}}.Apply(s, nil))
	assert.Equal(t, []float32{0, 0.5, 0.25, 0.5}, Values[float32](s.Field(Input)))
	err := Normalize{Mean: []float32{1, 2, 3}, Std: []float32{1, 1, 1}}.Apply(s, nil)
	assert.ErrorContains(t, err, "3 means and 3 stds for a sample of shape [2 1 2]")
}

// floatSample is a sample whose Input field holds values of the given shape.
func floatSample(values []float32, shape ...int64) *Sample {
	s := &Sample{}
	copy(SetValues[float32](s, Input, shape...), values)
	return s
}
