// Package fsutil reads the small files a user names (configs, tokenizer and adapter
// settings) within limits: they must be regular files, opened without blocking (a FIFO
// would wait for a writer forever) and read up to a size (a device such as /dev/zero
// never ends). It also writes files atomically (WriteAtomic, Stage): a crash leaves the
// old file or the new one, never a part, and no temporary file outlives its writer
// for long. A path the caller names is written through its symlink (WriteAtomic); a
// file inside an output directory is written by WriteAtomicInDir, which replaces a
// symlink there instead of following it out of the directory.
package fsutil

import (
	"fmt"
	"io"
)

// ReadFile reads path, which must be a regular file of at most limit bytes (opened
// with Open).
func ReadFile(path string, limit int64) ([]byte, error) {
	f, size, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d it may have", path, size, limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit { // it grew while being read
		return nil, fmt.Errorf("%s is more than the %d bytes it may have", path, limit)
	}
	return b, nil
}

// ReadFileInDir reads the file name of the directory dir, resolved by InDir, within
// limit bytes (ReadFile).
func ReadFileInDir(dir, name string, limit int64) ([]byte, error) {
	path, err := InDir(dir, name)
	if err != nil {
		return nil, err
	}
	return ReadFile(path, limit)
}
