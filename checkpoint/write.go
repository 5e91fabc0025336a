package checkpoint

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	return atomicWrite(path, func(w io.Writer) error {
		return writeArchive(w, archiveName(path), v)
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

// maxLinks bounds the symlinks followed to find the file a path names (Linux's limit).
const maxLinks = 40

// resolveLinks returns the file that path names after following symlinks (a link's
// relative target is relative to the link's directory). A missing file is the path
// itself, so writing through a dangling link creates its target.
func resolveLinks(path string) (string, error) {
	for range maxLinks {
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return "", fmt.Errorf("%s: more than %d symlinks", path, maxLinks)
}

// createTemp creates a new temporary file in dir with the given permissions, which the
// umask restricts as it does for os.Create (os.CreateTemp would make it 0600).
func createTemp(dir, base string, perm fs.FileMode) (*os.File, error) {
	for try := 0; ; try++ {
		name := filepath.Join(dir, fmt.Sprintf(".%s.tmp-%d-%d", base, os.Getpid(), rand.Uint32()))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) && try < 100 {
			continue
		}
		return f, err
	}
}

// atomicWrite writes a file through a synced temporary file and a rename. When path is
// a symlink, the file it points to is replaced (the temporary file is created next to
// it) and the link is kept. A new file gets the permissions os.Create would give it
// (0666 less the umask); an existing one keeps its own. On any failure, a panic of
// write included, the temporary file is closed and removed.
func atomicWrite(path string, write func(io.Writer) error) error {
	st, err := stageFile(path, write)
	if err != nil {
		return err
	}
	return st.commit()
}

// staged is a file written and synced under a temporary name next to its target, not
// yet in place: commit renames it over the target, abort removes it. A save of several
// files (a sharded model) stages them all before it commits any, so that a failure
// while writing leaves the previous files as they were.
type staged struct {
	tmp, target string
}

// stageFile writes a temporary file for path (see atomicWrite) and syncs it. On any
// failure, a panic of write included, the temporary file is closed and removed.
func stageFile(path string, write func(io.Writer) error) (_ *staged, err error) {
	target, err := resolveLinks(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	dir, base := filepath.Split(target)
	if dir == "" {
		dir = "."
	}
	var keepMode *fs.FileMode
	if fi, err := os.Stat(target); err == nil {
		m := fi.Mode().Perm()
		keepMode = &m
	}
	// The temporary name carries the writer's pid, so that a later write can tell the
	// leftovers of a killed writer from a live one's file and remove them.
	f, err := createTemp(dir, base, 0o666)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	tmp := f.Name()
	done := false
	defer func() {
		// Runs on errors and on panics alike (a panic propagates after the cleanup).
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if keepMode != nil {
		if err := f.Chmod(*keepMode); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	done = true
	return &staged{tmp: tmp, target: target}, nil
}

// commit renames the staged file over its target and syncs the directory; on failure
// the temporary file is removed.
func (s *staged) commit() error {
	if err := os.Rename(s.tmp, s.target); err != nil {
		os.Remove(s.tmp)
		return fmt.Errorf("checkpoint: %w", err)
	}
	dir, base := filepath.Split(s.target)
	if dir == "" {
		dir = "."
	}
	syncDir(dir)
	removeOrphans(dir, base)
	return nil
}

// abort removes the staged file.
func (s *staged) abort() { os.Remove(s.tmp) }

// syncDir persists renames and removals in dir; some file systems refuse to sync
// directories, which is not an error.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// orphanAge is how long a dead writer's temporary file must have been untouched before
// removeOrphans deletes it (a guard for directories shared between machines, where a
// pid names another host's process).
var orphanAge = time.Minute

// removeOrphans deletes the temporary files that writers of dir/base killed mid-write
// (SIGKILL, power loss) left behind: those whose pid is not a live process and that
// have not been modified for orphanAge. A checkpoint rewritten every epoch thus never
// accumulates dead copies of itself. Errors are ignored: this is housekeeping.
func removeOrphans(dir, base string) {
	prefix := "." + base + ".tmp-"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok || e.IsDir() {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < orphanAge {
			continue
		}
		os.Remove(filepath.Join(dir, name))
	}
}
