//go:build !unix

package main

import (
	"os"
	"syscall"
)

// rankProcAttr: without Unix process groups a rank is a plain child.
func rankProcAttr() *syscall.SysProcAttr { return nil }

// signalRank sends s to the rank; where signals other than kill are not deliverable,
// the rank is killed.
func signalRank(p *os.Process, s syscall.Signal) {
	if s == syscall.SIGKILL || p.Signal(s) != nil {
		p.Kill()
	}
}
