package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// IDX is the content of an IDX file (the format of MNIST and Fashion-MNIST): unsigned
// bytes in row-major order with their dimensions.
type IDX struct {
	Dims []int
	Data []byte
}

// idxUbyte is the IDX type code of unsigned bytes, the only type MNIST-style files use.
const idxUbyte = 0x08

// ReadIDX reads an IDX file of unsigned bytes, gzip-compressed or raw (detected from the
// content, not the name). An error names the file and says what is wrong with it: a
// wrong magic number, an unsupported type, a truncated or corrupt file.
func ReadIDX(path string) (*IDX, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	var r io.Reader = br
	if head, _ := br.Peek(2); bytes.Equal(head, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("idx: %s: corrupt gzip stream: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	idx, err := decodeIDX(r)
	if err != nil {
		return nil, fmt.Errorf("idx: %s: %w", path, err)
	}
	return idx, nil
}

func decodeIDX(r io.Reader) (*IDX, error) {
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
		size *= int64(d)
		if size > 1<<34 {
			return nil, fmt.Errorf("dimensions %v are implausibly large", dims[:i+1])
		}
	}
	data := make([]byte, size)
	if n, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("truncated: dimensions %v need %d data bytes, file has %d: %w", dims, size, n, readErr(err))
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
