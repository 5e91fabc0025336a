package checkpoint

import (
	"fmt"
	"io"
	"math"
	"os"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// The default read budget for a file of n bytes: memory DefaultMemoryFixed +
// DefaultMemoryPerByte·n, work DefaultWorkFixed + DefaultWorkPerByte·n. Real checkpoints
// need about 2·n bytes (the tensor data and the pickle) and a few work units per byte.
const (
	DefaultMemoryFixed   = 16 << 20
	DefaultMemoryPerByte = 64
	DefaultWorkFixed     = 16 << 20
	DefaultWorkPerByte   = 64
	// DefaultMaxHeaderEntries bounds the entries (tensors and metadata keys) of a
	// safetensors header or index. Real files list at most tens of thousands: each
	// entry costs about 500 bytes once read, so the bound keeps a header of tiny
	// entries (up to 2 million fit in 100 MB) within about 128 MiB.
	DefaultMaxHeaderEntries = 1 << 18
)

// ReadOptions sets the resource budget of a read. The zero value is the default budget
// (see the package documentation); a caller that trusts a file whose structure needs
// more (millions of tiny values, heavy sharing) raises the limit the error names.
type ReadOptions struct {
	// MaxMemory bounds the bytes a read allocates (0: the default for the file's size).
	MaxMemory int64
	// MaxWork bounds the read's work, in units of about one byte processed: opcodes,
	// bytes copied, hashed or scanned, values visited (0: the default).
	MaxWork int64
	// MaxExpanded bounds the size, in bytes, that the value read would have if every
	// shared part (a value the pickle stores once and references many times) were
	// copied, as a program that walks the value as a tree sees it (0: MaxMemory; a
	// negative value: no bound, for a caller that walks shared values only once).
	MaxExpanded int64
	// MaxHeaderEntries bounds the entries of a safetensors header (tensors and
	// metadata keys) and of a sharded model's index (0: DefaultMaxHeaderEntries). The
	// entry past the bound is refused as soon as it is read.
	MaxHeaderEntries int64
	// HeadersOnly reads a safetensors file's header and not its data: the tensors come
	// back with their names, dtypes and shapes and no storage bytes (Storage.Data nil),
	// so that a model's sizes can be checked against its checkpoint before anything of
	// the size the header claims is allocated. The header's rules are checked as in a
	// full read.
	HeadersOnly bool
}

// LimitError reports an input refused because reading it would exceed its budget.
type LimitError struct {
	// What ran out: "memory", "work", "expanded size" or "header entries".
	What string
	// Max is the limit that applied; Option names the ReadOptions field that raises it.
	Max    int64
	Option string
}

// Error implements error.
func (e *LimitError) Error() string {
	return fmt.Sprintf("checkpoint: reading this file needs more %s than its budget of %d (raise ReadOptions.%s to read a trusted file)",
		e.What, e.Max, e.Option)
}

// budget counts what a read allocates and does; the first overrun is kept in err and
// every later charge is refused, so callers check it once per step.
type budget struct {
	mem, maxMem   int64
	work, maxWork int64
	maxExpanded   int64
	maxEntries    int64
	err           error
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

func (o ReadOptions) budget(size int64) *budget {
	size = max(size, 0)
	b := &budget{maxMem: o.MaxMemory, maxWork: o.MaxWork, maxExpanded: o.MaxExpanded, maxEntries: o.MaxHeaderEntries}
	if b.maxEntries <= 0 {
		b.maxEntries = DefaultMaxHeaderEntries
	}
	if b.maxMem <= 0 {
		b.maxMem = satAdd(DefaultMemoryFixed, satMul(DefaultMemoryPerByte, size))
	}
	if b.maxWork <= 0 {
		b.maxWork = satAdd(DefaultWorkFixed, satMul(DefaultWorkPerByte, size))
	}
	switch {
	case b.maxExpanded == 0:
		b.maxExpanded = b.maxMem
	case b.maxExpanded < 0:
		b.maxExpanded = math.MaxInt64
	}
	return b
}

// charge adds n to *used unless that exceeds max, in which case it records the
// overrun (what, the limit and its option) instead: what would exceed is not done.
func (b *budget) charge(used *int64, max, n int64, what, option string) error {
	if b.err == nil {
		if u := satAdd(*used, n); u > max {
			b.err = &LimitError{what, max, option}
		} else {
			*used = u
		}
	}
	return b.err
}

// alloc charges n bytes that are about to be allocated.
func (b *budget) alloc(n int64) error {
	if b == nil {
		return nil
	}
	return b.charge(&b.mem, b.maxMem, n, "memory", "MaxMemory")
}

// step charges n units of work.
func (b *budget) step(n int64) error {
	if b == nil {
		return nil
	}
	return b.charge(&b.work, b.maxWork, n, "work", "MaxWork")
}

// growCap is the capacity appendGrow gives a slice of len n, cap c that needs k more.
func growCap(n, c, k int) int { return max(2*c, n+k, 4) }

// appendGrow appends v to s, doubling its capacity when it is full. append grows large
// slices by 1.25x, which allocates 5 times the final size over a slice's growth;
// doubling allocates at most twice, and growCharge can charge it exactly.
func appendGrow[T any](s []T, v ...T) []T {
	if len(s)+len(v) > cap(s) {
		ns := make([]T, len(s), growCap(len(s), cap(s), len(v)))
		copy(ns, s)
		s = ns
	}
	return append(s, v...)
}

// growCharge charges what appendGrow allocates to add k elements of size elem to a
// slice of len n and cap c (with the allocator's size-class rounding).
func (b *budget) growCharge(n, c, k int, elem int64) error {
	if b == nil {
		return nil
	}
	if n+k <= c {
		return b.err
	}
	return b.alloc((int64(growCap(n, c, k))*elem*9)/8 + 16)
}

// openRegular opens path for reading through fsutil.Open, refusing anything but a
// regular file (after symlinks): opening a FIFO would block until a writer comes, and a
// device such as /dev/zero has no size to budget by.
func openRegular(path string) (*os.File, int64, error) {
	f, size, err := fsutil.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("checkpoint: %w", err)
	}
	return f, size, nil
}

// Read loads the checkpoint at path within the budget o sets. path must name a
// regular file (or a symlink to one).
func (o ReadOptions) Read(path string) (any, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := o.ReadFrom(f, size)
	if err != nil {
		return nil, fmt.Errorf("%w (reading %s)", err, path)
	}
	return v, nil
}

// ReadFrom loads a checkpoint of size bytes from r within the budget o sets.
func (o ReadOptions) ReadFrom(r io.ReaderAt, size int64) (any, error) {
	v, _, err := readFrom(r, size, o.budget(size))
	return v, err
}

// ReadSafetensors reads a safetensors file within the budget o sets. path must name a
// regular file (or a symlink to one).
func (o ReadOptions) ReadSafetensors(path string) (*Dict, map[string]string, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	d, meta, err := o.ReadSafetensorsFrom(f, size)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (reading %s)", err, path)
	}
	return d, meta, nil
}

// ReadSafetensorsFrom reads a safetensors file of size bytes from r within the budget o
// sets.
func (o ReadOptions) ReadSafetensorsFrom(r io.ReaderAt, size int64) (*Dict, map[string]string, error) {
	d, meta, err := readSafetensors(r, size, o.budget(size), o.HeadersOnly, nil)
	if err != nil {
		if _, ok := err.(*LimitError); ok {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("checkpoint: safetensors: %w", err)
	}
	return d, meta, nil
}

// heapSize is what Go's allocator takes for an object of n bytes: n rounded up to its
// size class (at most an eighth more) when small, to whole 8 KiB pages when large. A
// charge for an allocation whose size the input doubles at every level (a key of
// nested shared tuples) must count the rounding too, or it adds up past the budget.
func heapSize(n int64) int64 {
	if n <= 32<<10 {
		return n + n/8 + 16
	}
	return satAdd(n, 8191) &^ 8191
}

// Mapping holds the memory maps of the files that MapSafetensors or MapSafetensorsDir
// read: the bytes of the tensors they return. Close unmaps them and empties those
// tensors' storages (Storage.Data nil), so a tensor used after Close fails as one
// without bytes instead of reading unmapped memory.
type Mapping struct {
	maps     [][]byte
	storages []*Storage
}

// Close releases the maps; it may be called more than once.
func (m *Mapping) Close() error {
	if m == nil {
		return nil
	}
	for _, s := range m.storages {
		s.Data = nil
	}
	var first error
	for _, b := range m.maps {
		if err := unmapFile(b); err != nil && first == nil {
			first = err
		}
	}
	m.maps, m.storages = nil, nil
	return first
}

// MapSafetensors reads the safetensors file at path within the budget o sets, as
// ReadSafetensors does (every rule of the header, offsets and sizes is checked before
// any data is touched), but maps the file read-only into memory instead of reading its
// data: the tensors' bytes are the file's pages, outside Go's heap, until the Mapping
// is closed. A file that cannot be mapped is an error naming it. The file must not be
// truncated while it is mapped (reading a page past its new end is a fatal SIGBUS, as
// with any memory map; a file replaced by a rename, as gotrain's writers replace files,
// keeps its old pages).
func (o ReadOptions) MapSafetensors(path string) (*Dict, map[string]string, *Mapping, error) {
	m := &Mapping{}
	d, meta, err := o.mapSafetensors(path, m)
	if err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	return d, meta, m, nil
}

// mapSafetensors is MapSafetensors adding the file's map and storages to m.
func (o ReadOptions) mapSafetensors(path string, m *Mapping) (*Dict, map[string]string, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	mapped := func(off, n int64) ([]byte, error) {
		b, err := mapFile(f, size)
		if err != nil {
			return nil, fmt.Errorf("mapping %s into memory: %w", path, err)
		}
		m.maps = append(m.maps, b)
		if int64(len(b)) != size {
			return nil, fmt.Errorf("mapping %s into memory: %d bytes mapped of %d", path, len(b), size)
		}
		return b[off : off+n : off+n], nil
	}
	d, meta, err := readSafetensors(f, size, o.budget(size), o.HeadersOnly, mapped)
	if err != nil {
		if _, ok := err.(*LimitError); !ok {
			err = fmt.Errorf("checkpoint: safetensors: %w", err)
		}
		return nil, nil, fmt.Errorf("%w (reading %s)", err, path)
	}
	for _, v := range d.All() {
		if t, ok := v.(*Tensor); ok && t.Storage != nil {
			m.storages = append(m.storages, t.Storage)
		}
	}
	return d, meta, nil
}
