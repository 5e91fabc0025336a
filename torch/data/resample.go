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
var (
	resampleTmp = sync.Pool{New: func() any { return new([]byte) }}
	resampleAcc = sync.Pool{New: func() any { return new([]int32) }}
)

// precisionBits is PIL's fixed-point precision for 8-bit images (32 - 8 - 2).
const precisionBits = 22

// fixed returns c's weights in PIL's fixed point (normalize_coeffs_8bpc).
func (c coeffs) fixed() []int32 {
	out := make([]int32, len(c.k))
	for i, v := range c.k {
		if v < 0 {
			out[i] = int32(-0.5 + v*(1<<precisionBits))
		} else {
			out[i] = int32(0.5 + v*(1<<precisionBits))
		}
	}
	return out
}

func clipFixed(ss int32) uint8 {
	v := ss >> precisionBits
	return uint8(min(max(v, 0), 255))
}

// resizeUint8 resizes planar 8-bit images as PIL does, bit for bit: a horizontal pass
// into an 8-bit intermediate of the rows the vertical pass needs, then the vertical
// pass, each in fixed point with rounding. dst holds c*oh*ow bytes.
func resizeUint8(src []byte, c, h, w, oh, ow int, dst []byte) {
	if oh == h && ow == w {
		copy(dst, src)
		return
	}
	hc, vc := bilinearCoeffs(w, ow), bilinearCoeffs(h, oh)
	hk, vk := hc.fixed(), vc.fixed()
	// Rows of the source the vertical pass reads.
	first, last := 0, h
	if oh != h {
		first, last = vc.bounds[0], vc.bounds[2*oh-2]+vc.bounds[2*oh-1]
	}
	tmpW := w
	var tmp []byte
	if ow != w {
		tmpW = ow
		buf := resampleTmp.Get().(*[]byte)
		defer resampleTmp.Put(buf)
		*buf = growBytes(*buf, c*(last-first)*ow)
		tmp = *buf
		for ch := range c {
			for y := first; y < last; y++ {
				in := src[(ch*h+y)*w : (ch*h+y+1)*w]
				out := tmp[(ch*(last-first)+y-first)*ow : (ch*(last-first)+y-first+1)*ow]
				for x := range out {
					xmin, n := hc.bounds[2*x], hc.bounds[2*x+1]
					k := hk[x*hc.ksize : x*hc.ksize+n]
					ss := int32(1 << (precisionBits - 1))
					if n == 2 { // the common case when upscaling
						ss += int32(in[xmin])*k[0] + int32(in[xmin+1])*k[1]
					} else {
						for t, v := range in[xmin : xmin+n] {
							ss += int32(v) * k[t]
						}
					}
					out[x] = clipFixed(ss)
				}
			}
		}
	} else {
		tmp = src
		first, last = 0, h
	}
	rows := last - first
	if oh == h {
		copy(dst, tmp[:c*oh*ow])
		return
	}
	// The vertical pass runs row by row into accumulators, reading the intermediate
	// contiguously rather than down its columns.
	accBuf := resampleAcc.Get().(*[]int32)
	defer resampleAcc.Put(accBuf)
	if cap(*accBuf) < tmpW {
		*accBuf = make([]int32, tmpW)
	}
	acc := (*accBuf)[:tmpW]
	for ch := range c {
		plane := tmp[ch*rows*tmpW : (ch+1)*rows*tmpW]
		for y := range oh {
			ymin, n := vc.bounds[2*y]-first, vc.bounds[2*y+1]
			for x := range acc {
				acc[x] = 1 << (precisionBits - 1)
			}
			for t, kt := range vk[y*vc.ksize : y*vc.ksize+n] {
				row := plane[(ymin+t)*tmpW : (ymin+t+1)*tmpW]
				for x, v := range row {
					acc[x] += int32(v) * kt
				}
			}
			out := dst[(ch*oh+y)*ow : (ch*oh+y+1)*ow]
			for x := range out {
				out[x] = clipFixed(acc[x])
			}
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
		k := float32s(hc.k)
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
	k := float32s(vc.k)
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

func float32s(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}
