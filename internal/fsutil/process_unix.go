//go:build unix

package fsutil

import (
	"errors"
	"syscall"
)

// processAlive reports whether pid names a process on this machine; a process of
// another user (EPERM) counts as alive.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || !errors.Is(err, syscall.ESRCH)
}
