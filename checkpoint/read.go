package checkpoint

import (
	"archive/zip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// maxPickle bounds data.pkl; real ones are kilobytes to a few megabytes.
const maxPickle = 1 << 30

// Read loads the checkpoint at path (a torch.save file, zip or legacy format). See the
// package documentation for the Go types of the result.
func Read(path string) (any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	v, err := ReadFrom(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("%w (reading %s)", err, path)
	}
	return v, nil
}

// ReadFrom loads a checkpoint of size bytes from r. Malformed input is an error, never
// a panic; no allocation is larger than what the input itself holds.
func ReadFrom(r io.ReaderAt, size int64) (v any, err error) {
	defer func() {
		// The reader is written not to panic; this turns a bug into an error rather
		// than a crash of a service that reads untrusted files.
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("checkpoint: internal error reading checkpoint: %v", p)
		}
	}()
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil || size < 4 {
		return nil, errors.New("checkpoint: file too short to be a checkpoint")
	}
	if string(magic[:]) == "PK\x03\x04" {
		v, err = readZip(r, size)
	} else {
		v, err = readLegacy(r, size)
	}
	if err != nil && !strings.HasPrefix(err.Error(), "checkpoint: ") {
		err = fmt.Errorf("checkpoint: %w", err)
	}
	return v, err
}

func readZip(r io.ReaderAt, size int64) (any, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, fmt.Errorf("not a valid zip archive: %w", err)
	}
	if len(zr.File) == 0 {
		return nil, errors.New("empty zip archive")
	}
	root, _, ok := strings.Cut(zr.File[0].Name, "/")
	if !ok {
		return nil, errors.New("zip entries are not in a root folder, not a torch.save file")
	}
	files := map[string]*zip.File{}
	for _, f := range zr.File {
		name, ok := strings.CutPrefix(f.Name, root+"/")
		if !ok {
			return nil, fmt.Errorf("zip entry %q is outside the root folder %q", f.Name, root)
		}
		files[name] = f
	}
	if _, ok := files["constants.pkl"]; ok {
		return nil, errors.New("this is a TorchScript archive (torch.jit.save), not a torch.save checkpoint")
	}
	pf, ok := files["data.pkl"]
	if !ok {
		return nil, errors.New("no data.pkl record")
	}
	bigEndian := false
	if bf, ok := files["byteorder"]; ok {
		b, err := readRecord(r, size, bf, 16)
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
	pkl, err := readRecord(r, size, pf, maxPickle)
	if err != nil {
		return nil, fmt.Errorf("data.pkl: %w", err)
	}
	storages := map[string]*Storage{}
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
			return nil, fmt.Errorf("storage data/%s: big-endian untyped storages are not supported", key)
		}
		f, ok := files["data/"+key]
		if !ok {
			return nil, fmt.Errorf("storage record data/%s is missing", key)
		}
		nbytes, ok := storageBytes(dt, numel)
		if !ok || uint64(nbytes) != f.UncompressedSize64 {
			return nil, fmt.Errorf("storage data/%s holds %d bytes; %d %v elements need %d",
				key, f.UncompressedSize64, numel, dt, nbytes)
		}
		data, err := readRecord(r, size, f, nbytes)
		if err != nil {
			return nil, fmt.Errorf("data/%s: %w", key, err)
		}
		if bigEndian {
			swapBytes(data, dt.wordSize())
		}
		s := &Storage{DType: dt, Data: data, Key: key, untyped: untyped}
		storages[key] = s
		return s, nil
	}
	v, err := newUnpickler(pkl, persist).load()
	if err == errTruncated {
		return nil, errors.New("data.pkl: pickle data truncated")
	}
	return v, err
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

// readRecord returns a stored zip record's bytes, refusing records larger than limit
// or extending past the end of the file.
func readRecord(r io.ReaderAt, size int64, f *zip.File, limit int64) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("record of %d bytes is too large", f.UncompressedSize64)
	}
	n := int64(f.UncompressedSize64)
	switch f.Method {
	case zip.Store:
		if f.CompressedSize64 != f.UncompressedSize64 {
			return nil, errors.New("stored record with different compressed and uncompressed sizes")
		}
		off, err := f.DataOffset()
		if err != nil {
			return nil, err
		}
		if off < 0 || off > size || n > size-off {
			return nil, errors.New("record extends past the end of the file")
		}
		buf := make([]byte, n)
		if m, err := r.ReadAt(buf, off); m < len(buf) {
			return nil, err
		}
		return buf, nil
	}
	// torch.save never compresses; refusing compressed records also rules out zip bombs.
	return nil, fmt.Errorf("compressed zip record (method %d): torch.save stores records uncompressed", f.Method)
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

// readLegacy reads the pre-1.6 format: pickles of the magic number, protocol version,
// system info, the object and the storage keys, then each storage as an int64 element
// count and its bytes, in key order.
func readLegacy(r io.ReaderAt, size int64) (any, error) {
	if size >= 262 {
		var tarMagic [5]byte
		if _, err := r.ReadAt(tarMagic[:], 257); err == nil && string(tarMagic[:]) == "ustar" {
			return nil, errors.New("the legacy tar checkpoint format (torch < 0.4) is not supported")
		}
	}
	// The pickles have no length prefix: read a prefix of the file, growing it until the
	// object and key pickles are complete.
	chunk := min(size, 1<<16)
	for {
		buf := make([]byte, chunk)
		if _, err := r.ReadAt(buf, 0); err != nil && err != io.EOF {
			return nil, err
		}
		v, err := parseLegacy(r, size, buf)
		if err != errTruncated {
			return v, err
		}
		if chunk == size {
			return nil, errors.New("not a checkpoint: neither a zip archive nor a complete legacy pickle")
		}
		chunk = min(size, chunk*4)
	}
}

func parseLegacy(r io.ReaderAt, size int64, buf []byte) (any, error) {
	u := newUnpickler(buf, nil)
	magic, err := u.load()
	if err != nil {
		return nil, err
	}
	if m, ok := magic.(interface{ String() string }); !ok || m.String() != legacyMagic {
		return nil, errors.New("not a checkpoint: no zip header and no legacy magic number")
	}
	next := func(persist func(Tuple) (any, error)) (any, error) {
		nu := newUnpickler(buf, persist)
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
		// The data follows the pickles; every storage must fit in the file, so the
		// buffers allocated here never add up to more than the file size.
		nbytes, ok := storageBytes(dt, numel)
		if !ok || nbytes > size-total {
			return nil, fmt.Errorf("storage %s of %d elements is larger than the file", key, numel)
		}
		total += nbytes
		s := &Storage{DType: dt, Key: key, Data: make([]byte, nbytes)}
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
	for _, k := range keys {
		key, _ := k.(string)
		s, ok := storages[key]
		if !ok {
			return nil, fmt.Errorf("legacy storage key %v is not used by any tensor", k)
		}
		var hdr [8]byte
		if _, err := r.ReadAt(hdr[:], off); err != nil {
			return nil, fmt.Errorf("legacy storage %s: %w", key, err)
		}
		if n := int64(binary.LittleEndian.Uint64(hdr[:])); n != s.Numel() {
			return nil, fmt.Errorf("legacy storage %s has %d elements, expected %d", key, n, s.Numel())
		}
		off += 8
		if int64(len(s.Data)) > size-off {
			return nil, fmt.Errorf("legacy storage %s extends past the end of the file", key)
		}
		if _, err := r.ReadAt(s.Data, off); err != nil && len(s.Data) > 0 {
			return nil, fmt.Errorf("legacy storage %s: %w", key, err)
		}
		off += int64(len(s.Data))
	}
	return obj, nil
}
