package checkpoint

import (
	"archive/zip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"strings"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// alignment is the record data alignment torch.save uses (and mmap loading relies on).
const alignment = 64

// Write saves v to path as torch.save would, replacing path atomically: the data goes
// to a temporary file in the same directory, which is synced and renamed over path,
// and then the directory is synced. After a crash path holds either the old or the
// new checkpoint, never a mix. A failed Write leaves path unchanged and no temporary
// file, even when it fails by a panic. A new file gets the permissions os.Create
// would give it (0666 less the umask), a replaced one keeps its own; when path is a
// symlink, the file it points to is replaced and the link kept. A writer killed
// mid-write leaves its temporary file (.NAME.tmp-PID-*); the next Write of the same path
// removes it once that process is gone.
//
// The zip's root folder is the file name without its extension, as in torch.save.
func Write(path string, v any) error {
	return fsutil.WriteAtomic(path, func(w io.Writer) error {
		return writeArchive(w, archiveName(path), v)
	})
}

// WriteInDir writes v as the file name of the directory dir, as Write does, with the
// rule for a file inside a directory gotrain fills (a run's checkpoints/): when dir/name
// is a symlink the link itself is replaced, never the file it points to
// (fsutil.WriteAtomicInDir). Write, for a path the caller names, keeps the link.
func WriteInDir(dir, name string, v any) error {
	return fsutil.WriteAtomicInDir(dir, name, func(w io.Writer) error {
		return writeArchive(w, archiveName(name), v)
	})
}

// WriteTo writes v to w in torch.save's format, with the root folder "archive" (what
// torch.save uses for file objects). Tensor data is written straight from the storages,
// so memory use does not grow with tensor size.
func WriteTo(w io.Writer, v any) error {
	return writeArchive(w, "archive", v)
}

// archiveName returns torch.save's root folder for a path: the base name without its
// last extension, or "archive" when that is empty or not plain ASCII.
func archiveName(path string) string {
	base := filepath.Base(path)
	if ext := filepath.Ext(base); ext != "" {
		base = strings.TrimSuffix(base, ext)
	}
	if base == "" || base == "." || base == string(filepath.Separator) {
		return "archive"
	}
	for _, c := range base {
		if c < 0x20 || c >= 0x7f || c == '/' || c == '\\' {
			return "archive"
		}
	}
	return base
}

func writeArchive(w io.Writer, root string, v any) error {
	p := newPickler()
	if err := p.dump(v, 0); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	pkl := p.finish()

	cw := &countWriter{w: w}
	zw := &recordWriter{zw: zip.NewWriter(cw), cw: cw, root: root}
	zw.record("data.pkl", pkl)
	zw.record("byteorder", []byte("little"))
	for i, s := range p.order {
		zw.record("data/"+p.storages[s], s.Data)
		p.order[i] = nil // do not keep caller memory reachable longer than needed
	}
	zw.record("version", []byte("3\n"))
	if zw.err != nil {
		return fmt.Errorf("checkpoint: %w", zw.err)
	}
	if err := zw.zw.Close(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// countWriter counts the bytes that reach the underlying writer; zip.Writer buffers,
// so its own count is not visible, but everything it writes passes through here.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// recordWriter writes stored zip records whose data starts on a 64-byte boundary.
type recordWriter struct {
	zw     *zip.Writer
	cw     *countWriter
	root   string
	offset int64 // bytes written to the archive so far
	err    error
}

func (r *recordWriter) record(name string, data []byte) {
	if r.err != nil {
		return
	}
	full := r.root + "/" + name
	// Local header (30) + name + the "FB" extra field's 4-byte header, then padding.
	start := r.offset + 30 + int64(len(full)) + 4
	pad := (alignment - start%alignment) % alignment
	extra := make([]byte, 4+pad)
	extra[0], extra[1] = 'F', 'B'
	binary.LittleEndian.PutUint16(extra[2:], uint16(pad))
	for i := 4; i < len(extra); i++ {
		extra[i] = 'Z'
	}
	fh := &zip.FileHeader{
		Name:               full,
		Method:             zip.Store,
		Flags:              0x800, // UTF-8 names; no data descriptor
		CRC32:              crc32.ChecksumIEEE(data),
		CompressedSize64:   uint64(len(data)),
		UncompressedSize64: uint64(len(data)),
		Extra:              extra,
	}
	fw, err := r.zw.CreateRaw(fh)
	if err != nil {
		r.err = err
		return
	}
	if _, err := fw.Write(data); err != nil {
		r.err = err
		return
	}
	r.offset += 30 + int64(len(full)) + int64(len(extra)) + int64(len(data))
}
