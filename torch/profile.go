package torch

import (
	"runtime"
	"time"

	"github.com/gotrain/gotrain/cgotorch"
)

// ProfileKind says what a profiled event is.
type ProfileKind int

// The kinds of ProfileEvent.
const (
	ProfiledOp      ProfileKind = cgotorch.ProfileOp      // an ATen op on the host (ops nest: aten::linear holds aten::addmm)
	ProfiledKernel  ProfileKind = cgotorch.ProfileKernel  // a kernel on a device
	ProfiledMemcpy  ProfileKind = cgotorch.ProfileMemcpy  // a copy on a device
	ProfiledMemset  ProfileKind = cgotorch.ProfileMemset  // a fill on a device
	ProfiledRuntime ProfileKind = cgotorch.ProfileRuntime // a CUDA runtime or driver call on the host
	ProfiledOther   ProfileKind = cgotorch.ProfileOther
)

// ProfileEvent is one event of Profile.
type ProfileEvent struct {
	Name     string
	Kind     ProfileKind
	OnCUDA   bool   // it ran on a CUDA device
	Thread   uint64 // the host thread of an op
	Start    time.Duration
	Duration time.Duration
}

// Profile runs f under libtorch's profiler, as torch.profiler.profile does in Python
// (Kineto): it records the ATen ops f runs on this goroutine's thread and on the autograd
// threads its backward passes use and, with cuda, the kernels, copies and fills of the
// CUDA devices (through CUPTI), and returns them. One profile at a time per process.
func Profile(cuda bool, f func()) (events []ProfileEvent, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cgotorch.ProfileStart(cuda); err != nil {
		return nil, wrapErr("profile", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = cgotorch.ProfileStop() // f panicked: leave no profiler running
		}
	}()
	f()
	stopped = true
	raw, err := cgotorch.ProfileStop()
	if err != nil {
		return nil, wrapErr("profile", err)
	}
	events = make([]ProfileEvent, len(raw))
	for i, e := range raw {
		events[i] = ProfileEvent{Name: e.Name, Kind: ProfileKind(e.Kind), OnCUDA: e.Device == cgotorch.DeviceCUDA,
			Thread: e.Thread, Start: time.Duration(e.StartNs), Duration: time.Duration(e.DurNs)}
	}
	return events, nil
}
