package checkpoint

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// maxSafetensorsHeader is the header size limit of the reference implementation (the
// Rust crate's MAX_HEADER_SIZE, 100 MB).
const maxSafetensorsHeader = 100_000_000

// maxSafetensorsName bounds a tensor's name and a metadata key, in bytes: real names
// are tens of bytes, and a name is refused as soon as its bytes pass the limit.
const maxSafetensorsName = 1 << 16

// maxSafetensorsRank bounds a safetensors tensor's number of dimensions.
const maxSafetensorsRank = 1024

// stEntryCost is what a header entry costs in memory once read (its tensor, storage,
// slots in the name set, the entry list and the Dict) besides its name and shape.
const stEntryCost = 512

type stEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// ReadSafetensors reads a safetensors file: a flat dict of named tensors, in file order,
// and the header's string metadata (nil when absent), within the default budget.
func ReadSafetensors(path string) (*Dict, map[string]string, error) {
	return ReadOptions{}.ReadSafetensors(path)
}

// ReadSafetensorsFrom reads a safetensors file of size bytes from r. Every tensor must
// lie inside the data area, which the tensors must cover exactly, as the format requires.
// A header that names a tensor twice is refused (JSON readers differ on which one wins).
//
// The header (at most 100 MB, as in the reference implementation) is read as a stream
// and checked value by value: a name longer than 64 KiB, a shape of more than 1024
// dimensions, a number that is not a non-negative int64, an unknown field or more
// entries than ReadOptions.MaxHeaderEntries is refused as soon as it is read, so a
// hostile header costs neither the memory nor the time of decoding it whole.
func ReadSafetensorsFrom(r io.ReaderAt, size int64) (*Dict, map[string]string, error) {
	return ReadOptions{}.ReadSafetensorsFrom(r, size)
}

// stTensor is a header entry: its tensor's storage gets its data once the header has
// been checked as a whole.
type stTensor struct {
	name       string
	t          *Tensor
	begin, end int64
}

// stParser reads a safetensors header and applies the format's rules entry by entry.
type stParser struct {
	s       *jsonScanner
	b       *budget
	dataLen int64 // bytes after the header
	tensors []stTensor
	seen    map[string]struct{}
	meta    map[string]string
	hasMeta bool
	entries int64
	dims    []int64 // scratch for a shape being read
}

// stData supplies the n bytes of a safetensors file's data area, which begins at byte
// off of the file, in memory that is not Go's heap (a memory map of the file):
// readSafetensors calls it once the header has been checked, instead of reading the
// data into a buffer of its own.
type stData func(off, n int64) ([]byte, error)

// readSafetensors reads a safetensors file of size bytes from r: its header, checked
// whole, and then its data (none when headersOnly), read into one buffer or, when
// mapped is not nil, taken from mapped (a memory map, not charged to b).
func readSafetensors(r io.ReaderAt, size int64, b *budget, headersOnly bool, mapped stData) (*Dict, map[string]string, error) {
	var hl [8]byte
	if size < 8 {
		return nil, nil, errors.New("file too short")
	}
	if err := readAt(r, hl[:], 0); err != nil {
		return nil, nil, err
	}
	n := binary.LittleEndian.Uint64(hl[:])
	if n > uint64(size-8) {
		// Not a number to print: the first 8 bytes of a file that is not safetensors
		// (a text file's first characters).
		return nil, nil, fmt.Errorf("not a safetensors file: its first 8 bytes, the header length, give more than the file's %d bytes", size)
	}
	if n > maxSafetensorsHeader {
		return nil, nil, fmt.Errorf("a header of %d bytes is more than the %d a safetensors header may have", n, maxSafetensorsHeader)
	}
	// Reading the header: a few units of work per byte, and the scanner's buffer.
	if err := b.step(4 * int64(n)); err != nil {
		return nil, nil, err
	}
	if err := b.alloc(2 * scanBuffer); err != nil {
		return nil, nil, err
	}
	p := &stParser{s: newJSONScanner(io.NewSectionReader(r, 8, int64(n))), b: b,
		dataLen: size - 8 - int64(n), seen: map[string]struct{}{}}
	if err := p.header(); err != nil {
		if b != nil && b.err != nil {
			return nil, nil, b.err
		}
		return nil, nil, err
	}
	// By offsets, as the reference implementation sorts them: an empty tensor at the
	// offset where another begins comes first, whatever the names.
	entries := p.tensors
	slices.SortFunc(entries, func(a, b stTensor) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end), strings.Compare(a.name, b.name))
	})
	var end int64
	for _, e := range entries {
		if e.begin != end {
			return nil, nil, fmt.Errorf("tensor %s: data_offsets [%d, %d] leave a gap or overlap another tensor", cutName(e.name), e.begin, e.end)
		}
		end = e.end
	}
	if end != p.dataLen {
		return nil, nil, fmt.Errorf("%d bytes of data after the last tensor", p.dataLen-end)
	}
	if headersOnly {
		out := NewDict()
		for _, e := range entries {
			e.t.Storage.pending = 0
			out.Set(e.name, e.t)
		}
		return out, p.meta, nil
	}
	var data []byte
	if mapped != nil {
		var err error
		if data, err = mapped(8+int64(n), p.dataLen); err != nil {
			return nil, nil, err
		}
		if int64(len(data)) != p.dataLen {
			return nil, nil, fmt.Errorf("internal error: %d bytes of data mapped for %d", len(data), p.dataLen)
		}
	} else {
		if err := b.alloc(p.dataLen); err != nil {
			return nil, nil, err
		}
		data = make([]byte, p.dataLen)
		if err := readAt(r, data, 8+int64(n)); err != nil {
			return nil, nil, err
		}
	}
	out := NewDict()
	for _, e := range entries {
		e.t.Storage.Data, e.t.Storage.pending = data[e.begin:e.end:e.end], 0
		out.Set(e.name, e.t)
	}
	return out, p.meta, nil
}

// header reads the header object: tensor entries and __metadata__, in any order.
func (p *stParser) header() error {
	s := p.s
	empty, err := s.open('{', "a JSON object")
	if err != nil {
		return headerErr(err)
	}
	for more := !empty; more; {
		name, err := readKey(s, p.seen)
		if errors.Is(err, errLong) {
			return fmt.Errorf("header: a name of more than %d bytes at byte %d", maxSafetensorsName, s.off)
		}
		if err != nil {
			return headerErr(err)
		}
		if err := p.count(int64(len(name))); err != nil {
			return err
		}
		p.seen[name] = struct{}{}
		if err := s.expect(':', "':'"); err != nil {
			return headerErr(err)
		}
		if name == "__metadata__" {
			err = p.metadata()
		} else {
			err = p.entry(name)
		}
		if err != nil {
			return err
		}
		if more, err = s.commaOr('}'); err != nil {
			return headerErr(err)
		}
	}
	if err := s.end(); err != nil {
		return headerErr(err)
	}
	return nil
}

func headerErr(err error) error { return fmt.Errorf("header: %w", err) }

// readKey reads an object's next key, a name of at most maxSafetensorsName bytes, and
// refuses one that is already a key of seen ("NAME appears twice").
func readKey[V any](s *jsonScanner, seen map[string]V) (string, error) {
	b, err := s.readString(maxSafetensorsName)
	if err != nil {
		return "", err
	}
	key := string(b)
	if _, dup := seen[key]; dup {
		return "", fmt.Errorf("%s appears twice", cutName(key))
	}
	return key, nil
}

// count charges one more header entry (a tensor or a metadata key) of the given name
// length, refusing the one past ReadOptions.MaxHeaderEntries.
func (p *stParser) count(nameLen int64) error {
	p.entries++
	if p.b != nil && p.entries > p.b.maxEntries {
		p.b.err = &LimitError{"header entries", p.b.maxEntries, "MaxHeaderEntries"}
		return p.b.err
	}
	return p.b.alloc(stEntryCost + 2*nameLen)
}

// metadata reads __metadata__: null, or an object of strings.
func (p *stParser) metadata() error {
	s := p.s
	if p.hasMeta {
		return errors.New("header: __metadata__ appears twice")
	}
	p.hasMeta = true
	if c, err := s.peek(); err == nil && c == 'n' {
		if err := s.literal("null"); err != nil {
			return fmt.Errorf("__metadata__: %w", err)
		}
		return nil
	}
	empty, err := s.open('{', "an object")
	if err != nil {
		return fmt.Errorf("__metadata__: %w", err)
	}
	p.meta = map[string]string{}
	for more := !empty; more; {
		key, err := readKey(s, p.meta)
		if err != nil {
			return fmt.Errorf("__metadata__: %w", err)
		}
		if err := s.expect(':', "':'"); err != nil {
			return fmt.Errorf("__metadata__: %w", err)
		}
		vb, err := s.readString(math.MaxInt)
		if err != nil {
			return fmt.Errorf("__metadata__ %s: %w", cutName(key), err)
		}
		if err := p.count(int64(len(key) + len(vb))); err != nil {
			return err
		}
		p.meta[key] = string(vb)
		if more, err = s.commaOr('}'); err != nil {
			return fmt.Errorf("__metadata__: %w", err)
		}
	}
	return nil
}

// entry reads one tensor's object and checks it against the data area.
func (p *stParser) entry(name string) error {
	s := p.s
	fail := func(err error) error { return fmt.Errorf("tensor %s: %w", cutName(name), err) }
	empty, err := s.open('{', "an object")
	if err != nil {
		return fail(err)
	}
	var (
		dt         DType
		shape      []int64
		offs       [2]int64
		have       [3]bool
		fieldNames = [3]string{"dtype", "shape", "data_offsets"}
	)
	for more := !empty; more; {
		fb, err := s.readString(32)
		if errors.Is(err, errLong) {
			return fail(errors.New("unknown field"))
		}
		if err != nil {
			return fail(err)
		}
		i := slices.Index(fieldNames[:], string(fb))
		if i < 0 {
			return fail(fmt.Errorf("unknown field %s", cutName(string(fb))))
		}
		if have[i] {
			return fail(fmt.Errorf("%s appears twice", fieldNames[i]))
		}
		have[i] = true
		if err := s.expect(':', "':'"); err != nil {
			return fail(err)
		}
		switch i {
		case 0:
			db, err := s.readString(16)
			if err != nil {
				return fail(fmt.Errorf("dtype: %w", err))
			}
			if dt, err = stDType(string(db)); err != nil {
				return fail(err)
			}
		case 1:
			if shape, err = p.shape(); err != nil {
				return fail(err)
			}
		case 2:
			if offs, err = p.offsets(); err != nil {
				return fail(err)
			}
		}
		if more, err = s.commaOr('}'); err != nil {
			return fail(err)
		}
	}
	for i, ok := range have {
		if !ok {
			return fail(fmt.Errorf("no %s", fieldNames[i]))
		}
	}
	begin, end := offs[0], offs[1]
	if begin > end {
		return fail(fmt.Errorf("data_offsets [%d, %d] end before they begin", begin, end))
	}
	if end > p.dataLen {
		return fail(fmt.Errorf("data_offsets [%d, %d] exceed the %d bytes of data", begin, end, p.dataLen))
	}
	t := &Tensor{DType: dt, Shape: shape, Strides: ContiguousStrides(shape),
		Storage: &Storage{DType: dt, pending: end - begin}}
	if err := t.check(); err != nil {
		return fail(err)
	}
	if nb := t.Numel() * int64(dt.ElemSize()); nb != end-begin {
		return fail(fmt.Errorf("%d bytes for shape %v of %s", end-begin, shape, dtypes[dt].st))
	}
	if err := p.b.growCharge(len(p.tensors), cap(p.tensors), 1, 40); err != nil {
		return err
	}
	p.tensors = appendGrow(p.tensors, stTensor{name, t, begin, end})
	return nil
}

// shape reads a shape, refusing the dimension past maxSafetensorsRank when it arrives.
func (p *stParser) shape() ([]int64, error) {
	empty, err := p.s.open('[', "an array")
	if err != nil {
		return nil, fmt.Errorf("shape: %w", err)
	}
	dims := p.dims[:0]
	for more := !empty; more; {
		if len(dims) == maxSafetensorsRank {
			return nil, fmt.Errorf("shape of more than %d dimensions", maxSafetensorsRank)
		}
		d, err := p.s.readUint()
		if err != nil {
			return nil, fmt.Errorf("shape: %w", err)
		}
		dims = append(dims, d)
		if more, err = p.s.commaOr(']'); err != nil {
			return nil, fmt.Errorf("shape: %w", err)
		}
	}
	p.dims = dims
	if err := p.b.alloc(16*int64(len(dims)) + 32); err != nil {
		return nil, err
	}
	return slices.Clone(dims), nil
}

// offsets reads data_offsets: exactly two integers.
func (p *stParser) offsets() ([2]int64, error) {
	var o [2]int64
	bad := errors.New("data_offsets: want [begin, end]")
	empty, err := p.s.open('[', "an array")
	if err != nil {
		return o, fmt.Errorf("data_offsets: %w", err)
	}
	if empty {
		return o, bad
	}
	for i := range 2 {
		if o[i], err = p.s.readUint(); err != nil {
			return o, fmt.Errorf("data_offsets: %w", err)
		}
		more, err := p.s.commaOr(']')
		if err != nil {
			return o, fmt.Errorf("data_offsets: %w", err)
		}
		if more != (i == 0) {
			return o, bad
		}
	}
	return o, nil
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
	return fsutil.WriteAtomic(path, func(w io.Writer) error {
		return WriteSafetensorsTo(w, tensors, metadata)
	})
}

// WriteSafetensorsTo writes tensors and metadata to w in the safetensors format.
func WriteSafetensorsTo(w io.Writer, tensors *Dict, metadata map[string]string) error {
	var specs []TensorSpec
	var list []*Tensor
	for k, v := range tensors.All() {
		name, tt, err := stTensorOf(k, v)
		if err != nil {
			return err
		}
		specs = append(specs, TensorSpec{Name: name, DType: tt.DType, Shape: tt.Shape})
		list = append(list, tt)
	}
	if err := writeSafetensorsHeader(w, specs, metadata); err != nil {
		return err
	}
	for _, t := range list {
		if err := writeSafetensorsData(w, t); err != nil {
			return err
		}
	}
	return nil
}

// writeSafetensorsHeader writes the header of a safetensors file that holds tensors of
// specs, in that order, and metadata: the data of each tensor is to follow, in the same
// order (writeSafetensorsData).
func writeSafetensorsHeader(w io.Writer, specs []TensorSpec, metadata map[string]string) error {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
	}
	for k, v := range metadata {
		// encoding/json would write U+FFFD for invalid UTF-8: a different string.
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("checkpoint: safetensors: metadata %s is not valid UTF-8", cutName(k))
		}
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
	var off int64
	for _, sp := range specs {
		n := sp.bytes()
		e, err := json.Marshal(stEntry{DType: dtypes[sp.DType].st, Shape: nonNilShape(sp.Shape), DataOffsets: [2]int64{off, off + n}})
		if err != nil {
			return err
		}
		nm, _ := json.Marshal(sp.Name)
		sep()
		hdr.Write(nm)
		hdr.WriteByte(':')
		hdr.Write(e)
		off += n
	}
	hdr.WriteByte('}')
	// Pad with spaces so that the data starts 8-byte aligned, as the reference writer does.
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	if hdr.Len() > maxSafetensorsHeader {
		return fmt.Errorf("checkpoint: safetensors: a header of %d bytes (readers refuse more than %d)", hdr.Len(), maxSafetensorsHeader)
	}
	var hl [8]byte
	binary.LittleEndian.PutUint64(hl[:], uint64(hdr.Len()))
	if _, err := w.Write(hl[:]); err != nil {
		return fmt.Errorf("checkpoint: safetensors: %w", err)
	}
	if _, err := w.Write(hdr.Bytes()); err != nil {
		return fmt.Errorf("checkpoint: safetensors: %w", err)
	}
	return nil
}

// writeSafetensorsData writes t's elements, row-major, as a safetensors file holds them.
func writeSafetensorsData(w io.Writer, t *Tensor) error {
	b, err := t.ReadBytes()
	if err != nil {
		return fmt.Errorf("checkpoint: safetensors: %w", err)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("checkpoint: safetensors: %w", err)
	}
	return nil
}

// stTensorOf checks one entry of a dict to be written as safetensors and returns its
// name and tensor (with strides, when the tensor had none).
func stTensorOf(k, v any) (string, *Tensor, error) {
	name, ok := k.(string)
	if !ok {
		return "", nil, fmt.Errorf("checkpoint: safetensors: key %v is not a string", k)
	}
	if err := stCheckName(name); err != nil {
		return "", nil, err
	}
	t, ok := v.(*Tensor)
	if !ok || t == nil {
		return "", nil, fmt.Errorf("checkpoint: safetensors: %s is a %s, not a tensor", cutName(name), describe(v))
	}
	tt := *t
	if tt.Strides == nil {
		tt.Strides = ContiguousStrides(tt.Shape)
	}
	if err := tt.check(); err != nil {
		return "", nil, fmt.Errorf("checkpoint: safetensors: %s: %w", cutName(name), err)
	}
	if _, err := tt.viewSize(int64(tt.DType.ElemSize())); err != nil {
		return "", nil, fmt.Errorf("checkpoint: safetensors: %s: %w", cutName(name), err)
	}
	if dtypes[tt.DType].st == "" {
		return "", nil, fmt.Errorf("checkpoint: safetensors: %s: the format has no %v dtype", cutName(name), tt.DType)
	}
	return name, &tt, nil
}

// stCheckName refuses a tensor name that readers refuse.
func stCheckName(name string) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("checkpoint: safetensors: name %s is not valid UTF-8", cutName(name))
	}
	if name == "__metadata__" || len(name) > maxSafetensorsName {
		return fmt.Errorf("checkpoint: safetensors: a tensor cannot be named %s (readers refuse it)", cutName(name))
	}
	return nil
}

func nonNilShape(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}
