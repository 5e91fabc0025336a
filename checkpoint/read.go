package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// maxPickle bounds data.pkl and a legacy file's pickles; real ones are kilobytes to a
// few megabytes.
const maxPickle = 1 << 30

// Read loads the checkpoint at path (a torch.save file, zip or legacy format) within the
// default budget (see the package documentation and ReadOptions). See the package
// documentation for the Go types of the result.
func Read(path string) (any, error) { return ReadOptions{}.Read(path) }

// ReadFrom loads a checkpoint of size bytes from r within the default budget.
// Malformed input is an error, never a panic.
func ReadFrom(r io.ReaderAt, size int64) (any, error) { return ReadOptions{}.ReadFrom(r, size) }

// readFrom reads a checkpoint, charging b; it also returns how much of b it used, for
// the tests that check the budget.
func readFrom(r io.ReaderAt, size int64, b *budget) (v any, used *budget, err error) {
	defer func() {
		// The reader is written not to panic; this turns a bug into an error rather
		// than a crash of a service that reads untrusted files.
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("checkpoint: internal error reading checkpoint: %v", p)
		}
	}()
	var magic [4]byte
	if size < 4 || readAt(r, magic[:], 0) != nil {
		return nil, b, errors.New("checkpoint: file too short to be a checkpoint")
	}
	if string(magic[:]) == "PK\x03\x04" {
		v, err = readZip(r, size, b)
	} else {
		v, err = readLegacy(r, size, b)
	}
	if b.err != nil {
		// Whatever failed after the budget ran out, the budget is the reason.
		return nil, b, b.err
	}
	if err != nil && !strings.HasPrefix(err.Error(), "checkpoint: ") {
		err = fmt.Errorf("checkpoint: %w", err)
	}
	return v, b, err
}

// foldName is a record name as torch's reader compares it: miniz matches names with
// ASCII case folded.
func foldName(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// Torch's reader accepts file format versions 1 to 10 (torch 2.14; torch.save writes 3).
const maxFormatVersion = 10

// zipRecords indexes the records of a torch.save archive by their folded name below
// the root folder, refusing what torch would read differently or not at all.
func zipRecords(entries []zipEntry) (map[string]*zipEntry, error) {
	if len(entries) == 0 {
		return nil, errors.New("empty zip archive")
	}
	root, _, ok := strings.Cut(entries[0].name, "/")
	if !ok {
		return nil, errors.New("zip entries are not in a root folder, not a torch.save file")
	}
	files := make(map[string]*zipEntry, len(entries)) // charged by readZipDir
	for i := range entries {
		e := &entries[i]
		name, ok := strings.CutPrefix(e.name, root+"/")
		if !ok {
			return nil, fmt.Errorf("zip entry %q is outside the root folder %q", e.name, root)
		}
		// torch looks records up by a binary search over case-folded names; which of
		// two equal names it finds depends on the search, so a file with both is refused.
		key := foldName(name)
		if prev, ok := files[key]; ok {
			return nil, fmt.Errorf("zip entries %q and %q have the same name to torch (it would read one of them): refusing the file", prev.name, e.name)
		}
		files[key] = e
	}
	return files, nil
}

func readZip(r io.ReaderAt, size int64, b *budget) (any, error) {
	entries, err := readZipDir(r, size, b)
	if err != nil {
		return nil, fmt.Errorf("not a valid zip archive: %w", err)
	}
	files, err := zipRecords(entries)
	if err != nil {
		return nil, err
	}
	if _, ok := files["constants.pkl"]; ok {
		return nil, errors.New("this is a TorchScript archive (torch.jit.save), not a torch.save checkpoint")
	}
	vf, ok := files[".data/version"]
	if !ok {
		vf, ok = files["version"]
	}
	if !ok {
		return nil, errors.New("no version record (torch refuses such files)")
	}
	vb, err := readRecord(r, vf, 64, b)
	if err != nil {
		return nil, fmt.Errorf("version: %w", err)
	}
	if v, ok := parseVersion(vb); !ok || v < 1 || v > maxFormatVersion {
		return nil, fmt.Errorf("unsupported file format version %q", vb)
	}
	pf, ok := files["data.pkl"]
	if !ok {
		return nil, errors.New("no data.pkl record")
	}
	bigEndian := false
	if bf, ok := files["byteorder"]; ok {
		b, err := readRecord(r, bf, 16, b)
		if err != nil {
			return nil, fmt.Errorf("byteorder: %w", err)
		}
		switch string(b) {
		case "little":
		case "big":
			bigEndian = true
		default:
			return nil, fmt.Errorf("unknown byteorder %q", b)
		}
	}
	pkl, err := readRecord(r, pf, maxPickle, b)
	if err != nil {
		return nil, fmt.Errorf("data.pkl: %w", err)
	}
	storages := map[string]*Storage{}
	fetch := newFetcher(r)
	// Also on a panic, which readFrom turns into an error: no read may still use r
	// once the read returns.
	defer fetch.wg.Wait()
	persist := func(pid Tuple) (any, error) {
		dt, key, numel, err := parsePID(pid, 5)
		if err != nil {
			return nil, err
		}
		untyped := dt == 0 // torch.storage.UntypedStorage: numel counts bytes
		if untyped {
			dt = Uint8
		}
		if s, ok := storages[key]; ok {
			if s.untyped != untyped || (untyped && int64(len(s.Data)) != numel) || (!untyped && (s.DType != dt || s.Numel() != numel)) {
				return nil, fmt.Errorf("storage %q used as both %v[%d] and %v[%d]", key, s.DType, s.Numel(), dt, numel)
			}
			return s, nil
		}
		if untyped && bigEndian {
			return nil, fmt.Errorf("storage data/%s: big-endian untyped storages are not supported", printable(key))
		}
		f, ok := files[foldName("data/"+key)]
		if !ok {
			return nil, fmt.Errorf("storage record data/%s is missing", printable(key))
		}
		nbytes, ok := storageBytes(dt, numel)
		if !ok || uint64(nbytes) != f.size {
			return nil, fmt.Errorf("storage data/%s holds %d bytes; %d %v elements need %d",
				printable(key), f.size, numel, dt, nbytes)
		}
		if err := b.alloc(storageCost); err != nil {
			return nil, err
		}
		name := "data/" + printable(key)
		if err := checkRecord(f, nbytes, b); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		s := &Storage{DType: dt, Key: key, untyped: untyped}
		if untyped {
			// The unpickler sizes an untyped storage's tensor by len(Data): read it now.
			s.Data = make([]byte, f.size)
			if err := readAt(r, s.Data, f.dataOff); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		} else {
			swap := 1
			if bigEndian {
				swap = dt.wordSize()
			}
			s.pending = nbytes
			fetch.start(s, f, swap, name)
		}
		storages[key] = s
		return s, nil
	}
	v, err := newUnpickler(pkl, persist, b).load()
	if ferr := fetch.wait(); err == nil {
		err = ferr
	}
	if err == errTruncated {
		return nil, errors.New("data.pkl: pickle data truncated")
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// fetcher reads storage records on up to GOMAXPROCS goroutines while the pickle is
// still being unpickled. Copying the data out of the page cache (and clearing the
// memory it lands in) is nearly all of a large read's time; io.ReaderAt allows parallel
// calls, so the copies of a multi-core machine's cores add up. Everything the budget
// and the bounds checks refuse is refused before a record is handed to it.
type fetcher struct {
	r io.ReaderAt
	// noZero is set when r is an *os.File: pread(2) writes every byte it reports,
	// so the buffers it fills need not be cleared first. Another ReaderAt that
	// reported bytes it did not write would expose stale memory; those get make's.
	noZero bool
	sem    chan struct{}
	wg     sync.WaitGroup
	jobs   []*fetchJob
}

// fetchJob is one storage record being read; its worker owns data until wait returns,
// so the unpickler (which sizes the storage by its pending bytes) never sees it change.
type fetchJob struct {
	s    *Storage
	e    *zipEntry
	swap int
	name string
	data []byte
	err  error
}

func newFetcher(r io.ReaderAt) *fetcher {
	_, isFile := r.(*os.File)
	return &fetcher{r: r, noZero: isFile, sem: make(chan struct{}, max(runtime.GOMAXPROCS(0), 1))}
}

// start reads e's bytes (byte-swapping words of swap bytes) for s in the background.
func (f *fetcher) start(s *Storage, e *zipEntry, swap int, name string) {
	j := &fetchJob{s: s, e: e, swap: swap, name: name}
	f.jobs = append(f.jobs, j)
	f.sem <- struct{}{}
	f.wg.Add(1)
	go func() {
		defer func() {
			// As readFrom does for the rest of the reader: a bug (or a panicking
			// ReaderAt) is an error, not a crash.
			if p := recover(); p != nil {
				j.data, j.err = nil, fmt.Errorf("checkpoint: internal error reading %s: %v", name, p)
			}
			<-f.sem
			f.wg.Done()
		}()
		var data []byte
		if f.noZero {
			data = makeNoZero(int(e.size))
		} else {
			data = make([]byte, e.size)
		}
		if err := readAt(f.r, data, e.dataOff); err != nil {
			j.err = fmt.Errorf("%s: %w", name, err)
			return
		}
		swapBytes(data, swap)
		j.data = data
	}()
}

// wait waits for every read started and, when all succeeded, gives the storages their
// data; otherwise it returns the first failed record's error, in pickle order.
func (f *fetcher) wait() error {
	f.wg.Wait()
	for _, j := range f.jobs {
		if j.err != nil {
			return j.err
		}
	}
	for _, j := range f.jobs {
		j.s.Data, j.s.pending = j.data, 0
	}
	return nil
}

// storageCost is what a Storage and its map entry cost besides the data.
const storageCost = 160

// parseVersion parses a version record as torch does (std::stoull: leading white space,
// then decimal digits; what follows them is ignored).
func parseVersion(b []byte) (uint64, bool) {
	s := strings.TrimLeft(string(b), " \t\n\v\f\r")
	n, digits := uint64(0), 0
	for digits < len(s) && '0' <= s[digits] && s[digits] <= '9' && digits < 18 {
		n = n*10 + uint64(s[digits]-'0')
		digits++
	}
	return n, digits > 0
}

// storageBytes returns numel*elemsize, or false when it overflows.
func storageBytes(dt DType, numel int64) (int64, bool) {
	es := int64(dt.ElemSize())
	if numel < 0 || numel > math.MaxInt64/es {
		return 0, false
	}
	return numel * es, true
}

// parsePID decodes ('storage', StorageType, key, location, numel[, view_metadata]).
func parsePID(pid Tuple, n int) (DType, string, int64, error) {
	if len(pid) != n || pid[0] != "storage" {
		return 0, "", 0, fmt.Errorf("unsupported persistent id (want a %d-tuple starting with 'storage')", n)
	}
	st, ok := pid[1].(storageType)
	if !ok {
		return 0, "", 0, fmt.Errorf("persistent id names a %s, not a storage class", typeName(pid[1]))
	}
	key, ok := pid[2].(string)
	if !ok {
		return 0, "", 0, errors.New("persistent id key is not a string")
	}
	if _, ok := pid[3].(string); !ok {
		return 0, "", 0, errors.New("persistent id location is not a string")
	}
	numel, ok := pid[4].(int64)
	if !ok || numel < 0 {
		return 0, "", 0, errors.New("persistent id size is not a non-negative int")
	}
	return st.dtype, key, numel, nil
}

// readRecord returns a stored zip record's bytes, refusing records larger than limit.
// readZipDir has checked that the record lies inside the file.
func readRecord(r io.ReaderAt, f *zipEntry, limit int64, b *budget) ([]byte, error) {
	if err := checkRecord(f, limit, b); err != nil {
		return nil, err
	}
	buf := make([]byte, f.size)
	if err := readAt(r, buf, f.dataOff); err != nil {
		return nil, err
	}
	return buf, nil
}

// checkRecord refuses a record readRecord must not read (larger than limit, encrypted,
// compressed) and charges b for reading it.
func checkRecord(f *zipEntry, limit int64, b *budget) error {
	if f.size > uint64(limit) {
		return fmt.Errorf("record of %d bytes is too large", f.size)
	}
	if f.flags&1 != 0 {
		return errors.New("encrypted zip record")
	}
	if f.method != 0 {
		// torch.save never compresses; refusing compressed records also rules out zip bombs.
		return fmt.Errorf("compressed zip record (method %d): torch.save stores records uncompressed", f.method)
	}
	if f.compSize != f.size {
		return errors.New("stored record with different compressed and uncompressed sizes")
	}
	if err := b.alloc(int64(f.size)); err != nil {
		return err
	}
	return b.step(int64(f.size) / 64)
}

func swapBytes(b []byte, width int) {
	if width == 1 {
		return
	}
	for i := 0; i+width <= len(b); i += width {
		for j := 0; j < width/2; j++ {
			b[i+j], b[i+width-1-j] = b[i+width-1-j], b[i+j]
		}
	}
}

// legacyMagic is torch's MAGIC_NUMBER, the first pickle of a legacy file.
const legacyMagic = "119547037146038801333356"

// maxLegacyPickle bounds the pickles at the start of a legacy file. They have no length
// prefix, so without a bound a pickle that never ends would be buffered to the end of
// the file, however large (or sparse) it is.
const maxLegacyPickle = 256 << 20

// readLegacy reads the pre-1.6 format: pickles of the magic number, protocol version,
// system info, the object and the storage keys, then each storage as an int64 element
// count and its bytes, in key order.
func readLegacy(r io.ReaderAt, size int64, b *budget) (any, error) {
	if size >= 262 {
		var tarMagic [5]byte
		if readAt(r, tarMagic[:], 257) == nil && string(tarMagic[:]) == "ustar" {
			return nil, errors.New("the legacy tar checkpoint format (torch < 0.4) is not supported")
		}
	}
	// Read a prefix of the file, growing it (4x, so the parses add up to linear time)
	// until the object and key pickles are complete.
	limit := min(size, maxLegacyPickle)
	chunk := min(limit, 1<<16)
	for {
		if err := b.alloc(chunk); err != nil {
			return nil, err
		}
		buf := make([]byte, chunk)
		if err := readAt(r, buf, 0); err != nil {
			return nil, err
		}
		v, err := parseLegacy(r, size, buf, b)
		if err != errTruncated {
			return v, err
		}
		if chunk == limit {
			if limit < size {
				return nil, fmt.Errorf("legacy checkpoint pickles longer than %d bytes are not supported", limit)
			}
			return nil, errors.New("not a checkpoint: neither a zip archive nor a complete legacy pickle")
		}
		chunk = min(limit, chunk*4)
	}
}

func parseLegacy(r io.ReaderAt, size int64, buf []byte, b *budget) (any, error) {
	u := newUnpickler(buf, nil, b)
	magic, err := u.load()
	if err != nil {
		return nil, err
	}
	if m, ok := magic.(interface{ String() string }); !ok || m.String() != legacyMagic {
		return nil, errors.New("not a checkpoint: no zip header and no legacy magic number")
	}
	next := func(persist func(Tuple) (any, error)) (any, error) {
		nu := newUnpickler(buf, persist, b)
		nu.pos = u.pos
		v, err := nu.load()
		u.pos = nu.pos
		return v, err
	}
	if v, err := next(nil); err != nil {
		return nil, err
	} else if v != int64(1001) {
		return nil, fmt.Errorf("unsupported legacy protocol version %v", v)
	}
	info, err := next(nil)
	if err != nil {
		return nil, err
	}
	if d, ok := info.(*Dict); ok {
		if le, ok := d.Get("little_endian"); ok && le == false {
			return nil, errors.New("big-endian legacy checkpoints are not supported")
		}
	}
	storages := map[string]*Storage{}
	var total int64
	persist := func(pid Tuple) (any, error) {
		if len(pid) == 6 && pid[5] != nil {
			return nil, errors.New("legacy storage views are not supported")
		}
		dt, key, numel, err := parsePID(pid, 6)
		if err != nil {
			return nil, err
		}
		if dt == 0 {
			return nil, errors.New("untyped storages are not supported in legacy checkpoints")
		}
		if s, ok := storages[key]; ok {
			if s.DType != dt || s.Numel() != numel {
				return nil, fmt.Errorf("storage %q used with two different types or sizes", key)
			}
			return s, nil
		}
		// The data follows the pickles: every storage must fit in what is left of the
		// file. Nothing is allocated for it until its data is read.
		nbytes, ok := storageBytes(dt, numel)
		if !ok || nbytes > size-int64(u.pos)-total {
			return nil, fmt.Errorf("storage %s of %d elements is larger than the file", printable(key), numel)
		}
		total += nbytes
		if err := b.alloc(storageCost); err != nil {
			return nil, err
		}
		s := &Storage{DType: dt, Key: key, pending: nbytes}
		storages[key] = s
		return s, nil
	}
	obj, err := next(persist)
	if err != nil {
		return nil, err
	}
	kv, err := next(nil)
	if err != nil {
		return nil, err
	}
	keys, ok := kv.([]any)
	if !ok {
		return nil, errors.New("legacy storage key list is not a list")
	}
	off := int64(u.pos)
	if total > size-off || int64(len(keys)) > (size-off-total)/8 {
		return nil, errors.New("legacy storages extend past the end of the file")
	}
	// torch reads the storages in the order of this list, each once; a key listed twice
	// would be read twice (the second read overwriting the first) and a storage not
	// listed would stay uninitialised, so both are refused.
	for _, k := range keys {
		key, _ := k.(string)
		s, ok := storages[key]
		if !ok {
			return nil, fmt.Errorf("legacy storage key %v is not used by any tensor", k)
		}
		if s.Data != nil {
			return nil, fmt.Errorf("legacy storage key %s is listed twice", printable(key))
		}
		var hdr [8]byte
		if err := readAt(r, hdr[:], off); err != nil {
			return nil, fmt.Errorf("legacy storage %s: %w", printable(key), err)
		}
		if n := int64(binary.LittleEndian.Uint64(hdr[:])); n != s.Numel() {
			return nil, fmt.Errorf("legacy storage %s has %d elements, expected %d", printable(key), n, s.Numel())
		}
		off += 8
		if s.pending > size-off {
			return nil, fmt.Errorf("legacy storage %s extends past the end of the file", printable(key))
		}
		if err := b.alloc(s.pending); err != nil {
			return nil, err
		}
		data := make([]byte, s.pending)
		if err := readAt(r, data, off); err != nil {
			return nil, fmt.Errorf("legacy storage %s: %w", printable(key), err)
		}
		s.Data, s.pending = data, 0
		off += int64(len(data))
	}
	for key, s := range storages {
		if s.Data == nil {
			return nil, fmt.Errorf("legacy storage %s is not in the storage key list", printable(key))
		}
	}
	return obj, nil
}

// makeNoZero returns a slice of n bytes of uninitialised memory, for a buffer about to
// be overwritten whole and dropped unless it was: make clears reused heap memory first,
// a quarter of a large read's time. strings.Builder.Grow is the standard library's way
// to such memory (its capacity, of at least n bytes, is one allocation); the string it
// is reached through is never used as one.
func makeNoZero(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	var sb strings.Builder
	sb.Grow(n)
	sb.WriteByte(0)
	return unsafe.Slice(unsafe.StringData(sb.String()), n)
}
