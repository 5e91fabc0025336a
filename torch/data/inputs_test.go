package data

// Table tests of every input class a user gets wrong (issue 36's list): header bombs of
// each image format, a valid image beyond PIL's pixel limit, malformed CSV tables,
// sizes that would overflow or exhaust memory, FIFOs and /dev/zero given as data. Each
// case ends in an error that names the file (and line/column or field), or in a correct
// run; memory is asserted through the Go heap's allocations (runtime.MemStats) or the
// process's resident set, never through time.

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/internal/testsupport"
	"github.com/gotrain/gotrain/torch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// finishes runs f and fails the test if it does not return within a minute: a guard
// against a read that blocks forever (a FIFO), not a measure of speed.
func finishes(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s: still blocked after a minute", what)
	}
}

// pngChunk encodes one PNG chunk with its CRC.
func pngChunk(typ string, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	b = append(b, typ...)
	b = append(b, data...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[4:]))
}

// pngFile assembles a PNG from its IHDR fields and an already compressed IDAT stream.
func pngFile(w, h uint32, depth, colorType byte, idat []byte, extra ...[]byte) []byte {
	ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, w), h)
	ihdr = append(ihdr, depth, colorType, 0, 0, 0)
	b := append([]byte("\x89PNG\r\n\x1a\n"), pngChunk("IHDR", ihdr)...)
	for _, e := range extra {
		b = append(b, e...)
	}
	b = append(b, pngChunk("IDAT", idat)...)
	return append(b, pngChunk("IEND", nil)...)
}

func zlibBytes(raw []byte) []byte {
	var b bytes.Buffer
	zw := zlib.NewWriter(&b)
	zw.Write(raw)
	zw.Close()
	return b.Bytes()
}

// repeatedDeflate returns a raw deflate stream of first followed by n copies of chunk,
// built from each compressed once: a fresh compressor per part, flushed (its blocks are
// not final, end byte-aligned and refer to nothing before them), then an empty final
// block. A stream that inflates to gigabytes is so built in milliseconds.
func repeatedDeflate(t *testing.T, first, chunk []byte, n int) []byte {
	part := func(raw []byte) []byte {
		var b bytes.Buffer
		fw, err := flate.NewWriter(&b, flate.BestCompression)
		require.NoError(t, err)
		_, err = fw.Write(raw)
		require.NoError(t, err)
		require.NoError(t, fw.Flush())
		return b.Bytes()
	}
	out := part(first)
	c := part(chunk)
	for range n {
		out = append(out, c...)
	}
	return append(out, 0x01, 0x00, 0x00, 0xff, 0xff) // final, empty stored block
}

// bigZeroPNG is a valid 8-bit grayscale PNG of w x h black pixels, built compactly (about
// 20000 x 20000 pixels in 400 KB).
func bigZeroPNG(t *testing.T, w, h int) []byte {
	const rowsPer = 1000
	row := make([]byte, (w+1)*rowsPer) // filter byte 0 and zero samples, rowsPer rows
	require.Zero(t, h%rowsPer)
	stream := repeatedDeflate(t, row, row, h/rowsPer-1)
	// zlib: header, the deflate stream, Adler-32 of the data; for n zero bytes a = 1 and
	// b = n mod 65521.
	n := uint64(w+1) * uint64(h)
	idat := append([]byte{0x78, 0xda}, stream...)
	idat = binary.BigEndian.AppendUint32(idat, uint32(n%65521)<<16|1)
	return pngFile(uint32(w), uint32(h), 8, 0, idat)
}

// bombs are image files whose headers claim far more pixels than they hold.
func bombs(t *testing.T) map[string][]byte {
	le16 := binary.LittleEndian.AppendUint16
	le32 := binary.LittleEndian.AppendUint32

	// BMP: file header and BITMAPINFOHEADER, 24-bit, 100000 x 100000, 16 bytes of pixels.
	bmp := append([]byte("BM"), le32(le32(le32(nil, 70), 0), 54)...)
	bmp = le32(le32(le32(bmp, 40), 100000), 100000)
	bmp = le32(le32(le32(le32(le32(le32(le16(le16(bmp, 1), 24), 0), 0), 2835), 2835), 0), 0)
	bmp = append(bmp, make([]byte, 16)...)

	// TIFF: little-endian, one IFD of 8 entries, 8-bit grayscale 100000 x 100000 in one
	// uncompressed strip of which the file holds a few bytes.
	tif := le32([]byte("II*\x00"), 8)
	entries := [][3]uint32{ // tag, type (3 SHORT, 4 LONG), value
		{256, 4, 100000}, {257, 4, 100000}, {258, 3, 8}, {259, 3, 1}, {262, 3, 1},
		{273, 4, 122}, {278, 4, 100000}, {279, 4, 38},
	}
	tif = le16(tif, uint16(len(entries)))
	for _, e := range entries {
		tif = le32(le32(le16(le16(tif, uint16(e[0])), uint16(e[1])), 1), e[2])
	}
	tif = le32(tif, 0)
	tif = append(tif, make([]byte, 160-len(tif))...)

	// JPEG: SOI, a baseline frame header of 65535 x 65535 with three components, EOI.
	jpg := []byte{0xff, 0xd8, 0xff, 0xc0, 0, 17, 8, 0xff, 0xff, 0xff, 0xff, 3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0, 0xff, 0xd9}

	// GIF: logical screen of 65535 x 65535, no colour table, trailer.
	gif := []byte("GIF89a\xff\xff\xff\xff\x00\x00\x00;")

	// WebP: an extended (VP8X) header with a canvas of 2^24 x 2^24.
	vp8x := []byte("VP8X\x0a\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff")
	webp := append(le32([]byte("RIFF"), uint32(4+len(vp8x))), "WEBP"...)
	webp = append(webp, vp8x...)

	return map[string][]byte{
		// 83 bytes: signature, IHDR of 100000 x 100000 RGB, an IDAT of a few zeros, IEND.
		"png-100000x100000.png":  pngFile(100000, 100000, 8, 2, zlibBytes(make([]byte, 16))),
		"jpeg-65535x65535.jpg":   jpg,
		"bmp-100000x100000.bmp":  bmp,
		"tiff-100000x100000.tif": tif,
		"ppm-100000x100000.ppm":  []byte("P6\n100000 100000\n255\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
		// 2^32 x 2^32 pixels: the byte count 2^64 wraps to 0 in int64 arithmetic.
		"pgm-2^32x2^32.pgm":     []byte("P5\n4294967296 4294967296\n255\n\x00\x00\x00\x00"),
		"gif-65535x65535.gif":   gif,
		"webp-2^24x2^24.webp":   webp,
		"valid-20000x20000.png": bigZeroPNG(t, 20000, 20000),
	}
}

// corruptImages are files that fail to decode for reasons other than their size.
func corruptImages() map[string][]byte {
	return map[string][]byte{
		"pgm-field-overflows.pgm": []byte("P5\n99999999999999999999 1\n255\n\x00"),
		"pgm-truncated.pgm":       []byte("P5\n1000 1000\n255\n\x00\x00\x00"),
		"pgm-bad-maxval.pgm":      []byte("P5\n2 2\n65536\n\x00\x00\x00\x00"),
		"png-zero-width.png":      pngFile(0, 10, 8, 0, zlibBytes(make([]byte, 10))),
		"png-truncated.png":       pngFile(10, 10, 8, 0, zlibBytes(make([]byte, 110)))[:60],
		"not-an-image.png":        []byte("hello, world"),
		"empty.jpg":               nil,
	}
}

// writeGoodPNG writes a 4x3 RGB PNG and returns its pixels as [C, H, W].
func writeGoodPNG(t *testing.T, path string) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, 4, 3))
	want := make([]byte, 3*12)
	for i := range 12 {
		c := color.NRGBA{uint8(20 * i), uint8(255 - 20*i), uint8(7 * i), 255}
		img.SetNRGBA(i%4, i/4, c)
		want[i], want[12+i], want[24+i] = c.R, c.G, c.B
	}
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, png.Encode(f, img))
	require.NoError(t, f.Close())
	return want
}

func TestImageHeaderBombsAreRefusedBeforeDecoding(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "class")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	cases := bombs(t)
	for name, b := range cases {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	t.Logf("sizes: png %d, jpeg %d, bmp %d, tiff %d, ppm %d, valid 20000x20000 png %d bytes",
		len(cases["png-100000x100000.png"]), len(cases["jpeg-65535x65535.jpg"]), len(cases["bmp-100000x100000.bmp"]),
		len(cases["tiff-100000x100000.tif"]), len(cases["ppm-100000x100000.ppm"]), len(cases["valid-20000x20000.png"]))
	exts := append([]string{".gif"}, ImageExtensions...)
	ds, err := NewImageFolder(root, ImageFolderOptions{Extensions: exts})
	require.NoError(t, err)
	require.Equal(t, len(cases), ds.Len())
	for i, img := range ds.Images {
		t.Run(filepath.Base(img.Path), func(t *testing.T) {
			var s Sample
			var err error
			alloc := testsupport.AllocatedBy(func() { err = ds.Get(i, &s) })
			var tooLarge *ImageTooLargeError
			require.ErrorAs(t, err, &tooLarge)
			assert.Contains(t, err.Error(), img.Path)
			assert.Contains(t, err.Error(), "could be a decompression bomb")
			assert.Equal(t, int64(2*DefaultMaxImagePixels), tooLarge.Limit)
			assert.Less(t, alloc, uint64(4<<20), "only the file and its header are read")
		})
	}
}

const pyTIFF = `
import json, sys
import numpy as np
from PIL import Image
im = Image.open(sys.argv[1])
print(json.dumps({"size": im.size, "sum": int(np.asarray(im.convert("L"), dtype=np.int64).sum())}))
`

// TestTIFFStripInflationBounded: a 100x100 deflate TIFF with TIFF's default RowsPerStrip
// (2^32-1) whose strip inflates to 512 MB decodes in bounded memory (the strip is read
// up to the image's rows, as libtiff reads it), to PIL's pixels.
func TestTIFFStripInflationBounded(t *testing.T) {
	const chunk, chunks = 1 << 20, 512
	stream := repeatedDeflate(t, make([]byte, chunk), make([]byte, chunk), chunks-1)
	strip := append([]byte{0x78, 0x9c}, stream...)
	strip = binary.BigEndian.AppendUint32(strip, uint32(chunk*chunks%65521)<<16|1)
	le16, le32 := binary.LittleEndian.AppendUint16, binary.LittleEndian.AppendUint32
	entries := [][3]uint32{{256, 3, 100}, {257, 3, 100}, {258, 3, 8}, {259, 3, 8}, {262, 3, 1},
		{273, 4, 8 + 2 + 8*12 + 4}, {278, 4, math.MaxUint32}, {279, 4, uint32(len(strip))}}
	tif := le16(le32([]byte("II*\x00"), 8), uint16(len(entries)))
	for _, e := range entries {
		tif = le32(le32(le16(le16(tif, uint16(e[0])), uint16(e[1])), 1), e[2])
	}
	tif = append(le32(tif, 0), strip...)
	root := t.TempDir()
	p := filepath.Join(root, "c", "strip.tif")
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, tif, 0o644))
	t.Logf("%d-byte TIFF whose strip inflates to %d bytes", len(tif), chunk*chunks)

	ds, err := NewImageFolder(root, ImageFolderOptions{Mode: Gray})
	require.NoError(t, err)
	var s Sample
	alloc := testsupport.AllocatedBy(func() { err = ds.Get(0, &s) })
	require.NoError(t, err)
	assert.Less(t, alloc, uint64(8<<20))
	assert.Equal(t, []int64{1, 100, 100}, s.Field(Input).Shape)
	sum := 0
	for _, v := range s.Field(Input).Data {
		sum += int(v)
	}
	var pil struct {
		Size []int
		Sum  int
	}
	require.NoError(t, json.Unmarshal(testpy.Run(t, pyTIFF, []string{"PIL", "numpy"}, p), &pil))
	assert.Equal(t, []int{100, 100}, pil.Size)
	assert.Equal(t, pil.Sum, sum)
}

// TestValidOversizedPNG: a real 20000 x 20000 PNG (400 MB of pixels in 400 KB) is
// refused from its header as PIL refuses it, and decodes once the limit allows it.
func TestValidOversizedPNG(t *testing.T) {
	b := bigZeroPNG(t, 20000, 20000)
	require.Less(t, len(b), 1<<20)
	if raceOverhead == 1 { // inflating 400 MB under the race detector takes minutes
		zr, err := zlib.NewReader(bytes.NewReader(b[8+25+8 : len(b)-12-4]))
		require.NoError(t, err)
		n, err := io.Copy(io.Discard, zr)
		require.NoError(t, err, "the stream and its Adler-32 are valid")
		require.EqualValues(t, 20000*20001, n)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "big")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "big.png")
	require.NoError(t, os.WriteFile(path, b, 0o644))

	out := testpy.Run(t, `
import sys
from PIL import Image
try:
    Image.open(sys.argv[1])
    print("opened")
except Image.DecompressionBombError as e:
    print("DecompressionBombError:", e)
`, []string{"PIL"}, path)
	assert.Contains(t, string(out), "DecompressionBombError", "PIL refuses it too")

	ds, err := NewImageFolder(root, ImageFolderOptions{Mode: Gray})
	require.NoError(t, err)
	var s Sample
	alloc := testsupport.AllocatedBy(func() { err = ds.Get(0, &s) })
	require.ErrorContains(t, err, path+": image size (20000x20000 = 400000000 pixels) exceeds the limit of 178956970 pixels")
	assert.Less(t, alloc, uint64(4<<20))
}

const pyPixelLimit = `
import json, sys, warnings
from PIL import Image
Image.MAX_IMAGE_PIXELS = int(sys.argv[1])
out = {}
for p in sys.argv[2:]:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            Image.open(p).convert("RGB")
            out[p] = "warning" if any(issubclass(x.category, Image.DecompressionBombWarning) for x in w) else "ok"
        except Image.DecompressionBombError:
            out[p] = "error"
print(json.dumps(out))
`

// TestPixelLimitMatchesPIL: with MaxImagePixels set, an image at the limit decodes, one
// above it decodes with a warning (LargeImages), one above twice it is refused: PIL's
// outcome for each, asked of PIL itself.
func TestPixelLimitMatchesPIL(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "c")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	sizes := map[string][2]int{"a-at.png": {10, 10}, "b-above.png": {12, 10}, "c-twice.png": {20, 10}, "d-beyond.png": {15, 14}}
	var paths []string
	for name, wh := range sizes {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, png.Encode(f, image.NewGray(image.Rect(0, 0, wh[0], wh[1]))))
		require.NoError(t, f.Close())
		paths = append(paths, p)
	}
	var pil map[string]string
	require.NoError(t, json.Unmarshal(testpy.Run(t, pyPixelLimit, []string{"PIL"}, append([]string{"100"}, paths...)...), &pil))

	ds, err := NewImageFolder(root, ImageFolderOptions{MaxImagePixels: 100})
	require.NoError(t, err)
	for i, img := range ds.Images {
		var s Sample
		err := ds.Get(i, &s)
		got := "ok"
		switch {
		case err != nil:
			var tooLarge *ImageTooLargeError
			require.ErrorAs(t, err, &tooLarge, img.Path)
			got = "error"
		case len(ds.LargeImages()) > 0 && ds.LargeImages()[len(ds.LargeImages())-1] == img.Path:
			got = "warning"
		}
		assert.Equal(t, pil[img.Path], got, img.Path)
	}
	assert.Len(t, ds.LargeImages(), 2, "12x10 and 20x10 are above 100 pixels, within 200")
}

// TestSkipCorruptSkipsEveryFailure: with SkipCorrupt, header bombs, a valid oversized
// image, corrupt files, a FIFO and /dev/zero behind an image name are all skipped for
// the next good image; without it each is an error naming the file.
func TestSkipCorruptSkipsEveryFailure(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "class")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	bad := bombs(t)
	for name, b := range corruptImages() {
		bad[name] = b
	}
	for name, b := range bad {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	testsupport.FIFO(t, dir, "fifo.png")
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(dir, "zero.png")))
	want := writeGoodPNG(t, filepath.Join(dir, "zzz-good.png")) // sorts last

	ds, err := NewImageFolder(root, ImageFolderOptions{SkipCorrupt: true, Extensions: append([]string{".gif"}, ImageExtensions...)})
	require.NoError(t, err)
	require.Equal(t, len(bad)+3, ds.Len())
	var alloc uint64
	finishes(t, "SkipCorrupt over every bad file", func() {
		alloc = testsupport.AllocatedBy(func() {
			for i := range ds.Len() {
				var s Sample
				if assert.NoError(t, ds.Get(i, &s)) {
					assert.Equal(t, want, s.Field(Input).Data, "image %d is replaced by the good one", i)
				}
			}
		})
	})
	assert.Less(t, alloc, uint64(64<<20))
	paths, _ := ds.Corrupt()
	assert.Len(t, paths, ds.Len()-1, "every file but the good one is counted")

	strict, err := NewImageFolder(root, ImageFolderOptions{Extensions: ds.Options.Extensions})
	require.NoError(t, err)
	for i, img := range strict.Images[:strict.Len()-1] {
		var s Sample
		var err error
		finishes(t, img.Path, func() { err = strict.Get(i, &s) })
		require.Error(t, err, img.Path)
		assert.Contains(t, err.Error(), img.Path)
		switch filepath.Base(img.Path) {
		case "fifo.png":
			assert.Contains(t, err.Error(), "is a named pipe (FIFO), not a regular file")
		case "zero.png":
			assert.Contains(t, err.Error(), "is a character device, not a regular file")
		case "pgm-truncated.pgm":
			assert.Contains(t, err.Error(), "truncated PNM data: 1000x1000 pixels need 1000000 bytes, the file has 3")
		case "pgm-field-overflows.pgm":
			assert.Contains(t, err.Error(), `bad PNM header field "99999999999999999999"`)
		}
	}
}

func TestImageFolderLayoutErrors(t *testing.T) {
	t.Run("flat folder of images", func(t *testing.T) {
		root := t.TempDir()
		writeGoodPNG(t, filepath.Join(root, "a.png"))
		writeGoodPNG(t, filepath.Join(root, "b.png"))
		_, err := NewImageFolder(root, ImageFolderOptions{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), root+" holds 2 images but no class folders; ImageFolder expects one folder per class, root/<class>/<image>")
	})
	t.Run("class folder name not UTF-8", func(t *testing.T) {
		root := t.TempDir()
		for _, class := range []string{"cat", "caf\xe9"} {
			require.NoError(t, os.MkdirAll(filepath.Join(root, class), 0o755))
			writeGoodPNG(t, filepath.Join(root, class, "1.png"))
		}
		_, err := NewImageFolder(root, ImageFolderOptions{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), `class folder "caf\xe9" in `+root+": the name is not valid UTF-8")
	})
	t.Run("root is a file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "a.png")
		writeGoodPNG(t, p)
		_, err := NewImageFolder(p, ImageFolderOptions{})
		assert.ErrorContains(t, err, p+" is a regular file; ImageFolder reads a directory of class folders")
	})
	t.Run("root is a FIFO", func(t *testing.T) {
		p := testsupport.FIFO(t, t.TempDir(), "fifo")
		var err error
		finishes(t, "FIFO root", func() { _, err = NewImageFolder(p, ImageFolderOptions{}) })
		assert.ErrorContains(t, err, p+" is a named pipe (FIFO)")
	})
}

const pyConvert16 = `
import json, sys
import numpy as np
from PIL import Image
out = {}
for p in sys.argv[1:]:
    im = Image.open(p)
    out[p] = {"mode": im.mode, "rgb": np.asarray(im.convert("RGB")).transpose(2, 0, 1).flatten().tolist(),
              "l": np.asarray(im.convert("L")).flatten().tolist()}
print(json.dumps(out))
`

// TestSixteenBitAlphaMatchesPIL: 16-bit PNGs with alpha (RGBA, gray + alpha) or a tRNS
// colour convert to RGB and L exactly as PIL's convert does: each sample's high byte,
// and transparent pixels keep their colours.
func TestSixteenBitAlphaMatchesPIL(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "c")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	samples := []uint16{0x1234, 0, 0xabcd, 0x8000, 0xff80, 0xffff, 0x00ff, 1, 0x7fff, 0x0100, 0xfe01, 0x01fe}
	be := func(vs ...uint16) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.BigEndian.AppendUint16(b, v)
		}
		return b
	}
	rows := func(bpp, w, h int) []byte { // filter byte 0, then samples cycled
		var raw []byte
		k := 0
		for range h {
			raw = append(raw, 0)
			for range w * bpp {
				raw = append(raw, be(samples[k%len(samples)]+uint16(37*k))...)
				k++
			}
		}
		return raw
	}
	files := map[string][]byte{
		"rgba16.png": pngFile(3, 2, 16, 6, zlibBytes(rows(4, 3, 2))),
		"la16.png":   pngFile(3, 2, 16, 4, zlibBytes(rows(2, 3, 2))),
		"rgb16-trns.png": pngFile(3, 2, 16, 2, zlibBytes(rows(3, 3, 2)),
			pngChunk("tRNS", be(samples[0], samples[1]+37, samples[2]+74))),
		"rgb16.png": pngFile(3, 2, 16, 2, zlibBytes(rows(3, 3, 2))),
		"rgba8.png": pngFile(3, 2, 8, 6, zlibBytes([]byte{0, 10, 20, 30, 0, 40, 50, 60, 128, 70, 80, 90, 255,
			0, 1, 2, 3, 0, 250, 251, 252, 1, 9, 8, 7, 0})),
	}
	var paths []string
	for name, b := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		paths = append(paths, p)
	}
	var pil map[string]struct {
		Mode string
		RGB  []int
		L    []int
	}
	require.NoError(t, json.Unmarshal(testpy.Run(t, pyConvert16, []string{"PIL", "numpy"}, paths...), &pil))
	for _, mode := range []ColorMode{RGB, Gray} {
		ds, err := NewImageFolder(root, ImageFolderOptions{Mode: mode})
		require.NoError(t, err)
		for i, img := range ds.Images {
			var s Sample
			require.NoError(t, ds.Get(i, &s))
			want := pil[img.Path].RGB
			if mode == Gray {
				want = pil[img.Path].L
			}
			got := make([]int, len(s.Field(Input).Data))
			for k, v := range s.Field(Input).Data {
				got[k] = int(v)
			}
			assert.Equal(t, want, got, "%s (PIL mode %s), mode %v", filepath.Base(img.Path), pil[img.Path].Mode, mode)
		}
	}
}

// TestPNMSizeArithmetic: PNM headers are parsed into int64 and multiplied without
// overflow; a file that holds its samples decodes.
func TestPNMSizeArithmetic(t *testing.T) {
	for _, c := range []struct {
		name, header string
		want         string
	}{
		{"2^32 x 2^32", "P5\n4294967296 4294967296\n255\n", "image size (4294967296x4294967296 = 9223372036854775807 pixels) exceeds"},
		{"2^62 x 4", "P6 4611686018427387904 4 255\n", "exceeds the limit"},
		{"max int64 width", "P5 9223372036854775807 9223372036854775807 255 ", "exceeds the limit"},
		{"negative", "P5 -4 4 255\n", "bad PNM header field"},
		{"no maxval", "P5 4 4", "truncated PNM header"},
		{"comment", "P5\n# a comment 99999999999999999999999\n2 1\n255\n\x07\x09", ""},
		{"maxval 15", "P5 2 1 15\n\x0f\x07", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := []byte(c.header)
			var got []byte
			_, err := decodePlanar(raw, Gray, newPixelLimit(0), func(ch, h, w int) []byte {
				got = make([]byte, ch*h*w)
				return got
			})
			if c.want == "" {
				require.NoError(t, err)
				assert.Equal(t, map[string][]byte{"comment": {7, 9}, "maxval 15": {255, 119}}[c.name], got)
				return
			}
			assert.ErrorContains(t, err, c.want)
		})
	}
}

// writeCols writes a CSV of n feature columns and a label column, rows rows.
func writeCols(t *testing.T, path string, n, rows int) {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "c%d,", i)
	}
	b.WriteString("label\n")
	for r := range rows {
		for i := range n {
			b.WriteString(strconv.Itoa((i + r) % 10))
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d\n", r)
	}
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

func TestCSVInputs(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content string
		opts          CSVOptions
		want          string // an error's text after the path, or "" for a correct run
		check         func(t *testing.T, d *CSVDataset)
	}{
		{name: "duplicate columns", content: "a,a,label\n1,2,0\n", opts: CSVOptions{Label: "label"},
			want: `:1: column name "a" appears twice (columns 1 and 2)`},
		{name: "BOM before the label column", content: "\ufefflabel,x\n1,2.5\n0,3\n", opts: CSVOptions{Label: "label"},
			check: func(t *testing.T, d *CSVDataset) {
				assert.Equal(t, []string{"x"}, d.Features)
				assert.Equal(t, 2, d.NumClasses())
			}},
		{name: "header only", content: "x,label\n", opts: CSVOptions{Label: "label"},
			want: ": the header line is followed by no data rows; the dataset is empty"},
		{name: "empty", content: "", opts: CSVOptions{Label: "label"}, want: ": empty file"},
		{name: "label 2^40", content: "x,label\n1,0\n2,1099511627776\n", opts: CSVOptions{Label: "label"},
			want: `:3:3: column "label": integer label 1099511627776 is outside [0, 1048576)`},
		{name: "negative label", content: "x,label\n1,0\n2,-1\n", opts: CSVOptions{Label: "label"},
			want: `:3:3: column "label": integer label -1 is outside`},
		{name: "too many named classes", content: "x,label\n1,a\n1,b\n1,c\n1,d\n", opts: CSVOptions{Label: "label", MaxClasses: 3},
			want: `:5:3: column "label": label "d" is the 4-th distinct label, more than the 3 classes allowed`},
		{name: "integer labels", content: "x,label\n1,3\n2,0\n", opts: CSVOptions{Label: "label"},
			check: func(t *testing.T, d *CSVDataset) { assert.Equal(t, 4, d.NumClasses()) }},
		{name: "not a number", content: "x,label\n1,0\nfoo,1\n", opts: CSVOptions{Label: "label"},
			want: `:3:1: column "x": "foo" is not a number`},
		{name: "missing column", content: "x,y\n1,0\n", opts: CSVOptions{Label: "label"},
			want: `: no column "label" in the header (columns: x, y)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, dir, strings.ReplaceAll(c.name, " ", "-")+".csv", []byte(c.content))
			d, err := ReadCSV(p, c.opts)
			if c.want != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), p+c.want)
				return
			}
			require.NoError(t, err)
			c.check(t, d)
		})
	}

	t.Run("a million columns", func(t *testing.T) {
		p := filepath.Join(dir, "wide.csv")
		const n = 1_000_000
		writeCols(t, p, n, 3)
		var d *CSVDataset
		var err error
		alloc := testsupport.AllocatedBy(func() { d, err = ReadCSV(p, CSVOptions{Label: "label"}) })
		require.NoError(t, err)
		require.Equal(t, 3, d.Len())
		require.Len(t, d.Features, n)
		var s Sample
		require.NoError(t, d.Get(2, &s))
		in := Values[float32](s.Field(Input))
		assert.Equal(t, []float32{2, 3, 4}, in[:3])
		assert.Equal(t, float32((n-1+2)%10), in[n-1])
		assert.Equal(t, int64(2), Scalar[int64](&s, Label))
		assert.Less(t, alloc, uint64(512<<20), "linear in the header's size")
	})
}

// TestSpecialFilesAsData: a FIFO, /dev/zero and a directory given to each reader of
// files are refused at once, naming the path and what it is.
func TestSpecialFilesAsData(t *testing.T) {
	dir := t.TempDir()
	fifo := testsupport.FIFO(t, dir, "fifo")
	readers := map[string]func(p string) error{
		"ReadCSV":     func(p string) error { _, err := ReadCSV(p, CSVOptions{Label: "label"}); return err },
		"ReadIDX":     func(p string) error { _, err := ReadIDX(p); return err },
		"OpenTokens":  func(p string) error { _, err := OpenTokens(p, 8, TokenOptions{}); return err },
		"OpenText":    func(p string) error { _, err := OpenText(p, 8); return err },
		"OpenRegular": func(p string) error { _, _, err := OpenRegular(p); return err },
	}
	for _, c := range []struct{ path, what string }{
		{fifo, "a named pipe (FIFO)"}, {"/dev/zero", "a character device"}, {dir, "a directory"},
	} {
		for name, read := range readers {
			t.Run(name+" "+c.path, func(t *testing.T) {
				var err error
				alloc := uint64(0)
				finishes(t, name+" "+c.path, func() { alloc = testsupport.AllocatedBy(func() { err = read(c.path) }) })
				var nr *NotRegularError
				require.ErrorAs(t, err, &nr)
				assert.Contains(t, err.Error(), c.path+" is "+c.what+", not a regular file")
				assert.Less(t, alloc, uint64(1<<20))
			})
		}
	}
	t.Run("meta.pkl FIFO", func(t *testing.T) {
		d := t.TempDir()
		testsupport.FIFO(t, d, "meta.pkl")
		var err error
		finishes(t, "meta.pkl FIFO", func() { _, _, err = NanoGPTVocabSize(d) })
		assert.ErrorContains(t, err, "meta.pkl is not a regular file")
	})
}

func TestIDXSizes(t *testing.T) {
	dir := t.TempDir()
	t.Run("gzip bomb: 2.7 MB declaring 2.8 GB", func(t *testing.T) {
		// The IDX header declares 2700 x 1024 x 1024 bytes and the stream holds them all
		// (zeros): deflate's ratio of about 1000:1.
		const chunk = 1 << 20
		header := idxBytes([]int{2700, 1024, 1024}, nil)
		first := append(header, make([]byte, chunk)...)
		stream := repeatedDeflate(t, first, make([]byte, chunk), 2699)
		crc := crc32.Update(0, crc32.IEEETable, first)
		zero := make([]byte, chunk)
		for range 2699 {
			crc = crc32.Update(crc, crc32.IEEETable, zero)
		}
		gz := append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, stream...)
		gz = binary.LittleEndian.AppendUint32(gz, crc)
		gz = binary.LittleEndian.AppendUint32(gz, uint32(len(header)+2700*chunk))
		t.Logf("gzip IDX of %d bytes inflating to %d", len(gz), len(header)+2700*chunk)
		p := writeFile(t, dir, "bomb-idx3-ubyte.gz", gz)
		var err error
		alloc := testsupport.AllocatedBy(func() { _, err = ReadIDX(p) })
		require.Error(t, err)
		assert.Contains(t, err.Error(), p+": dimensions [2700 1024 1024] declare 2831155200 bytes, more than 256 times (MaxIDXInflation)")
		assert.Less(t, alloc, uint64(2<<20), "refused from the header, before inflating")
	})
	t.Run("gzip stream shorter than its header says", func(t *testing.T) {
		raw := make([]byte, 100_000)
		for i := range raw {
			raw[i] = byte(i*i>>3 + i>>7)
		}
		gz := gzipBytes(t, idxBytes([]int{10, 100, 100}, raw))
		p := writeFile(t, dir, "short-idx3-ubyte.gz", gz[:len(gz)/2])
		_, err := ReadIDX(p)
		assert.ErrorContains(t, err, p+": truncated: dimensions [10 100 100] need 100000 data bytes, file has")
	})
	t.Run("raw header declaring 2^34 bytes", func(t *testing.T) {
		p := writeFile(t, dir, "huge-idx3-ubyte", idxBytes([]int{1 << 14, 1 << 10, 1 << 10}, make([]byte, 16)))
		var err error
		alloc := testsupport.AllocatedBy(func() { _, err = ReadIDX(p) })
		assert.ErrorContains(t, err, p+": truncated: dimensions [16384 1024 1024] need 17179869184 data bytes, file has 16")
		assert.Less(t, alloc, uint64(1<<20))
	})
	t.Run("raw header whose product overflows", func(t *testing.T) {
		d := math.MaxUint32
		p := writeFile(t, dir, "overflow-idx3-ubyte", idxBytes([]int{d, d, d}, make([]byte, 4)))
		_, err := ReadIDX(p)
		assert.ErrorContains(t, err, p+": truncated: dimensions [4294967295 4294967295 4294967295] need 9223372036854775807 data bytes")
	})
}

// lenOnly is a dataset that has a length and no samples.
type lenOnly int

func (n lenOnly) Len() int                 { return int(n) }
func (lenOnly) Get(i int, s *Sample) error { return errors.New("no samples") }

// TestSizesBeyondMemory: lengths and sizes that would need more memory than the machine
// has, or overflow, are errors before anything is allocated; a batch size beyond the
// dataset is one batch.
func TestSizesBeyondMemory(t *testing.T) {
	const huge = 1 << 40
	cases := map[string]func() error{
		"Synthetic 2^40": func() error { _, err := Synthetic(huge, 10, []int64{1, 28, 28}, 0); return err },
		"Synthetic shape overflow": func() error {
			_, err := Synthetic(10, 10, []int64{1 << 40, 1 << 40}, 0)
			return err
		},
		"RandomSplit 2^40":          func() error { _, err := RandomSplit(lenOnly(huge), []int{huge - 5, 5}, 0); return err },
		"RandomSplit sum overflows": func() error { _, err := RandomSplit(lenOnly(10), []int{math.MaxInt, 11}, 0); return err },
		"DistributedSampler 2^40":   func() error { _, err := NewDistributedSampler(huge, 0, 1, true, 0, false); return err },
		"NewLoader 2^40 samples":    func() error { _, err := NewLoader(lenOnly(huge), LoaderOptions{}); return err },
		"NewLoader 2^40 workers":    func() error { _, err := NewLoader(lenOnly(10), LoaderOptions{Workers: huge}); return err },
		"Resize to 100000x100000": func() error {
			s := new(Sample)
			s.Set(Input, torch.Uint8, []int64{3, 4, 4})
			return Resize{Height: 100000, Width: 100000}.Apply(s, nil)
		},
		"OpenTokens block size MaxInt": func() error {
			p := writeFile(t, t.TempDir(), "train.bin", make([]byte, 1000))
			_, err := OpenTokens(p, math.MaxInt, TokenOptions{})
			return err
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			alloc := testsupport.AllocatedBy(func() { err = f() })
			require.Error(t, err)
			t.Log(err)
			assert.Less(t, alloc, uint64(1<<20))
		})
	}
	t.Run("batch size MaxInt", func(t *testing.T) {
		ds, err := NewTensorDataset([]float32{1, 2, 3, 4, 5, 6}, []int64{2}, []int64{0, 1, 2}, nil, nil)
		require.NoError(t, err)
		l, err := NewLoader(ds, LoaderOptions{BatchSize: math.MaxInt, Inline: true})
		require.NoError(t, err)
		assert.Equal(t, 1, l.Len(), "one batch of every sample")
	})
}

// residentBytes is the process's resident set (VmRSS).
func residentBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// TestTokenFileCosts: a sparse 4 GiB train.bin opens without reading it, its windows
// read only their pages, and the vocabulary scan (MaxID) skips its holes; a dense file
// is scanned through one reused buffer. The resident set grows by megabytes, not by
// the file.
func TestTokenFileCosts(t *testing.T) {
	const size = 4 << 30
	p := filepath.Join(t.TempDir(), "train.bin")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	_, err = f.WriteAt([]byte{0xd2, 0x04}, size/3&^1) // id 1234
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{7, 0}, size-2)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	before := residentBytes(t)
	d, err := OpenTokens(p, 1024, TokenOptions{VocabSize: 1000})
	require.NoError(t, err)
	var s Sample
	for _, i := range []int{0, d.Len() / 2, d.Len() - 1} {
		require.NoError(t, d.Get(i, &s))
	}
	id, err := d.MaxID()
	require.NoError(t, err)
	assert.Equal(t, int64(1234), id)
	grown := residentBytes(t) - before
	t.Logf("sparse %d-byte token file: resident set grew by %d bytes", size, grown)
	assert.Less(t, grown, int64(64<<20*raceOverhead))

	// Id 1234 lies in window k/1024; with a vocabulary of 1000 it is an error.
	k := size / 3 / 2
	err = d.Get(k/1024, &s)
	assert.ErrorContains(t, err, fmt.Sprintf("%s: token %d (byte offset %d) is id 1234, outside the vocabulary of 1000", p, k, 2*k))
	runtime.KeepAlive(d)

	// A dense file of random uint32 ids, scanned through the buffer.
	dense := filepath.Join(t.TempDir(), "dense.bin")
	ids := make([]byte, 64<<20)
	for i := 0; i < len(ids); i += 4 {
		binary.LittleEndian.PutUint32(ids[i:], uint32(i*2654435761)%3_000_000)
	}
	binary.LittleEndian.PutUint32(ids[len(ids)/2:], 3_000_000)
	require.NoError(t, os.WriteFile(dense, ids, 0o644))
	ids = nil
	debug.FreeOSMemory()
	before = residentBytes(t)
	dd, err := OpenTokens(dense, 1024, TokenOptions{Width: 4})
	require.NoError(t, err)
	id, err = dd.MaxID()
	require.NoError(t, err)
	assert.Equal(t, int64(3_000_000), id)
	grown = residentBytes(t) - before
	t.Logf("dense 64 MiB token file: resident set grew by %d bytes", grown)
	assert.Less(t, grown, int64(16<<20*raceOverhead))
}

// TestTokensWithoutMmap: where a token file cannot be mapped (an address-space limit),
// its windows are read through pread, and are the mapped file's windows.
func TestTokensWithoutMmap(t *testing.T) {
	p := filepath.Join(t.TempDir(), "train.bin")
	ids := make([]byte, 2*5000)
	want := 0
	for i := range 5000 {
		binary.LittleEndian.PutUint16(ids[2*i:], uint16(i*7919%50257))
		want = max(want, i*7919%50257)
	}
	require.NoError(t, os.WriteFile(p, ids, 0o644))
	mapped, err := OpenTokens(p, 64, TokenOptions{Stride: 3})
	require.NoError(t, err)
	require.NotNil(t, mapped.data)
	noMmap = true
	read, err := OpenTokens(p, 64, TokenOptions{Stride: 3})
	noMmap = false
	require.NoError(t, err)
	require.Nil(t, read.data)
	require.Equal(t, mapped.Len(), read.Len())
	for _, i := range []int{0, 1, 777, mapped.Len() - 1} {
		var a, b Sample
		require.NoError(t, mapped.Get(i, &a))
		require.NoError(t, read.Get(i, &b))
		assert.Equal(t, Values[int64](a.Field(LMInputIDs)), Values[int64](b.Field(LMInputIDs)))
		assert.Equal(t, Values[int64](a.Field(LMLabels)), Values[int64](b.Field(LMLabels)))
	}
	assert.Equal(t, mapped.Token(4999), read.Token(4999))
	m, err := read.MaxID()
	require.NoError(t, err)
	assert.Equal(t, int64(want), m)
}

const pyMeta = `
import pickle, sys
text = "First Citizen:\nBefore we proceed any further, hear me speak."
chars = sorted(set(text))
meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
with open(sys.argv[1], "wb") as f:
    pickle.dump(meta, f)  # nanoGPT's data/shakespeare_char/prepare.py
print(len(chars))
`

func TestNanoGPTVocabSize(t *testing.T) {
	dir := t.TempDir()
	n, ok, err := NanoGPTVocabSize(dir)
	require.NoError(t, err)
	assert.False(t, ok, "no meta.pkl")
	assert.Zero(t, n)

	want, err := strconv.Atoi(strings.TrimSpace(string(testpy.Run(t, pyMeta, nil, filepath.Join(dir, "meta.pkl")))))
	require.NoError(t, err)
	n, ok, err = NanoGPTVocabSize(dir)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, want, n)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "meta.pkl"), []byte("\x80\x04}q\x00X\x0a\x00\x00\x00vocab_sizeq\x01J\x00\x00\x00\x80s."), 0o644))
	_, _, err = NanoGPTVocabSize(dir)
	assert.ErrorContains(t, err, "vocab_size -2147483648 is not in [1, 2^32]")
}
