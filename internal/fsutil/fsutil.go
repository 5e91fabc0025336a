// Package fsutil reads the small files a user names (configs, tokenizer and adapter
// settings) within limits: they must be regular files, opened without blocking (a FIFO
// would wait for a writer forever) and read up to a size (a device such as /dev/zero
// never ends). It also writes files atomically (WriteAtomic, Stage): a crash leaves the
// old file or the new one, never a part, and no temporary file outlives its writer
// for long.
package fsutil

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// ReadFile reads path, which must be a regular file of at most limit bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d it may have", path, fi.Size(), limit)
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
