//go:build !linux

package nn

// threadID is -1 where the system gives no thread id: SkipInit then initialises.
func threadID() int { return -1 }
