package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// maxSafetensorsRank bounds a safetensors tensor's number of dimensions.
const maxSafetensorsRank = 1024

// ReadSafetensors reads a safetensors file: a flat dict of named tensors, in file order,
// and the header's string metadata (nil when absent), within the default budget.
func ReadSafetensors(path string) (*Dict, map[string]string, error) {
	return ReadOptions{}.ReadSafetensors(path)
}

// ReadSafetensorsFrom reads a safetensors file of size bytes from r. Every tensor must
// lie inside the data area, which the tensors must cover exactly, as the format requires.
// A header that names a tensor twice is refused (JSON readers differ on which one wins).
func ReadSafetensorsFrom(r io.ReaderAt, size int64) (*Dict, map[string]string, error) {
	return ReadOptions{}.ReadSafetensorsFrom(r, size)
}

func readSafetensors(r io.ReaderAt, size int64, b *budget) (*Dict, map[string]string, error) {
	var hl [8]byte
	if size < 8 {
		return nil, nil, errors.New("file too short")
	}
	if err := readAt(r, hl[:], 0); err != nil {
		return nil, nil, err
	}
	n := binary.LittleEndian.Uint64(hl[:])
	if n > maxSafetensorsHeader || int64(n) > size-8 {
		return nil, nil, fmt.Errorf("header length %d is invalid for a file of %d bytes", n, size)
	}
	// The header, the decoder's buffer (grown by doubling) and the raw values.
	if err := b.alloc(8 * int64(n)); err != nil {
		return nil, nil, err
	}
	if err := b.step(4 * int64(n)); err != nil {
		return nil, nil, err
	}
	hdr := make([]byte, n)
	if err := readAt(r, hdr, 8); err != nil {
		return nil, nil, err
	}
	type named struct {
		name string
		e    stEntry
		dt   DType
	}
	var meta map[string]string
	var entries []named
	seen := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, errors.New("header: not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("header: %w", err)
		}
		name := t.(string) // object keys are strings
		var msg json.RawMessage
		if err := dec.Decode(&msg); err != nil {
			return nil, nil, fmt.Errorf("header: %w", err)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("header: %q appears twice", name)
		}
		seen[name] = true
		// A decoder per entry (for DisallowUnknownFields), the entry and its dict slot.
		if err := b.alloc(2048 + 32*int64(len(msg)+len(name))); err != nil {
			return nil, nil, err
		}
		if err := b.step(256 + 4*int64(len(msg)+len(name))); err != nil {
			return nil, nil, err
		}
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, fmt.Errorf("__metadata__: %w", err)
			}
			continue
		}
		var e stEntry
		d := json.NewDecoder(bytes.NewReader(msg))
		d.DisallowUnknownFields()
		if err := d.Decode(&e); err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		if len(e.Shape) > maxSafetensorsRank {
			return nil, nil, fmt.Errorf("tensor %q: %d dimensions (at most %d)", name, len(e.Shape), maxSafetensorsRank)
		}
		dt, err := stDType(e.DType)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		entries = append(entries, named{name, e, dt})
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, fmt.Errorf("header: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("header: data after the JSON object")
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
	if err := b.alloc(dataLen + int64(len(entries))*(tensorCost+storageCost)); err != nil {
		return nil, nil, err
	}
	data := make([]byte, dataLen)
	if err := readAt(r, data, dataStart); err != nil {
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
		if _, err := tt.viewSize(int64(tt.DType.ElemSize())); err != nil {
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
		b, err := t.ReadBytes()
		if err != nil {
			return fmt.Errorf("checkpoint: safetensors: %w", err)
		}
		if _, err := w.Write(b); err != nil {
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
