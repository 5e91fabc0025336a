//go:build cgo && !nolibjpeg

package libjpeg

/*
#cgo LDFLAGS: -ljpeg
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

// libjpeg's default error_exit prints and calls exit(): errors jump back to
// gt_jpeg_decode instead, with the message formatted into the caller's buffer.
struct gt_jpeg_err {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
	char *msg;
};

static void gt_jpeg_error_exit(j_common_ptr cinfo) {
	struct gt_jpeg_err *e = (struct gt_jpeg_err *)cinfo->err;
	cinfo->err->format_message(cinfo, e->msg);
	longjmp(e->jump, 1);
}

// Warnings are silent (corrupt data libjpeg can decode past, as Pillow does), except
// a premature end of the file: libjpeg would pad it with gray where Pillow reports
// "image file is truncated".
static void gt_jpeg_emit_message(j_common_ptr cinfo, int level) {
	if (level >= 0) return;
	if (cinfo->err->msg_code == JWRN_JPEG_EOF) gt_jpeg_error_exit(cinfo);
	cinfo->err->num_warnings++;
}

// gt_split3 splits n interleaved RGB pixels into three planes.
static void gt_split3(const JSAMPLE *restrict in, unsigned char *restrict r, unsigned char *restrict g,
		unsigned char *restrict b, size_t n) {
	for (size_t i = 0; i < n; i++) {
		r[i] = in[3 * i];
		g[i] = in[3 * i + 1];
		b[i] = in[3 * i + 2];
	}
}

// gt_jpeg_decode decodes src (n bytes) with libjpeg's defaults (islow IDCT, fancy
// upsampling), as Pillow does, into planar dst: channels 3 is RGB (gray replicated),
// 1 is L (RGB through PIL's ITU-R 601-2 luma). It returns 0, or 1 with msg set
// (JMSG_LENGTH_MAX bytes).
static int gt_jpeg_decode(const unsigned char *src, unsigned long n, int width, int height, int comps,
		int channels, unsigned char *dst, char *msg) {
	struct jpeg_decompress_struct cinfo;
	struct gt_jpeg_err err;
	memset(&cinfo, 0, sizeof cinfo);
	cinfo.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = gt_jpeg_error_exit;
	err.pub.emit_message = gt_jpeg_emit_message;
	err.msg = msg;
	if (setjmp(err.jump)) {
		jpeg_destroy_decompress(&cinfo);
		return 1;
	}
	jpeg_create_decompress(&cinfo);
	jpeg_mem_src(&cinfo, src, n);
	jpeg_read_header(&cinfo, TRUE);
	if ((int)cinfo.image_width != width || (int)cinfo.image_height != height || cinfo.num_components != comps) {
		snprintf(msg, JMSG_LENGTH_MAX, "libjpeg reads a %dx%d image of %d components where the frame header says %dx%d of %d",
			(int)cinfo.image_width, (int)cinfo.image_height, cinfo.num_components, width, height, comps);
		jpeg_destroy_decompress(&cinfo);
		return 1;
	}
	cinfo.out_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
	jpeg_start_decompress(&cinfo);
	// Gray scanlines go straight to dst's first plane; RGB ones to a whole interleaved
	// image first, split afterwards: splitting row by row between libjpeg's calls
	// measured slower.
	size_t plane = (size_t)width * height;
	JSAMPLE *pix = dst;
	if (comps == 3) {
		pix = cinfo.mem->alloc_large((j_common_ptr)&cinfo, JPOOL_IMAGE, 3 * plane);
	}
	while (cinfo.output_scanline < cinfo.output_height) {
		JSAMPROW row = pix + (size_t)cinfo.output_scanline * width * comps;
		jpeg_read_scanlines(&cinfo, &row, 1);
	}
	if (comps == 1 && channels == 3) {
		memcpy(dst + plane, dst, plane);
		memcpy(dst + 2 * plane, dst, plane);
	} else if (comps == 3 && channels == 3) {
		gt_split3(pix, dst, dst + plane, dst + 2 * plane, plane);
	} else if (comps == 3) {
		for (size_t i = 0; i < plane; i++) {
			const JSAMPLE *p = pix + 3 * i;
			dst[i] = (unsigned char)((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
		}
	}
	jpeg_finish_decompress(&cinfo);
	jpeg_destroy_decompress(&cinfo);
	return 0;
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// Available reports whether Decode can decode: libjpeg-turbo is linked (cgo, and no
// build tag nolibjpeg).
const Available = true

// Decode decodes the JPEG file raw, whose frame header is h (ReadHeader), into dst as
// planar [channels, h.Height, h.Width] bytes: channels 3 gives what PIL's
// Image.open(f).convert("RGB") holds, 1 what convert("L") holds. A corrupt or
// truncated file is an error with libjpeg's message.
func Decode(raw []byte, h Header, channels int, dst []byte) error {
	if err := checkDst(h, channels, dst); err != nil {
		return err
	}
	var msg [C.JMSG_LENGTH_MAX]C.char
	if C.gt_jpeg_decode((*C.uchar)(unsafe.Pointer(unsafe.SliceData(raw))), C.ulong(len(raw)), C.int(h.Width), C.int(h.Height),
		C.int(h.Components), C.int(channels), (*C.uchar)(unsafe.Pointer(unsafe.SliceData(dst))), &msg[0]) != 0 {
		return errors.New("libjpeg: " + C.GoString(&msg[0]))
	}
	return nil
}
