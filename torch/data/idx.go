package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// IDX is the content of an IDX file (the format of MNIST and Fashion-MNIST): unsigned
// bytes in row-major order with their dimensions.
type IDX struct {
	Dims []int
	Data []byte
}

// idxUbyte is the IDX type code of unsigned bytes, the only type MNIST-style files use.
const idxUbyte = 0x08

// MaxIDXInflation bounds how much a gzip-compressed IDX file may inflate: the data its
// header declares may be at most this many times the compressed file's size. Real
// image sets compress 2x (Fashion-MNIST) to 5x (MNIST); deflate's own limit is about
// 1032x, which a stream of zeros reaches, so a 2.6 MB file that declares 2.7 GB is
// refused from its header, before anything is inflated or allocated.
const MaxIDXInflation = 256

// ReadIDX reads an IDX file of unsigned bytes, gzip-compressed or raw (detected from the
// content, not the name). An error names the file and says what is wrong with it: a
// wrong magic number, an unsupported type, a truncated or corrupt file, a size its
// header declares that the file cannot hold (a raw file must hold exactly the declared
// bytes, a gzip file at most MaxIDXInflation times its size), a path that is not a
// regular file. Memory grows with the data actually read, never ahead of it to what a
// header claims.
func ReadIDX(path string) (*IDX, error) {
	f, size, err := OpenRegular(path)
	if err != nil {
		return nil, fmt.Errorf("idx: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	maxData := size // a raw file holds its header and exactly the declared data
	compressed := false
	if head, _ := br.Peek(2); bytes.Equal(head, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("idx: %s: corrupt gzip stream: %w", path, err)
		}
		defer gz.Close()
		r, compressed = gz, true
		maxData = satMul(size, MaxIDXInflation)
	}
	idx, err := decodeIDX(r, maxData, compressed)
	if err != nil {
		return nil, fmt.Errorf("idx: %s: %w", path, err)
	}
	return idx, nil
}

// decodeIDX reads an IDX stream of at most maxData bytes (header included); for a raw
// file maxData is its size, which the header must match.
func decodeIDX(r io.Reader, maxData int64, compressed bool) (*IDX, error) {
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil {
		return nil, fmt.Errorf("truncated: no 4-byte magic number: %w", readErr(err))
	}
	if magic[0] != 0 || magic[1] != 0 || magic[3] == 0 {
		return nil, fmt.Errorf("wrong magic number 0x%08x: not an IDX file (want 0x0000080N)", binary.BigEndian.Uint32(magic[:]))
	}
	if magic[2] != idxUbyte {
		return nil, fmt.Errorf("magic number 0x%08x has element type 0x%02x; only unsigned bytes (0x08) are supported", binary.BigEndian.Uint32(magic[:]), magic[2])
	}
	nd := int(magic[3])
	hdr := make([]byte, 4*nd)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("truncated: header of %d dimensions is cut short: %w", nd, readErr(err))
	}
	dims := make([]int, nd)
	size := int64(1)
	for i := range dims {
		d := binary.BigEndian.Uint32(hdr[4*i:])
		dims[i] = int(d)
		size = satMul(size, int64(d))
	}
	total := satAdd(size, int64(4+4*nd))
	switch {
	case compressed && total > maxData:
		return nil, fmt.Errorf("dimensions %v declare %d bytes, more than %d times (MaxIDXInflation) the %d-byte compressed file: refusing to inflate it (a decompression bomb, or a corrupt header)",
			dims, size, MaxIDXInflation, maxData/MaxIDXInflation)
	case !compressed && total != maxData:
		have := maxData - int64(4+4*nd)
		if total > maxData {
			return nil, fmt.Errorf("truncated: dimensions %v need %d data bytes, file has %d", dims, size, max(have, 0))
		}
		return nil, fmt.Errorf("corrupt: data continues past the %d bytes that dimensions %v describe (the file has %d)", size, dims, have)
	}
	// The buffer grows as data arrives, so a stream that ends early costs what it held,
	// not what its header declared.
	data, err := io.ReadAll(io.LimitReader(r, size))
	if int64(len(data)) < size {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("truncated: dimensions %v need %d data bytes, file has %d: %w", dims, size, len(data), readErr(err))
	}
	// A trailing byte means the header and the data disagree; so does a gzip stream whose
	// checksum fails, which only shows at its end.
	var extra [1]byte
	switch n, err := io.ReadFull(r, extra[:]); {
	case n > 0:
		return nil, fmt.Errorf("corrupt: data continues past the %d bytes that dimensions %v describe", size, dims)
	case err != nil && err != io.EOF:
		return nil, fmt.Errorf("corrupt: %w", err)
	}
	return &IDX{Dims: dims, Data: data}, nil
}

func readErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
