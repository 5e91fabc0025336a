package cgotorch

/*
#include <stdlib.h>
#include "profile.h"
*/
import "C"

import "unsafe"

// ProfileEvent is a cg_profile_event.
type ProfileEvent struct {
	Name           string
	Kind, Device   int
	Thread         uint64
	StartNs, DurNs int64
}

// Profile kinds (cg_profile_kind).
const (
	ProfileOp      = C.CG_PROFILE_OP
	ProfileKernel  = C.CG_PROFILE_KERNEL
	ProfileMemcpy  = C.CG_PROFILE_MEMCPY
	ProfileMemset  = C.CG_PROFILE_MEMSET
	ProfileRuntime = C.CG_PROFILE_RUNTIME
	ProfileOther   = C.CG_PROFILE_OTHER
)

// ProfileStart is cg_profile_start.
func ProfileStart(cuda bool) error {
	c := 0
	if cuda {
		c = 1
	}
	return st(C.cg_profile_start(C.int(c)))
}

// ProfileStop is cg_profile_stop: the events, copied into Go.
func ProfileStop() ([]ProfileEvent, error) {
	var evs *C.cg_profile_event
	var n C.int64_t
	if err := st(C.cg_profile_stop(&evs, &n)); err != nil {
		return nil, err
	}
	defer C.cg_profile_free(evs, n)
	src := unsafe.Slice(evs, int(n))
	out := make([]ProfileEvent, len(src))
	for i, e := range src {
		out[i] = ProfileEvent{Name: C.GoString(e.name), Kind: int(e.kind), Device: int(e.device),
			Thread: uint64(e.thread), StartNs: int64(e.start_ns), DurNs: int64(e.dur_ns)}
	}
	return out, nil
}
