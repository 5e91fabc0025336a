package libjpeg

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testImage is a w x h image of gradients and sharp edges (in luma for color images,
// where Go's decoder, which upsamples chroma by the nearest sample, is compared), encoded by Go's encoder (4:2:0 for color).
func testImage(t testing.TB, w, h int, gray bool) []byte {
	var img image.Image
	if gray {
		g := image.NewGray(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				g.Pix[y*g.Stride+x] = uint8((x*255/w + 80*((x/7+y/5)%2)) % 256)
			}
		}
		img = g
	} else {
		c := image.NewNRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				e := 40 * ((x/6 + y/9) % 2) // an edge in luma
				c.Set(x, y, color.NRGBA{uint8(x*200/w + e), uint8(y*200/h + e), uint8((x+y)*200/(w+h) + e), 255})
			}
		}
		img = c
	}
	var buf bytes.Buffer
	require.NoError(t, jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}))
	return buf.Bytes()
}

func TestReadHeader(t *testing.T) {
	for _, c := range []struct {
		w, h  int
		gray  bool
		comps int
	}{{37, 21, false, 3}, {8, 300, true, 1}} {
		raw := testImage(t, c.w, c.h, c.gray)
		h, err := ReadHeader(raw)
		require.NoError(t, err)
		assert.Equal(t, Header{Width: c.w, Height: c.h, Components: c.comps, Precision: 8}, h)
		assert.True(t, h.Supported())
		// Bytes between markers and fill bytes are skipped, as libjpeg skips them.
		padded := append([]byte{0xff, 0xd8, 'x', 'y', 0xff, 0xff}, raw[2:]...)
		h2, err := ReadHeader(padded)
		require.NoError(t, err)
		assert.Equal(t, h, h2)
		for n := range 20 {
			_, err := ReadHeader(raw[:n])
			assert.Error(t, err, "a file cut after %d bytes has no frame header", n)
		}
	}
	_, err := ReadHeader([]byte("\x89PNG\r\n\x1a\n"))
	assert.ErrorContains(t, err, "no SOI marker")
	_, err = ReadHeader([]byte{0xff, 0xd8, 0xff, 0xda, 0, 2})
	assert.ErrorContains(t, err, "before the frame header")
	assert.False(t, Header{Width: 4, Height: 4, Components: 4, Precision: 8}.Supported(), "CMYK")
	assert.False(t, Header{Width: 4, Height: 4, Components: 3, Precision: 12}.Supported(), "12-bit")
	assert.False(t, Header{Width: 4, Height: 0, Components: 3, Precision: 8}.Supported(), "height in a DNL marker")
}
