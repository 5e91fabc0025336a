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
	// With no thread ids on this system (id < 0), f initialises.
	if id := threadID(); id >= 0 {
		if _, nested := skipping.LoadOrStore(id, struct{}{}); !nested {
			defer skipping.Delete(id)
		}
	}
	f()
}

// initSkipped reports whether the calling goroutine is inside SkipInit. A goroutine
// that is not has no thread locked by SkipInit, so its thread id is in the map only
// while another goroutine inside SkipInit holds that thread — which it cannot, as that
// goroutine is locked to it. (A negative id, for no thread ids, is never stored.)
func initSkipped() bool {
	_, ok := skipping.Load(threadID())
	return ok
}
