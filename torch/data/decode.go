package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // GIF, BMP, TIFF and WebP register with image.Decode
	"image/jpeg"
	"image/png"
	"strconv"

	"github.com/gotrain/gotrain/torch/data/internal/libjpeg"
	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/tiff"
	_ "golang.org/x/image/webp"
)

// useLibjpeg routes JPEGs of 8-bit gray or color samples to libjpeg-turbo (Pillow's
// decoder, so the pixels are PIL's) when it is linked; the others (CMYK, 12-bit), and
// all under build tag nolibjpeg, go to Go's decoder. Tests switch it off to check Go's.
var useLibjpeg = libjpeg.Available

// decodePlanar decodes an image file's bytes into planar [C, H, W] bytes in mode,
// converted as PIL's convert does, written to dst(C, H, W). The size the file's header
// declares is checked against limit before any pixel buffer is allocated (a header can
// claim any size; Go cannot recover from an allocation that fails); large reports an
// image above the warning threshold that was decoded anyway, as PIL warns.
func decodePlanar(raw []byte, mode ColorMode, limit pixelLimit, dst func(c, h, w int) []byte) (large bool, err error) {
	w, h, err := imageSize(raw)
	if err != nil {
		return false, err
	}
	if large, err = limit.check(w, h); err != nil {
		return false, err
	}
	// The decoders are Go's and golang.org/x/image's: a panic on a malformed file would
	// be their bug, but it must not end a run that SkipCorrupt would carry past it.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("image decoder failed: %v", p)
		}
	}()
	if err := boundTIFFBlocks(raw, w, h, limit); err != nil {
		return false, err
	}
	c := 3
	if mode == Gray {
		c = 1
	}
	if useLibjpeg && bytes.HasPrefix(raw, []byte{0xff, 0xd8}) {
		if hdr, err := libjpeg.ReadHeader(raw); err == nil && hdr.Supported() {
			return large, libjpeg.Decode(raw, hdr, c, dst(c, hdr.Height, hdr.Width))
		}
	}
	img, err := decodeImage(raw)
	if err != nil {
		return false, err
	}
	b := img.Bounds()
	if int64(b.Dx()) != w || int64(b.Dy()) != h {
		return false, fmt.Errorf("image decodes to %dx%d pixels but its header declares %dx%d", b.Dx(), b.Dy(), w, h)
	}
	return large, toPlanar(img, mode, dst(c, b.Dy(), b.Dx()))
}

// errNotImage is a file in none of the formats gotrain decodes.
var errNotImage = errors.New("not an image in a format gotrain decodes (PNG, JPEG, GIF, BMP, TIFF, WebP, binary PPM/PGM)")

// imageSize returns the width and height an image file's header declares, reading
// nothing but the header: image.DecodeConfig for the registered formats (PNG, JPEG,
// GIF, BMP, TIFF, WebP), pnmHeader for PPM/PGM.
func imageSize(raw []byte) (w, h int64, err error) {
	if isPNM(raw) {
		hd, err := pnmHeader(raw)
		if err != nil {
			return 0, 0, err
		}
		return hd.w, hd.h, nil
	}
	if bytes.HasPrefix(raw, []byte{0xff, 0xd8}) {
		// The frame header libjpeg reads; Go's DecodeConfig would stop at a marker that
		// libjpeg skips.
		if hdr, err := libjpeg.ReadHeader(raw); err == nil {
			return int64(hdr.Width), int64(hdr.Height), nil
		}
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if errors.Is(err, image.ErrFormat) {
		return 0, 0, errNotImage
	}
	if err != nil {
		return 0, 0, err
	}
	return int64(cfg.Width), int64(cfg.Height), nil
}

// decodeImage decodes an image file's bytes, whatever its format. Callers check the
// header's size first (imageSize).
func decodeImage(raw []byte) (image.Image, error) {
	r := bytes.NewReader(raw)
	switch {
	case bytes.HasPrefix(raw, []byte("\x89PNG\r\n\x1a\n")):
		return png.Decode(r)
	case bytes.HasPrefix(raw, []byte{0xff, 0xd8}):
		return jpeg.Decode(r)
	case isPNM(raw):
		return decodePNM(raw)
	}
	img, _, err := image.Decode(r)
	if errors.Is(err, image.ErrFormat) {
		return nil, errNotImage
	}
	return img, err
}

// boundTIFFBlocks bounds what a TIFF's strips or tiles make its decoder hold: it reads
// a compressed strip or tile into a buffer of up to 8 bytes per pixel of the block,
// whose size the header states. A RowsPerStrip above the image's height (2^32-1 is
// TIFF's default, and common) is clamped to the height in raw, our copy of the file,
// as libtiff reads it; otherwise a small LZW or deflate strip could inflate to
// thousands of times its size. Tiles of more pixels than an image may have are
// refused.
func boundTIFFBlocks(raw []byte, w, h int64, limit pixelLimit) error {
	var bo binary.ByteOrder
	switch {
	case bytes.HasPrefix(raw, []byte("II*\x00")):
		bo = binary.LittleEndian
	case bytes.HasPrefix(raw, []byte("MM\x00*")):
		bo = binary.BigEndian
	default:
		return nil
	}
	if len(raw) < 8 {
		return nil
	}
	ifd := int64(bo.Uint32(raw[4:]))
	if ifd+2 > int64(len(raw)) {
		return nil // the decoder reports it
	}
	n := int64(bo.Uint16(raw[ifd:]))
	var tileW, tileH int64
	for k := range n {
		e := ifd + 2 + 12*k
		if e+12 > int64(len(raw)) {
			break
		}
		tag, typ, count := bo.Uint16(raw[e:]), bo.Uint16(raw[e+2:]), bo.Uint32(raw[e+4:])
		if count != 1 || (typ != 3 && typ != 4) {
			continue
		}
		v := int64(bo.Uint32(raw[e+8:]))
		if typ == 3 {
			v = int64(bo.Uint16(raw[e+8:]))
		}
		switch tag {
		case 278: // RowsPerStrip
			if v > h && typ == 4 {
				bo.PutUint32(raw[e+8:], uint32(h))
			} else if v > h {
				bo.PutUint16(raw[e+8:], uint16(h))
			}
		case 322: // TileWidth
			tileW = v
		case 323: // TileLength
			tileH = v
		}
	}
	if px := satMul(tileW, tileH); px > 2*limit.warn {
		return fmt.Errorf("TIFF tiles of %dx%d pixels (for an image of %dx%d) exceed the limit of %d pixels", tileW, tileH, w, h, 2*limit.warn)
	}
	return nil
}

func isPNM(raw []byte) bool { return len(raw) > 2 && raw[0] == 'P' && (raw[1] == '5' || raw[1] == '6') }

// pnm is a binary PGM (P5) or PPM (P6) header.
type pnm struct {
	w, h, maxval int64
	ch           int64 // 1 (P5) or 3 (P6)
	data         int   // offset of the samples in the file
}

// maxPNMToken bounds a header token: the largest field, 2^63, has 19 digits.
const maxPNMToken = 20

// pnmHeader parses a P5/P6 header: magic, width, height and maxval as decimal tokens
// separated by whitespace and # comments, then one whitespace byte. Sizes are int64 and
// the sample count is computed without overflow, so that a header claiming 2^32 x 2^32
// pixels is an error, not a wrapped product.
func pnmHeader(raw []byte) (pnm, error) {
	hd := pnm{ch: 1}
	if raw[1] == '6' {
		hd.ch = 3
	}
	p := 2
	var nums [3]int64
	for k := range nums {
		// Skip whitespace and comments before the token.
		for p < len(raw) {
			if c := raw[p]; c == '#' {
				for p < len(raw) && raw[p] != '\n' && raw[p] != '\r' {
					p++
				}
			} else if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
				p++
			} else {
				break
			}
		}
		start := p
		for p < len(raw) && p-start <= maxPNMToken && raw[p] >= '0' && raw[p] <= '9' {
			p++
		}
		tok := raw[start:p]
		switch {
		case p >= len(raw):
			return hd, errors.New("truncated PNM header")
		case len(tok) == 0 || len(tok) > maxPNMToken:
			return hd, fmt.Errorf("bad PNM header field %q", trimToken(raw[start:]))
		}
		v, err := strconv.ParseInt(string(tok), 10, 64)
		if err != nil || v <= 0 {
			return hd, fmt.Errorf("bad PNM header field %q", tok)
		}
		nums[k] = v
	}
	if c := raw[p]; c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\v' && c != '\f' {
		return hd, fmt.Errorf("bad PNM header: %q after maxval", c)
	}
	hd.w, hd.h, hd.maxval, hd.data = nums[0], nums[1], nums[2], p+1
	if hd.maxval > 255 {
		return hd, fmt.Errorf("PNM with maxval %d: only 8-bit samples are supported", hd.maxval)
	}
	return hd, nil
}

func trimToken(b []byte) []byte { return b[:min(len(b), maxPNMToken+1)] }

// decodePNM decodes binary PGM (P5) and PPM (P6) files of 8-bit samples. The file must
// hold every sample the header declares before anything is allocated.
func decodePNM(raw []byte) (image.Image, error) {
	hd, err := pnmHeader(raw)
	if err != nil {
		return nil, err
	}
	n := satMul(satMul(hd.w, hd.h), hd.ch)
	if have := int64(len(raw) - hd.data); have < n {
		return nil, fmt.Errorf("truncated PNM data: %dx%d pixels need %d bytes, the file has %d", hd.w, hd.h, n, have)
	}
	w, h := int(hd.w), int(hd.h)
	px := raw[hd.data : hd.data+int(n)]
	maxval := int(hd.maxval)
	scale := func(v byte) byte { return byte((int(v)*255 + maxval/2) / maxval) }
	if hd.ch == 1 {
		img := image.NewGray(image.Rect(0, 0, w, h))
		copy(img.Pix, px)
		if maxval != 255 {
			for i, v := range img.Pix {
				img.Pix[i] = scale(v)
			}
		}
		return img, nil
	}
	rgba := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range w * h {
		r, g, b := px[3*i], px[3*i+1], px[3*i+2]
		if maxval != 255 {
			r, g, b = scale(r), scale(g), scale(b)
		}
		rgba.Pix[4*i], rgba.Pix[4*i+1], rgba.Pix[4*i+2], rgba.Pix[4*i+3] = r, g, b, 255
	}
	return rgba, nil
}

// luma is PIL's RGB to L conversion (ITU-R 601-2, fixed point).
func luma(r, g, b uint8) uint8 {
	return uint8((uint32(r)*19595 + uint32(g)*38470 + uint32(b)*7471 + 0x8000) >> 16)
}

// toPlanar writes img as planar [C, H, W] bytes in mode into dst (len C*H*W), converting
// as PIL's convert does.
func toPlanar(img image.Image, mode ColorMode, dst []byte) error {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	n := w * h
	put := func(i int, r, g, bl uint8) {
		if mode == Gray {
			dst[i] = luma(r, g, bl)
			return
		}
		dst[i], dst[n+i], dst[2*n+i] = r, g, bl
	}
	switch m := img.(type) {
	case *image.Gray:
		for y := range h {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			copy(dst[y*w:], row)
			if mode == RGB {
				copy(dst[n+y*w:], row)
				copy(dst[2*n+y*w:], row)
			}
		}
	case *image.YCbCr:
		ycbcrToPlanar(m, mode, dst)
	case *image.NRGBA:
		for y := range h {
			row := m.Pix[y*m.Stride:]
			for x := range w {
				put(y*w+x, row[4*x], row[4*x+1], row[4*x+2])
			}
		}
	case *image.RGBA:
		// Go's PNG decoder gives opaque truecolor images as RGBA; an RGBA with
		// transparency comes from other decoders and is premultiplied: undo that as PIL
		// (which keeps straight alpha) would hold it.
		for y := range h {
			row := m.Pix[y*m.Stride:]
			for x := range w {
				r, g, bl, a := row[4*x], row[4*x+1], row[4*x+2], row[4*x+3]
				if a != 255 && a != 0 {
					r, g, bl = unpremul(r, a), unpremul(g, a), unpremul(bl, a)
				}
				put(y*w+x, r, g, bl)
			}
		}
	case *image.Paletted:
		pal := make([][3]uint8, len(m.Palette))
		for k, c := range m.Palette {
			nc := color.NRGBAModel.Convert(c).(color.NRGBA)
			pal[k] = [3]uint8{nc.R, nc.G, nc.B}
		}
		for y := range h {
			row := m.Pix[y*m.Stride:]
			for x := range w {
				var c [3]uint8
				if int(row[x]) < len(pal) {
					c = pal[row[x]]
				}
				put(y*w+x, c[0], c[1], c[2])
			}
		}
	case *image.NRGBA64:
		// 16-bit PNGs with alpha (RGBA, gray + alpha) or a tRNS colour: PIL reads them as
		// 8-bit RGBA holding each sample's high byte (rawmode RGBA;16B), and convert
		// drops alpha, so a transparent pixel keeps its colour. Go's color models would
		// premultiply and turn it black.
		for y := range h {
			row := m.Pix[y*m.Stride:]
			for x := range w {
				put(y*w+x, row[8*x], row[8*x+2], row[8*x+4])
			}
		}
	case *image.RGBA64:
		// Opaque 16-bit truecolor (PNG, TIFF): PIL keeps the high byte (RGB;16B). A
		// translucent pixel can only come from a premultiplying decoder: undo it first.
		for y := range h {
			row := m.Pix[y*m.Stride:]
			for x := range w {
				p := row[8*x:]
				a := uint32(p[6])<<8 | uint32(p[7])
				ch := func(k int) uint8 {
					v := uint32(p[2*k])<<8 | uint32(p[2*k+1])
					if a != 0xffff && a != 0 {
						v = min((v*0xffff+a/2)/a, 0xffff)
					}
					return uint8(v >> 8)
				}
				put(y*w+x, ch(0), ch(1), ch(2))
			}
		}
	case *image.Gray16:
		// PIL reads 16-bit grayscale PNGs as mode I;16 and clips to 255 in convert("L");
		// the high byte keeps the image's contrast instead, as its RGB path does.
		for y := range h {
			for x := range w {
				v := m.Pix[y*m.Stride+2*x]
				put(y*w+x, v, v, v)
			}
		}
	default:
		for y := range h {
			for x := range w {
				c := color.NRGBAModel.Convert(img.At(x+b.Min.X, y+b.Min.Y)).(color.NRGBA)
				put(y*w+x, c.R, c.G, c.B)
			}
		}
	}
	return nil
}

func unpremul(v, a uint8) uint8 { return uint8((uint32(v)*255 + uint32(a)/2) / uint32(a)) }

// jpegRGB is libjpeg's YCbCr to RGB conversion (jdcolor.c: 16-bit fixed point, rounded,
// clamped), which PIL's decoder uses; Go's color.YCbCrToRGB rounds differently. The
// per-chroma terms come from tables, as in libjpeg.
func jpegRGB(y, cb, cr uint8) (uint8, uint8, uint8) {
	yy := int32(y)
	return clamp8(yy + crR[cr]), clamp8(yy + (cbG[cb]+crG[cr])>>16), clamp8(yy + cbB[cb])
}

// libjpeg's color tables: crR = round(1.402 (cr-128)), cbB = round(1.772 (cb-128)), and
// the green terms before their shift.
var crR, cbB, cbG, crG = func() (r, b, gb, gr [256]int32) {
	for i := range 256 {
		x := int32(i) - 128
		r[i], b[i] = (91881*x+32768)>>16, (116130*x+32768)>>16
		gb[i], gr[i] = -22554*x, -46802*x+32768
	}
	return
}()

func clamp8(v int32) uint8 { return uint8(min(max(v, 0), 255)) }

// ycbcrToPlanar converts a decoded JPEG to planar RGB or L as libjpeg (and so PIL) does:
// chroma upsampled by libjpeg's "fancy" triangle filter for 4:2:0 and 4:2:2 (jdsample.c:
// 3/4 of the nearer chroma sample and 1/4 of the farther, edges replicated), the
// nearest sample for other subsamplings (as Go's decoder does), then jpegRGB. Rows are
// converted one at a time through small scratch rows.
func ycbcrToPlanar(m *image.YCbCr, mode ColorMode, dst []byte) {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	n := w * h
	fancy := m.SubsampleRatio == image.YCbCrSubsampleRatio420 || m.SubsampleRatio == image.YCbCrSubsampleRatio422
	v2 := m.SubsampleRatio == image.YCbCrSubsampleRatio420
	cw, ch := (w+1)/2, h
	if v2 {
		ch = (h + 1) / 2
	}
	scratch := make([]uint8, 2*w)
	sums := make([]int32, cw+2)
	cbRow, crRow := scratch[:w], scratch[w:]
	for y := range h {
		if fancy {
			for k, plane := range [2][]uint8{m.Cb, m.Cr} {
				out := [2][]uint8{cbRow, crRow}[k]
				cy, far := y, -1
				if v2 {
					// The upper output row of a pair leans on the chroma row above, the
					// lower on the one below.
					cy, far = y/2, y/2-1
					if y%2 == 1 {
						far = y/2 + 1
					}
					far = min(max(far, 0), ch-1)
				}
				near := plane[(cy+b.Min.Y/2)*m.CStride:][:cw]
				var farRow []uint8
				if far >= 0 {
					farRow = plane[(far+b.Min.Y/2)*m.CStride:][:cw]
				}
				fancyRow(out, near, farRow, sums)
			}
		} else {
			for x := range w {
				ci := m.COffset(x+b.Min.X, y+b.Min.Y)
				cbRow[x], crRow[x] = m.Cb[ci], m.Cr[ci]
			}
		}
		yrow := m.Y[m.YOffset(b.Min.X, y+b.Min.Y):][:w]
		if mode == Gray {
			out := dst[y*w : (y+1)*w]
			for x, yy := range yrow {
				r, g, bl := jpegRGB(yy, cbRow[x], crRow[x])
				out[x] = luma(r, g, bl)
			}
			continue
		}
		rr, gg, bb := dst[y*w:(y+1)*w], dst[n+y*w:n+(y+1)*w], dst[2*n+y*w:2*n+(y+1)*w]
		for x, yy := range yrow {
			rr[x], gg[x], bb[x] = jpegRGB(yy, cbRow[x], crRow[x])
		}
	}
}

// fancyRow upsamples one chroma row twice horizontally into dst: with far nil as
// h2v1_fancy_upsample does, otherwise from the column sums 3*near + far as
// h2v2_fancy_upsample does. sums is scratch of len(near)+2.
func fancyRow(dst, near, far []uint8, sums []int32) {
	cw := len(near)
	s := sums[:cw+2]
	for c, v := range near {
		s[c+1] = int32(v)
		if far != nil {
			s[c+1] = 3*int32(v) + int32(far[c])
		}
	}
	s[0], s[cw+1] = s[1], s[cw]
	for c := range cw {
		this, last, next := s[c+1], s[c], s[c+2]
		var a, z int32
		if far == nil {
			a, z = (3*this+last+1)>>2, (3*this+next+2)>>2
			if c == 0 {
				a = this
			}
			if c == cw-1 {
				z = this
			}
		} else {
			a, z = (3*this+last+8)>>4, (3*this+next+7)>>4
			if c == 0 {
				a = (4*this + 8) >> 4
			}
			if c == cw-1 {
				z = (4*this + 7) >> 4
			}
		}
		if 2*c < len(dst) {
			dst[2*c] = uint8(a)
		}
		if 2*c+1 < len(dst) {
			dst[2*c+1] = uint8(z)
		}
	}
}
