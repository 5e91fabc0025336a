package data

import (
	"fmt"
	"math"
	"math/bits"
	"os"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// DefaultMaxImagePixels is PIL's Image.MAX_IMAGE_PIXELS, int(1024 * 1024 * 1024 // 4 //
// 3): the pixel count above which an image is a possible decompression bomb. As in PIL,
// an image of more pixels than this decodes with a warning, and one of more than twice
// this is refused before any pixel buffer is allocated (ImageFolderOptions.MaxImagePixels
// sets another limit).
const DefaultMaxImagePixels = 89_478_485

// ImageTooLargeError is an image whose header declares more pixels than twice the pixel
// limit (PIL's DecompressionBombError). It is returned before the image is decoded.
type ImageTooLargeError struct {
	Width, Height int64
	// Limit is the largest pixel count that decodes: twice the MaxImagePixels in force.
	Limit int64
}

// Error implements error.
func (e *ImageTooLargeError) Error() string {
	return fmt.Sprintf("image size (%dx%d = %d pixels) exceeds the limit of %d pixels (twice MaxImagePixels, as PIL's Image.MAX_IMAGE_PIXELS): could be a decompression bomb; raise ImageFolderOptions.MaxImagePixels for trusted data",
		e.Width, e.Height, satMul(e.Width, e.Height), e.Limit)
}

// pixelLimit is the image size rule in force: pixels above warn (PIL's
// DecompressionBombWarning), pixels above 2*warn are refused.
type pixelLimit struct{ warn int64 }

// newPixelLimit resolves ImageFolderOptions.MaxImagePixels: 0 is PIL's default; a
// negative value lifts PIL's limit, and then an image whose pixels would not fit in the
// machine's memory (8 bytes a pixel, the most a decoder holds) is still refused, since
// Go cannot recover from an allocation that fails.
func newPixelLimit(limit int64) pixelLimit {
	switch {
	case limit == 0:
		return pixelLimit{DefaultMaxImagePixels}
	case limit < 0:
		return pixelLimit{max(physicalMemory()/16, 1)}
	}
	return pixelLimit{limit}
}

// check reports whether a w x h image is refused (an *ImageTooLargeError) or only
// large (above the warning threshold). The arithmetic cannot overflow: the header's
// width and height are whatever a file claims.
func (l pixelLimit) check(w, h int64) (large bool, err error) {
	if w <= 0 || h <= 0 {
		return false, fmt.Errorf("image header declares a size of %dx%d pixels", w, h)
	}
	refuse := satMul(l.warn, 2)
	if px := satMul(w, h); px > refuse {
		return false, &ImageTooLargeError{Width: w, Height: h, Limit: refuse}
	} else if px > l.warn {
		return true, nil
	}
	return false, nil
}

// satMul is a*b for a, b >= 0, saturated at math.MaxInt64.
func satMul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// satAdd is a+b for a, b >= 0, saturated at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// NotRegularError is a data file that is not a regular file: a directory, a named pipe
// (FIFO), a device such as /dev/zero, a socket. Reading one could block forever or never
// end, so it is refused before any byte is read.
type NotRegularError = fsutil.NotRegularError

// OpenRegular opens path for reading and returns it with its size, or an error (a
// *NotRegularError for a directory, FIFO, device or socket) without reading anything;
// see fsutil.Open, which every data reader of this package and the commands use.
func OpenRegular(path string) (*os.File, int64, error) {
	return fsutil.Open(path)
}

// MaxSamples is the largest dataset length the samplers, splits and loaders of this
// package accept: an epoch's order is a table of 8 bytes a sample, built a few times
// over (the permutation, the padded order, a rank's share), so a length whose table
// would take more than an eighth of this machine's memory is refused with an error
// rather than failing in an allocation that Go cannot recover from.
func MaxSamples() int {
	return int(max(physicalMemory()/(8*8), 1<<20))
}

// checkSamples reports a dataset length beyond MaxSamples.
func checkSamples(what string, n int) error {
	if m := MaxSamples(); n > m {
		return fmt.Errorf("data: %s: %d samples is more than this machine can index (at most %d: an epoch's order takes 8 bytes a sample)", what, n, m)
	}
	return nil
}
