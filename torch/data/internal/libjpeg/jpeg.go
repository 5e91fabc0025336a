// Package libjpeg decodes JPEG files with libjpeg-turbo, the decoder Pillow uses, so that
// the pixels torch/data's ImageFolder yields are the ones torchvision's ImageFolder
// yields, at libjpeg-turbo's speed (SIMD IDCT and upsampling). It decodes in one cgo
// call per image into a caller-owned buffer, in planar [C, H, W] layout, converted to
// RGB or L as PIL's Image.convert does.
//
// Without cgo, or with build tag nolibjpeg, Available is false and callers use Go's
// image/jpeg instead (torch/data does so itself).
package libjpeg

import (
	"errors"
	"fmt"
)

// Header is what a JPEG file's frame header (SOFn marker) declares.
type Header struct {
	Width, Height int
	Components    int // 1 (grayscale), 3 (YCbCr or RGB), 4 (CMYK or YCCK)
	Precision     int // bits per sample
}

// Supported reports whether Decode handles an image with this header: 8-bit samples,
// one or three components and a height given in the frame header. Others (CMYK, YCCK,
// 12-bit, a DNL-marker height) are left to the caller's fallback decoder.
func (h Header) Supported() bool {
	return h.Precision == 8 && (h.Components == 1 || h.Components == 3) && h.Width > 0 && h.Height > 0
}

// ReadHeader reads the frame header of the JPEG file raw, skipping the markers before
// it as libjpeg does (fill bytes, stray bytes between markers). Decode checks that
// libjpeg reads the same header.
func ReadHeader(raw []byte) (Header, error) {
	if len(raw) < 2 || raw[0] != 0xff || raw[1] != 0xd8 {
		return Header{}, errors.New("libjpeg: not a JPEG file (no SOI marker)")
	}
	for p := 2; ; {
		for p < len(raw) && raw[p] != 0xff {
			p++
		}
		for p < len(raw) && raw[p] == 0xff {
			p++
		}
		if p >= len(raw) {
			return Header{}, errors.New("libjpeg: no frame header before the end of the file")
		}
		m := raw[p]
		p++
		switch {
		case m == 0x01 || m == 0xd8 || (m >= 0xd0 && m <= 0xd7):
			continue // markers without a segment
		case m == 0xd9 || m == 0xda:
			return Header{}, fmt.Errorf("libjpeg: marker 0x%02x before the frame header", m)
		}
		if p+2 > len(raw) {
			return Header{}, errors.New("libjpeg: truncated marker segment")
		}
		n := int(raw[p])<<8 | int(raw[p+1])
		if n < 2 || p+n > len(raw) {
			return Header{}, fmt.Errorf("libjpeg: marker 0x%02x: bad segment length %d", m, n)
		}
		if isSOF(m) {
			if n < 8 {
				return Header{}, fmt.Errorf("libjpeg: frame header of %d bytes", n)
			}
			seg := raw[p+2 : p+n]
			return Header{
				Precision:  int(seg[0]),
				Height:     int(seg[1])<<8 | int(seg[2]),
				Width:      int(seg[3])<<8 | int(seg[4]),
				Components: int(seg[5]),
			}, nil
		}
		p += n
	}
}

// isSOF reports whether m is a start-of-frame marker: 0xc0 to 0xcf except DHT (0xc4),
// JPG (0xc8) and DAC (0xcc).
func isSOF(m byte) bool {
	return m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc
}

// checkDst checks Decode's arguments.
func checkDst(h Header, channels int, dst []byte) error {
	if !h.Supported() {
		return fmt.Errorf("libjpeg: %d-bit images of %d components (%dx%d) are not decoded here", h.Precision, h.Components, h.Width, h.Height)
	}
	if channels != 1 && channels != 3 {
		return fmt.Errorf("libjpeg: %d output channels; want 1 (L) or 3 (RGB)", channels)
	}
	if len(dst) != channels*h.Width*h.Height {
		return fmt.Errorf("libjpeg: destination of %d bytes for %d x %d x %d", len(dst), channels, h.Height, h.Width)
	}
	return nil
}
