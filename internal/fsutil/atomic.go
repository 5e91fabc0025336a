package fsutil

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFileAtomic writes b to path (mode 0644) through a synced temporary file in the
// same directory and a rename, then syncs the directory: readers, and a crash at any
// point, see the old file or the new one, never a part of it.
func WriteFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	SyncDir(filepath.Dir(path))
	return nil
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

// SyncDir makes the renames and removals in dir durable. Some file systems refuse to
// sync a directory, which is not an error.
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
