package fsutil

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// NotRegularError is a path that names something other than a regular file (after
// symlinks): a directory, a named pipe, a device or a socket.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

// Error implements error.
func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, DescribeMode(e.Mode))
}

// DescribeMode names a file type for a message ("a named pipe (FIFO)").
func DescribeMode(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file (mode " + m.String() + ")"
}

// Open opens path for reading and returns it with its size, or an error (a
// *NotRegularError for a directory, FIFO, device or socket) without reading anything.
// It is the one way gotrain opens a file a user names: the open does not block on a
// FIFO that has no writer (O_NONBLOCK, which has no effect on a regular file), and the
// type is checked on the open file, so a FIFO or /dev/zero fails at once instead of
// hanging or growing without bound, and a file swapped between a check and the open
// cannot slip through.
func Open(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	return f, st.Size(), nil
}

// InDir returns the path of the file name in the directory dir (a model or adapter
// directory) after checking where it leads. name must be a local name (no "..", not
// absolute). The file may be a symlink, or lie under one, only if it leads to a file
// inside dir, or, when dir is a snapshot of the Hugging Face cache
// (REPO/snapshots/REVISION, whose files are links to REPO/blobs/HASH), into that same
// repository's blobs/. Any other link is refused, naming the file and where it leads:
// a model directory is not a way to read files elsewhere. A name that does not exist
// is returned as it is, for the caller's open to report.
func InDir(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	if !filepath.IsLocal(name) {
		return "", fmt.Errorf("%s: %q is not a file name inside the directory", path, name)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return path, nil // the open reports the missing directory
	}
	target, err := filepath.EvalSymlinks(filepath.Join(root, name))
	if err != nil {
		return path, nil // missing, or a dangling link: the open reports it
	}
	if Within(target, root) {
		return path, nil
	}
	// A Hugging Face cache snapshot: REPO/snapshots/REVISION/... -> REPO/blobs/HASH.
	if snaps := filepath.Dir(root); filepath.Base(snaps) == "snapshots" {
		if blobs := filepath.Join(filepath.Dir(snaps), "blobs"); Within(target, blobs) {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s leads to %s, outside %s: a file of a model or adapter directory may link only inside it (or, in the Hugging Face cache, into its repository's blobs/)",
		path, target, dir)
}

// Within reports whether path lies strictly inside dir (both cleaned and resolved): a
// name that merely starts with ".." ("..cache") is inside.
func Within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
