package data

import (
	"math"
	"sync"
)

// Antialiased bilinear resampling, the algorithm of PIL's Image.resize(BILINEAR)
// (Resample.c) and of torch's interpolate(mode="bilinear", antialias=True), which was
// written to match PIL: a triangle filter whose support widens with the downscaling
// factor, applied horizontally and then vertically. Images are planar [C, H, W].

// coeffs are one axis's filter taps: output i reads inputs bounds[2i] ..
// bounds[2i]+bounds[2i+1]-1 with weights k[i*ksize:].
type coeffs struct {
	ksize  int
	bounds []int
	k      []float64
}

// bilinearCoeffs is PIL's precompute_coeffs for the bilinear filter over an axis of
// inSize pixels resampled to outSize.
func bilinearCoeffs(inSize, outSize int) coeffs {
	scale := float64(inSize) / float64(outSize)
	filterscale := max(scale, 1)
	support := filterscale // the bilinear filter's support is 1
	c := coeffs{ksize: int(math.Ceil(support))*2 + 1, bounds: make([]int, 2*outSize)}
	c.k = make([]float64, outSize*c.ksize)
	ss := 1 / filterscale
	for xx := range outSize {
		center := (float64(xx) + 0.5) * scale
		xmin := max(int(center-support+0.5), 0)
		xmax := min(int(center+support+0.5), inSize) - xmin
		k := c.k[xx*c.ksize : xx*c.ksize+xmax]
		ww := 0.0
		for x := range k {
			t := math.Abs((float64(x+xmin) - center + 0.5) * ss)
			w := 0.0
			if t < 1 {
				w = 1 - t
			}
			k[x] = w
			ww += w
		}
		if ww != 0 {
			for x := range k {
				k[x] /= ww
			}
		}
		// Taps of weight zero at either end add nothing (PIL adds them): dropping them
		// changes no result and saves a third of the work when upscaling.
		for xmax > 1 && k[xmax-1] == 0 {
			xmax--
		}
		for xmax > 1 && k[0] == 0 {
			copy(k, k[1:xmax])
			k[xmax-1] = 0
			xmin, xmax = xmin+1, xmax-1
		}
		c.bounds[2*xx], c.bounds[2*xx+1] = xmin, xmax
	}
	return c
}

// Scratch of the uint8 passes, reused across samples.
var resampleTmp = sync.Pool{New: func() any { return new([]byte) }}

// precisionBits is PIL's fixed-point precision for 8-bit images (32 - 8 - 2).
const precisionBits = 22

// fixedTaps are one axis's taps in PIL's fixed point (normalize_coeffs_8bpc), n for
// every output: output i reads inputs start[i] .. start[i]+n-1 with weights k[i*n:].
// Outputs with fewer taps are padded with zero weights, which change no sum (integer
// sums are exact in any order), so that the loops over taps have one length per pass.
type fixedTaps struct {
	n     int
	start []int
	k     []int32
}

func newFixedTaps(inSize, outSize int) fixedTaps {
	c := bilinearCoeffs(inSize, outSize)
	n := 1
	for i := range outSize {
		n = max(n, c.bounds[2*i+1])
	}
	t := fixedTaps{n: n, start: make([]int, outSize), k: make([]int32, outSize*n)}
	for i := range outSize {
		xmin, cnt := c.bounds[2*i], c.bounds[2*i+1]
		first := min(xmin, inSize-n) // the window moves left at the right edge
		t.start[i] = first
		for j, v := range c.k[i*c.ksize : i*c.ksize+cnt] {
			w := int32(0.5 + v*(1<<precisionBits))
			if v < 0 {
				w = int32(-0.5 + v*(1<<precisionBits))
			}
			t.k[i*n+xmin-first+j] = w
		}
	}
	return t
}

// half is the rounding term every fixed-point sum starts from.
const half = int32(1 << (precisionBits - 1))

func clipFixed(ss int32) uint8 {
	v := ss >> precisionBits
	return uint8(min(max(v, 0), 255))
}

// resampleRow is the horizontal pass over one row: out[x] from in through t.
func resampleRow(in, out []byte, t *fixedTaps) {
	start := t.start[:len(out)]
	switch t.n {
	case 2: // upscaling
		k := t.k[:2*len(out)]
		for x, s := range start {
			p := in[s : s+2]
			out[x] = clipFixed(half + int32(p[0])*k[2*x] + int32(p[1])*k[2*x+1])
		}
	case 3: // a slight downscale
		k := t.k[:3*len(out)]
		for x, s := range start {
			p, kk := in[s:s+3], k[3*x:3*x+3]
			out[x] = clipFixed(half + int32(p[0])*kk[0] + int32(p[1])*kk[1] + int32(p[2])*kk[2])
		}
	default:
		n := t.n
		for x, s := range start {
			ss := half
			kk := t.k[x*n : x*n+n]
			for j, v := range in[s : s+n] {
				ss += int32(v) * kk[j]
			}
			out[x] = clipFixed(ss)
		}
	}
}

// resampleColumns is the vertical pass for one output row: out from the rows
// first .. first+len(k)-1 of plane (of width len(out)) weighted by k. acc is scratch
// of len(out) for more than three taps.
func resampleColumns(plane []byte, first int, k []int32, out []byte, acc []int32) {
	w := len(out)
	row := func(j int) []byte { return plane[(first+j)*w : (first+j+1)*w] }
	switch len(k) {
	case 1: // a source of one row
		r0, k0 := row(0), k[0]
		for x := range out {
			out[x] = clipFixed(half + int32(r0[x])*k0)
		}
	case 2:
		r0, r1, k0, k1 := row(0), row(1)[:w], k[0], k[1]
		for x := range out {
			out[x] = clipFixed(half + int32(r0[x])*k0 + int32(r1[x])*k1)
		}
	case 3:
		r0, r1, r2, k0, k1, k2 := row(0), row(1)[:w], row(2)[:w], k[0], k[1], k[2]
		for x := range out {
			out[x] = clipFixed(half + int32(r0[x])*k0 + int32(r1[x])*k1 + int32(r2[x])*k2)
		}
	default:
		acc = acc[:w]
		for x := range acc {
			acc[x] = half
		}
		for j, kj := range k {
			for x, v := range row(j)[:w] {
				acc[x] += int32(v) * kj
			}
		}
		for x := range out {
			out[x] = clipFixed(acc[x])
		}
	}
}

// resizeUint8 resizes planar 8-bit images as PIL does, bit for bit: a horizontal pass
// into an 8-bit intermediate of the rows the vertical pass needs, then the vertical
// pass, each in fixed point with rounding. dst holds c*oh*ow bytes.
func resizeUint8(src []byte, c, h, w, oh, ow int, dst []byte) {
	if oh == h && ow == w {
		copy(dst, src)
		return
	}
	if oh == h {
		resampleRows(src, c, h, w, 0, h, ow, newFixedTaps(w, ow), dst)
		return
	}
	vt := newFixedTaps(h, oh)
	// The horizontal pass makes only the rows the vertical pass reads.
	tmp, first, rows := src, 0, h
	if ow != w {
		first, rows = vt.start[0], vt.start[oh-1]+vt.n-vt.start[0]
		buf := resampleTmp.Get().(*[]byte)
		defer resampleTmp.Put(buf)
		*buf = growBytes(*buf, c*rows*ow)
		tmp = *buf
		resampleRows(src, c, h, w, first, rows, ow, newFixedTaps(w, ow), tmp)
	}
	var acc []int32
	if vt.n > 3 {
		acc = make([]int32, ow)
	}
	for ch := range c {
		plane := tmp[ch*rows*ow : (ch+1)*rows*ow]
		for y := range oh {
			resampleColumns(plane, vt.start[y]-first, vt.k[y*vt.n:(y+1)*vt.n], dst[(ch*oh+y)*ow:(ch*oh+y+1)*ow], acc)
		}
	}
}

// resampleRows runs the horizontal pass over rows first .. first+rows-1 of each of the
// c planes of src (h x w) into dst (c x rows x ow).
func resampleRows(src []byte, c, h, w, first, rows, ow int, t fixedTaps, dst []byte) {
	for ch := range c {
		for y := range rows {
			in := src[(ch*h+first+y)*w : (ch*h+first+y+1)*w]
			resampleRow(in, dst[(ch*rows+y)*ow:(ch*rows+y+1)*ow], &t)
		}
	}
}

// resizeFloat32 resizes planar float32 images as torch's antialiased bilinear
// interpolate does: the width first, then the height, skipping an axis whose size does
// not change, accumulating in float32. dst holds c*oh*ow values.
func resizeFloat32(src []float32, c, h, w, oh, ow int, dst []float32) {
	cur, cw := src, w
	if ow != w {
		hc := bilinearCoeffs(w, ow)
		k := convert[float32](hc.k)
		next := dst
		if oh != h {
			next = make([]float32, c*h*ow)
		}
		for row := range c * h {
			in, out := cur[row*w:], next[row*ow:]
			for x := range ow {
				xmin, n := hc.bounds[2*x], hc.bounds[2*x+1]
				kk := k[x*hc.ksize:]
				var s float32
				for t := range n {
					s += in[xmin+t] * kk[t]
				}
				out[x] = s
			}
		}
		cur, cw = next, ow
	}
	if oh == h {
		if ow == w {
			copy(dst, src)
		}
		return
	}
	vc := bilinearCoeffs(h, oh)
	k := convert[float32](vc.k)
	for ch := range c {
		plane := cur[ch*h*cw:]
		for y := range oh {
			ymin, n := vc.bounds[2*y], vc.bounds[2*y+1]
			kk := k[y*vc.ksize:]
			out := dst[(ch*oh+y)*cw:]
			for x := range cw {
				var s float32
				for t := range n {
					s += plane[(ymin+t)*cw+x] * kk[t]
				}
				out[x] = s
			}
		}
	}
}
