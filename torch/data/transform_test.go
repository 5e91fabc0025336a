package data

import (
	"fmt"
	"math/rand/v2"
	"testing"

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
		s := Sample{Shape: []int64{c, h, w}}
		for i := range c * h * w {
			s.Input = append(s.Input, float32(i+1))
		}
		require.NoError(t, RandomCrop{Height: 3, Width: 2, Padding: pad}.Apply(&s, r))
		require.Equal(t, []int64{c, 3, 2}, s.Shape)
		got := fmt.Sprint(s.Input)
		require.True(t, windows[got], "crop %s is no window of the padded image", got)
		seen[got] = true
	}
	assert.Equal(t, windows, seen, "every window occurs")

	err := RandomCrop{Height: 8, Width: 2, Padding: 2}.Apply(&Sample{Input: make([]float32, 12), Shape: []int64{1, 3, 4}}, r)
	assert.ErrorContains(t, err, "crop 8x2 does not fit a 3x4 sample padded by 2")
}

func TestRandomHorizontalFlip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := Sample{Input: []float32{1, 2, 3, 4, 5, 6}, Shape: []int64{1, 2, 3}}
	require.NoError(t, RandomHorizontalFlip{P: 1}.Apply(&s, r))
	assert.Equal(t, []float32{3, 2, 1, 6, 5, 4}, s.Input)
	require.NoError(t, RandomHorizontalFlip{P: 0}.Apply(&s, r))
	assert.Equal(t, []float32{3, 2, 1, 6, 5, 4}, s.Input)
}

func TestNormalizePerChannel(t *testing.T) {
	s := Sample{Input: []float32{1, 2, 3, 4}, Shape: []int64{2, 1, 2}}
	require.NoError(t, Normalize{Mean: []float32{1, 2}, Std: []float32{2, 4}}.Apply(&s, nil))
	assert.Equal(t, []float32{0, 0.5, 0.25, 0.5}, s.Input)
	err := Normalize{Mean: []float32{1, 2, 3}, Std: []float32{1, 1, 1}}.Apply(&s, nil)
	assert.ErrorContains(t, err, "3 means and 3 stds for a sample of shape [2 1 2]")
}
