package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // GIF, BMP, TIFF and WebP register with image.Decode
	"image/jpeg"
	"image/png"
	"io"
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
// converted as PIL's convert does, written to dst(C, H, W).
func decodePlanar(raw []byte, mode ColorMode, dst func(c, h, w int) []byte) error {
	c := 3
	if mode == Gray {
		c = 1
	}
	if useLibjpeg && bytes.HasPrefix(raw, []byte{0xff, 0xd8}) {
		if hdr, err := libjpeg.ReadHeader(raw); err == nil && hdr.Supported() {
			return libjpeg.Decode(raw, hdr, c, dst(c, hdr.Height, hdr.Width))
		}
	}
	img, err := decodeImage(raw)
	if err != nil {
		return err
	}
	b := img.Bounds()
	return toPlanar(img, mode, dst(c, b.Dy(), b.Dx()))
}

// decodeImage decodes an image file's bytes, whatever its format.
func decodeImage(raw []byte) (image.Image, error) {
	r := bytes.NewReader(raw)
	switch {
	case bytes.HasPrefix(raw, []byte("\x89PNG\r\n\x1a\n")):
		return png.Decode(r)
	case bytes.HasPrefix(raw, []byte{0xff, 0xd8}):
		return jpeg.Decode(r)
	case len(raw) > 2 && raw[0] == 'P' && (raw[1] == '5' || raw[1] == '6'):
		return decodePNM(raw)
	}
	img, _, err := image.Decode(r)
	if errors.Is(err, image.ErrFormat) {
		return nil, errors.New("not an image in a format gotrain decodes (PNG, JPEG, GIF, BMP, TIFF, WebP, binary PPM/PGM)")
	}
	return img, err
}

// decodePNM decodes binary PGM (P5) and PPM (P6) files of 8-bit samples.
func decodePNM(raw []byte) (image.Image, error) {
	br := bufio.NewReader(bytes.NewReader(raw[2:]))
	var nums [3]int
	for k := range nums {
		tok, err := pnmToken(br)
		if err != nil {
			return nil, fmt.Errorf("truncated PNM header: %w", err)
		}
		if nums[k], err = strconv.Atoi(tok); err != nil || nums[k] <= 0 {
			return nil, fmt.Errorf("bad PNM header field %q", tok)
		}
	}
	w, h, maxval := nums[0], nums[1], nums[2]
	if maxval > 255 {
		return nil, fmt.Errorf("PNM with maxval %d: only 8-bit samples are supported", maxval)
	}
	ch := 1
	if raw[1] == '6' {
		ch = 3
	}
	px := make([]byte, w*h*ch)
	if _, err := io.ReadFull(br, px); err != nil {
		return nil, fmt.Errorf("truncated PNM data: %w", err)
	}
	if maxval != 255 {
		for i, v := range px {
			px[i] = byte((int(v)*255 + maxval/2) / maxval)
		}
	}
	if ch == 1 {
		return &image.Gray{Pix: px, Stride: w, Rect: image.Rect(0, 0, w, h)}, nil
	}
	rgba := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := range w * h {
		copy(rgba.Pix[4*i:4*i+3], px[3*i:3*i+3])
		rgba.Pix[4*i+3] = 255
	}
	return rgba, nil
}

// pnmToken reads one whitespace-separated header token, skipping # comments, and the
// single whitespace byte after it.
func pnmToken(br *bufio.Reader) (string, error) {
	var tok []byte
	for {
		c, err := br.ReadByte()
		if err != nil {
			return "", err
		}
		switch {
		case c == '#' && len(tok) == 0:
			if _, err := br.ReadBytes('\n'); err != nil {
				return "", err
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if len(tok) > 0 {
				return string(tok), nil
			}
		default:
			tok = append(tok, c)
		}
	}
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
				out := cbRow
				if k == 1 {
					out = crRow
				}
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
