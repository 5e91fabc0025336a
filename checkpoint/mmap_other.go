//go:build !unix

package checkpoint

import (
	"fmt"
	"math"
	"os"
)

// mapFile reads f whole into memory where the system has no mmap in Go's syscall
// package: there the weights are Go memory while they load.
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size <= 0 || size > math.MaxInt {
		return nil, fmt.Errorf("cannot map a file of %d bytes", size)
	}
	b := make([]byte, size)
	if err := readAt(f, b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// unmapFile releases a mapping of mapFile.
func unmapFile([]byte) error { return nil }
