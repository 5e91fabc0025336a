package data

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// refResizeUint8 is PIL's 8-bit resampling written plainly (Resample.c: the bilinear
// taps of precompute_coeffs, normalize_coeffs_8bpc, the horizontal pass over every
// row, then the vertical pass), which resizeUint8's faster passes must reproduce bit
// for bit.
func refResizeUint8(src []byte, c, h, w, oh, ow int) []byte {
	pass := func(in []byte, size, outSize, stride, lines int) []byte {
		co := bilinearCoeffs(size, outSize)
		out := make([]byte, c*lines*outSize)
		// in holds c*lines lines of size values along the axis, stride apart, and
		// consecutive lines 1 (stride size) or size (stride 1) apart.
		for ch := range c {
			for l := range lines {
				for i := range outSize {
					xmin, cnt := co.bounds[2*i], co.bounds[2*i+1]
					ss := int64(1 << (precisionBits - 1))
					for t := range cnt {
						v := co.k[i*co.ksize+t]
						k := int64(0.5 + v*(1<<precisionBits))
						if v < 0 {
							k = int64(-0.5 + v*(1<<precisionBits))
						}
						var px byte
						if stride == 1 {
							px = in[(ch*lines+l)*size+xmin+t]
						} else {
							px = in[(ch*size+xmin+t)*lines+l]
						}
						ss += int64(px) * k
					}
					v := uint8(min(max(ss>>precisionBits, 0), 255))
					if stride == 1 {
						out[(ch*lines+l)*outSize+i] = v
					} else {
						out[(ch*outSize+i)*lines+l] = v
					}
				}
			}
		}
		return out
	}
	cur := src
	if ow != w {
		cur = pass(cur, w, ow, 1, h)
	}
	if oh != h {
		cur = pass(cur, h, oh, ow, ow)
	}
	return cur
}

func TestResizeUint8MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sizes := [][4]int{{28, 28, 112, 112}, {128, 128, 112, 112}, {94, 94, 112, 112}, {375, 500, 224, 224}, {1, 5, 3, 1}, {7, 3, 7, 9}, {40, 40, 40, 13}}
	for range 60 {
		sizes = append(sizes, [4]int{1 + r.IntN(150), 1 + r.IntN(150), 1 + r.IntN(120), 1 + r.IntN(120)})
	}
	for _, sz := range sizes {
		h, w, oh, ow := sz[0], sz[1], sz[2], sz[3]
		src := make([]byte, 3*h*w)
		for i := range src {
			src[i] = byte(r.IntN(256))
		}
		// Smooth areas and edges, as in photos, beside the noise.
		for i := range src[:len(src)/2] {
			src[i] = byte(i % w * 255 / w)
		}
		dst := make([]byte, 3*oh*ow)
		resizeUint8(src, 3, h, w, oh, ow, dst)
		require.Equal(t, refResizeUint8(src, 3, h, w, oh, ow), dst, "%dx%d to %dx%d", h, w, oh, ow)
	}
}
