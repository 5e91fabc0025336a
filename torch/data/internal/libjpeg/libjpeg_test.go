//go:build cgo && !nolibjpeg

package libjpeg

import (
	"bytes"
	"image"
	"image/jpeg"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func decode(t testing.TB, raw []byte, channels int) (Header, []byte) {
	h, err := ReadHeader(raw)
	require.NoError(t, err)
	dst := make([]byte, channels*h.Width*h.Height)
	require.NoError(t, Decode(raw, h, channels, dst))
	return h, dst
}

func TestDecodeGray(t *testing.T) {
	raw := testImage(t, 45, 31, true)
	h, l := decode(t, raw, 1)
	_, rgb := decode(t, raw, 3)
	n := h.Width * h.Height
	for c := range 3 {
		assert.Equal(t, l, rgb[c*n:(c+1)*n], "convert(\"RGB\") replicates a grayscale JPEG")
	}
	// Go's decoder has its own integer IDCT: the two agree to a level or two.
	img, err := jpeg.Decode(bytes.NewReader(raw))
	require.NoError(t, err)
	g := img.(*image.Gray)
	worst := 0
	for y := range h.Height {
		for x := range h.Width {
			worst = max(worst, abs(int(g.Pix[y*g.Stride+x])-int(l[y*h.Width+x])))
		}
	}
	assert.LessOrEqual(t, worst, 2)
}

func TestDecodeColor(t *testing.T) {
	raw := testImage(t, 45, 31, false)
	h, rgb := decode(t, raw, 3)
	_, l := decode(t, raw, 1)
	n := h.Width * h.Height
	// Against Go's decoder (nearest chroma, its own YCbCr to RGB): close on average.
	img, err := jpeg.Decode(bytes.NewReader(raw))
	require.NoError(t, err)
	sum := 0
	for y := range h.Height {
		for x := range h.Width {
			r, g, b, _ := img.At(x, y).RGBA()
			i := y*h.Width + x
			sum += abs(int(r>>8)-int(rgb[i])) + abs(int(g>>8)-int(rgb[n+i])) + abs(int(b>>8)-int(rgb[2*n+i]))
			want := (uint32(rgb[i])*19595 + uint32(rgb[n+i])*38470 + uint32(rgb[2*n+i])*7471 + 0x8000) >> 16
			require.Equal(t, uint8(want), l[i], "L is PIL's luma of the RGB pixels at (%d, %d)", x, y)
		}
	}
	t.Logf("mean |diff| against Go's decoder %.2f", float64(sum)/float64(3*n))
	assert.Less(t, float64(sum)/float64(3*n), 2.0)
}

func TestDecodeErrors(t *testing.T) {
	raw := testImage(t, 64, 48, false)
	h, err := ReadHeader(raw)
	require.NoError(t, err)
	dst := make([]byte, 3*64*48)
	assert.ErrorContains(t, Decode(raw[:len(raw)/2], h, 3, dst), "Premature end of JPEG file", "truncated")
	assert.ErrorContains(t, Decode(raw, Header{Width: 63, Height: 48, Components: 3, Precision: 8}, 3, dst[:3*63*48]), "frame header says")
	assert.ErrorContains(t, Decode(raw, h, 3, dst[:10]), "destination of 10 bytes")
	assert.ErrorContains(t, Decode(raw, h, 2, dst), "output channels")
	assert.ErrorContains(t, Decode(raw, Header{Width: 4, Height: 4, Components: 4, Precision: 8}, 3, dst[:48]), "not decoded here")
	junk := append([]byte{0xff, 0xd8}, bytes.Repeat([]byte{0xff, 0xc0, 0, 3, 1}, 3)...)
	assert.Error(t, Decode(junk, h, 3, dst), "a broken frame header")

	// Damaged files decode or fail with an error; none may crash the process (libjpeg's
	// own error handler would exit).
	r := rand.New(rand.NewPCG(1, 2))
	failed := 0
	for range 300 {
		bad := bytes.Clone(raw)
		for range 1 + r.IntN(8) {
			bad[2+r.IntN(len(bad)-2)] = byte(r.Uint32())
		}
		bh, err := ReadHeader(bad)
		if err != nil || !bh.Supported() || bh.Width*bh.Height > 1<<20 {
			continue
		}
		if Decode(bad, bh, 3, make([]byte, 3*bh.Width*bh.Height)) != nil {
			failed++
		}
	}
	assert.Positive(t, failed, "some damaged files are errors")
}

func abs(x int) int { return max(x, -x) }
