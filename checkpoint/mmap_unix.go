//go:build unix

package checkpoint

import (
	"fmt"
	"math"
	"os"
	"syscall"
)

// mapFile maps the size bytes of f read-only (a private mapping: the file's pages,
// shared with the page cache, not Go's heap).
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size <= 0 || size > math.MaxInt {
		return nil, fmt.Errorf("cannot map a file of %d bytes", size)
	}
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
}

// unmapFile releases a mapping of mapFile.
func unmapFile(b []byte) error { return syscall.Munmap(b) }
