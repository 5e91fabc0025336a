package main

import "syscall"

// setDeathSignal makes the kernel kill a rank when the launcher dies, even by SIGKILL,
// so that no rank outlives it. (The signal follows the thread that started the child,
// which launch keeps locked until its ranks are gone.)
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
