//go:build unix && !linux

package main

import "syscall"

// setDeathSignal: only Linux has a parent-death signal; elsewhere the launcher's own
// signal handling stops the ranks.
func setDeathSignal(*syscall.SysProcAttr) {}
