package data

import (
	"errors"
	"fmt"
	"os"
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

// noMmap makes mapFile take the pread path (tests).
var noMmap = false

// mapFile maps the regular file at path read-only (see OpenRegular). The mapping is
// removed once owner is unreachable. When the address space has no room for the file
// (an address-space limit, ulimit -v, or a 32-bit platform), it returns the open file
// instead, for reads through pread, closed once owner is unreachable.
func mapFile[T any](owner *T, path string) ([]byte, *os.File, int64, error) {
	f, size, err := OpenRegular(path)
	if err != nil {
		return nil, nil, 0, err
	}
	if size == 0 {
		f.Close()
		return nil, nil, 0, nil
	}
	var b []byte
	if size == int64(int(size)) && !noMmap {
		b, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	} else {
		err = syscall.ENOMEM
	}
	if errors.Is(err, syscall.ENOMEM) {
		runtime.AddCleanup(owner, func(f *os.File) { f.Close() }, f)
		return nil, f, size, nil
	}
	f.Close()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("mmap %s: %w", path, err)
	}
	runtime.AddCleanup(owner, func(b []byte) { _ = syscall.Munmap(b) }, b)
	return b, nil, size, nil
}
