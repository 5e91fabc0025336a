//go:build !linux

package data

import "os"

// physicalMemory is the memory this process can use, in bytes; off Linux it is not
// read, and 8 GiB is assumed.
func physicalMemory() int64 { return 8 << 30 }

// dataExtent returns the region of f to read after off: everything, since holes are not
// reported here.
func dataExtent(_ *os.File, off, size int64) (start, end int64, ok bool) {
	return off, size, off < size
}
