// Package testsupport holds helpers that the tests of several packages share: the Go
// heap's allocations while a function runs, edited JSON files, a directory's files, and special files
// (FIFOs) to give as input.
package testsupport

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// AllocatedBy runs f and returns the bytes the Go heap allocated while it ran
// (runtime.MemStats.TotalAlloc: garbage included).
func AllocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// EditJSON decodes raw (a JSON object, such as a tokenizer.json), lets edit change its
// fields and returns it encoded again.
func EditJSON(raw []byte, edit func(m map[string]any)) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	edit(m)
	return json.Marshal(m)
}

// DirFiles returns the contents of every file in dir by name, failing t on an error.
func DirFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}
