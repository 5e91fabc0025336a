package data

import (
	"fmt"
	"runtime"
	"syscall"
)

// offHeap returns n zeroed bytes of anonymous memory outside Go's heap. Parsed tables
// live there so that the garbage collector's target, twice the live heap, does not
// double with the data: reading a large CSV then costs its parsed size, not twice it.
// The memory is unmapped once owner is unreachable.
func offHeap[T any](owner *T, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("data: mmap of %d bytes: %w", n, err)
	}
	runtime.AddCleanup(owner, func(b []byte) { _ = syscall.Munmap(b) }, b)
	return b, nil
}

// mapFile maps the regular file at path read-only (see OpenRegular). The mapping is
// removed once owner is unreachable.
func mapFile[T any](owner *T, path string) ([]byte, error) {
	f, size, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size == 0 {
		return nil, nil
	}
	if size != int64(int(size)) {
		return nil, fmt.Errorf("%s: %d bytes cannot be mapped on this platform", path, size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	runtime.AddCleanup(owner, func(b []byte) { _ = syscall.Munmap(b) }, b)
	return b, nil
}
