package nn

import (
	"runtime"
	"sync"
)

// skipping holds the threads of the goroutines inside SkipInit.
var skipping sync.Map // thread id → struct{}

// SkipInit runs f with this package's Init functions doing nothing on the calling
// goroutine: a model built inside f has its parameters allocated but not filled, as
// transformers builds a model whose weights from_pretrained will replace (skipping the
// random draws, the bulk of building a large model, and their temporaries). Every
// parameter must then be overwritten before use; models.LoadPretrained loads a
// checkpoint that must hold them all. Other goroutines initialise as usual.
func SkipInit(f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	id := threadID()
	if id < 0 {
		f() // no thread ids on this system: initialise
		return
	}
	if _, nested := skipping.LoadOrStore(id, struct{}{}); nested {
		f()
		return
	}
	defer skipping.Delete(id)
	f()
}

// initSkipped reports whether the calling goroutine is inside SkipInit. A goroutine
// that is not has no thread locked by SkipInit, so its thread id is in the map only
// while another goroutine inside SkipInit holds that thread — which it cannot, as that
// goroutine is locked to it.
func initSkipped() bool {
	id := threadID()
	if id < 0 {
		return false
	}
	_, ok := skipping.Load(id)
	return ok
}
