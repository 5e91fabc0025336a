package fsutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// WriteFileAtomic writes b to path as WriteAtomic does.
func WriteFileAtomic(path string, b []byte) error {
	return WriteAtomic(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// LinkAtomic makes dst another name for src's current contents: a hard link under a
// temporary name, renamed over dst, so readers see the old dst or the new one. Where
// the file system has no hard links it copies (WriteFileAtomic).
func LinkAtomic(src, dst string) error {
	tmp := dst + ".tmp-link"
	os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		b, rerr := os.ReadFile(src)
		if rerr != nil {
			return err
		}
		return WriteFileAtomic(dst, b)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	SyncDir(filepath.Dir(dst))
	return nil
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

// WriteAtomic writes a file through a synced temporary file and a rename. When path is
// a symlink, the file it points to is replaced (the temporary file is created next to
// it) and the link is kept. A new file gets the permissions os.Create would give it
// (0666 less the umask); an existing one keeps its own. On any failure, a panic of
// write included, the temporary file is closed and removed.
func WriteAtomic(path string, write func(io.Writer) error) error {
	st, err := Stage(path, write)
	if err != nil {
		return err
	}
	return st.Commit()
}

// Staged is a file written and synced under a temporary name next to its target, not
// yet in place: Commit renames it over the target, Abort removes it. A save of several
// files (a sharded model) stages them all before it commits any, so that a failure
// while writing leaves the previous files as they were.
type Staged struct {
	tmp, target string
}

// Stage writes a temporary file for path (see WriteAtomic) and syncs it. On any
// failure, a panic of write included, the temporary file is closed and removed.
func Stage(path string, write func(io.Writer) error) (*Staged, error) {
	target, err := resolveLinks(path)
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return stage(path, target, write)
}

// WriteFileInDir writes b as the file name of the output directory dir, as
// WriteAtomicInDir does.
func WriteFileInDir(dir, name string, b []byte) error {
	return WriteAtomicInDir(dir, name, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// WriteAtomicInDir writes the file name of the output directory dir (a model, adapter
// or run directory gotrain fills) as WriteAtomic does, with the rule for files inside
// an output directory: when dir/name is a symlink, the link itself is replaced by the
// new file and whatever it points to is left as it was (a merged model's files could
// otherwise be written into the base's, or into a Hugging Face cache's blobs). dir
// itself, a path the user names, may be a link. name must be a plain file name (no
// separator, not "." or "..").
func WriteAtomicInDir(dir, name string, write func(io.Writer) error) error {
	st, err := StageInDir(dir, name, write)
	if err != nil {
		return err
	}
	return st.Commit()
}

// StageInDir stages the file name of the output directory dir (see Stage) under the
// rule of WriteAtomicInDir: Commit replaces a symlink at dir/name, never the file it
// points to.
func StageInDir(dir, name string, write func(io.Writer) error) (*Staged, error) {
	path := filepath.Join(dir, name)
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, filepath.Separator) || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("writing %s: %q is not a plain file name", path, name)
	}
	return stage(path, path, write)
}

// stage writes and syncs the temporary file for target, the file that path (named in
// errors) resolves to; the temporary file lies in target's directory.
func stage(path, target string, write func(io.Writer) error) (_ *Staged, err error) {
	dir, base := filepath.Split(target)
	if dir == "" {
		dir = "."
	}
	// An existing file keeps its permissions; a symlink (an output directory's link,
	// which is replaced) has none of its own to keep. A directory cannot be replaced:
	// refused before anything is written rather than at the rename.
	var keepMode *fs.FileMode
	if fi, err := os.Lstat(target); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("writing %s: %s is a directory", path, target)
	} else if err == nil && fi.Mode()&fs.ModeSymlink == 0 {
		m := fi.Mode().Perm()
		keepMode = &m
	}
	// The temporary name carries the writer's pid, so that a later write can tell the
	// leftovers of a killed writer from a live one's file and remove them.
	f, err := createTemp(dir, base, 0o666)
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
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
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	if keepMode != nil {
		if err := f.Chmod(*keepMode); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	done = true
	return &Staged{tmp: tmp, target: target}, nil
}

// Commit renames the staged file over its target and syncs the directory; on failure
// the temporary file is removed.
func (s *Staged) Commit() error {
	if err := os.Rename(s.tmp, s.target); err != nil {
		os.Remove(s.tmp)
		return fmt.Errorf("writing %s: %w", s.target, err)
	}
	dir, base := filepath.Split(s.target)
	if dir == "" {
		dir = "."
	}
	SyncDir(dir)
	removeOrphans(dir, base)
	return nil
}

// Abort removes the staged file.
func (s *Staged) Abort() { os.Remove(s.tmp) }

// SyncDir persists renames and removals in dir; some file systems refuse to sync
// directories, which is not an error.
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// OrphanAge is how long a dead writer's temporary file must have been untouched before
// removeOrphans deletes it (a guard for directories shared between machines, where a
// pid names another host's process).
var OrphanAge = time.Minute

// removeOrphans deletes the temporary files that writers of dir/base killed mid-write
// (SIGKILL, power loss) left behind: those whose pid is not a live process and that
// have not been modified for OrphanAge. A checkpoint rewritten every epoch thus never
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
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < OrphanAge {
			continue
		}
		os.Remove(filepath.Join(dir, name))
	}
}
