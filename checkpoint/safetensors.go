package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// maxSafetensorsHeader is the header size limit of the reference implementation.
const maxSafetensorsHeader = 100 << 20

type stEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// ReadSafetensors reads a safetensors file: a flat dict of named tensors, in file order,
// and the header's string metadata (nil when absent).
func ReadSafetensors(path string) (*Dict, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	return ReadSafetensorsFrom(f, fi.Size())
}

// ReadSafetensorsFrom reads a safetensors file of size bytes from r. Every tensor must
// lie inside the data area, which the tensors must cover exactly, as the format requires.
func ReadSafetensorsFrom(r io.ReaderAt, size int64) (*Dict, map[string]string, error) {
	d, meta, err := readSafetensors(r, size)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: safetensors: %w", err)
	}
	return d, meta, nil
}

func readSafetensors(r io.ReaderAt, size int64) (*Dict, map[string]string, error) {
	var hl [8]byte
	if size < 8 {
		return nil, nil, errors.New("file too short")
	}
	if _, err := r.ReadAt(hl[:], 0); err != nil {
		return nil, nil, err
	}
	n := binary.LittleEndian.Uint64(hl[:])
	if n > maxSafetensorsHeader || int64(n) > size-8 {
		return nil, nil, fmt.Errorf("header length %d is invalid for a file of %d bytes", n, size)
	}
	hdr := make([]byte, n)
	if m, err := r.ReadAt(hdr, 8); m < len(hdr) {
		return nil, nil, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, nil, fmt.Errorf("header: %w", err)
	}
	var meta map[string]string
	if m, ok := raw["__metadata__"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, nil, fmt.Errorf("__metadata__: %w", err)
		}
		delete(raw, "__metadata__")
	}
	type named struct {
		name string
		e    stEntry
		dt   DType
	}
	entries := make([]named, 0, len(raw))
	for name, msg := range raw {
		var e stEntry
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		dt, err := stDType(e.DType)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		entries = append(entries, named{name, e, dt})
	}
	slices.SortFunc(entries, func(a, b named) int {
		if c := a.e.DataOffsets[0] - b.e.DataOffsets[0]; c != 0 {
			if c < 0 {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	dataStart := 8 + int64(n)
	dataLen := size - dataStart
	var end int64
	for _, ne := range entries {
		b, e := ne.e.DataOffsets[0], ne.e.DataOffsets[1]
		if b != end || e < b || e > dataLen {
			return nil, nil, fmt.Errorf("tensor %q: data_offsets %v leave a gap, overlap or exceed the data", ne.name, ne.e.DataOffsets)
		}
		end = e
	}
	if end != dataLen {
		return nil, nil, fmt.Errorf("%d bytes of data after the last tensor", dataLen-end)
	}
	data := make([]byte, dataLen)
	if m, err := r.ReadAt(data, dataStart); m < len(data) {
		return nil, nil, err
	}
	out := NewDict()
	for _, ne := range entries {
		b, e := ne.e.DataOffsets[0], ne.e.DataOffsets[1]
		shape := ne.e.Shape
		if shape == nil {
			shape = []int64{}
		}
		t := &Tensor{DType: ne.dt, Shape: shape, Strides: ContiguousStrides(shape),
			Storage: &Storage{DType: ne.dt, Data: data[b:e:e]}}
		if err := t.check(); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", ne.name, err)
		}
		if nb := t.Numel() * int64(ne.dt.ElemSize()); nb != e-b {
			return nil, nil, fmt.Errorf("tensor %q: %d bytes for shape %v of %s", ne.name, e-b, shape, ne.e.DType)
		}
		out.Set(ne.name, t)
	}
	return out, meta, nil
}

func stDType(name string) (DType, error) {
	for d := Float32; d <= lastDType; d++ {
		if dtypes[d].st != "" && dtypes[d].st == name {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unsupported dtype %q", name)
}

// WriteSafetensors writes tensors (a dict of string keys to *Tensor) and metadata to
// path as a safetensors file, atomically like Write. Views are written as contiguous
// copies; tensors that share a storage are written separately, as the format has no
// sharing.
func WriteSafetensors(path string, tensors *Dict, metadata map[string]string) error {
	return atomicWrite(path, func(w io.Writer) error {
		return WriteSafetensorsTo(w, tensors, metadata)
	})
}

// WriteSafetensorsTo writes tensors and metadata to w in the safetensors format.
func WriteSafetensorsTo(w io.Writer, tensors *Dict, metadata map[string]string) error {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		m, err := json.Marshal(metadata)
		if err != nil {
			return fmt.Errorf("checkpoint: safetensors: %w", err)
		}
		sep()
		hdr.WriteString(`"__metadata__":`)
		hdr.Write(m)
	}
	var list []*Tensor
	var off int64
	for k, v := range tensors.All() {
		name, ok := k.(string)
		if !ok {
			return fmt.Errorf("checkpoint: safetensors: key %v is not a string", k)
		}
		t, ok := v.(*Tensor)
		if !ok || t == nil {
			return fmt.Errorf("checkpoint: safetensors: %q is a %s, not a tensor", name, describe(v))
		}
		tt := *t
		if tt.Strides == nil {
			tt.Strides = ContiguousStrides(tt.Shape)
		}
		if err := tt.check(); err != nil {
			return fmt.Errorf("checkpoint: safetensors: %q: %w", name, err)
		}
		if dtypes[tt.DType].st == "" {
			return fmt.Errorf("checkpoint: safetensors: %q: the format has no %v dtype", name, tt.DType)
		}
		n := tt.Numel() * int64(tt.DType.ElemSize())
		e, err := json.Marshal(stEntry{DType: dtypes[tt.DType].st, Shape: nonNilShape(tt.Shape), DataOffsets: [2]int64{off, off + n}})
		if err != nil {
			return err
		}
		nm, _ := json.Marshal(name)
		sep()
		hdr.Write(nm)
		hdr.WriteByte(':')
		hdr.Write(e)
		off += n
		list = append(list, &tt)
	}
	hdr.WriteByte('}')
	// Pad with spaces so that the data starts 8-byte aligned, as the reference writer does.
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	var hl [8]byte
	binary.LittleEndian.PutUint64(hl[:], uint64(hdr.Len()))
	if _, err := w.Write(hl[:]); err != nil {
		return fmt.Errorf("checkpoint: safetensors: %w", err)
	}
	if _, err := w.Write(hdr.Bytes()); err != nil {
		return fmt.Errorf("checkpoint: safetensors: %w", err)
	}
	for _, t := range list {
		if _, err := w.Write(t.Bytes()); err != nil {
			return fmt.Errorf("checkpoint: safetensors: %w", err)
		}
	}
	return nil
}

func nonNilShape(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}
