//go:build unix

package main

import (
	"os"
	"syscall"
)

// rankProcAttr puts a rank in a process group of its own, so that a stop reaches
// whatever the rank started as well, and a terminal's Ctrl-C reaches the launcher
// alone, which passes it on once.
func rankProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(a)
	return a
}

// signalRank sends s to the rank's process group.
func signalRank(p *os.Process, s syscall.Signal) {
	if err := syscall.Kill(-p.Pid, s); err != nil {
		p.Signal(s) // the group is gone or was never made: the rank alone
	}
}
