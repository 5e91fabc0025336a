package checkpoint

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allocCap bounds what one Read may allocate: a fixed allowance plus a small multiple
// of the input, whatever sizes the input claims.
func allocCap(n int) uint64 { return 32<<20 + 64*uint64(n) }

// FuzzRead feeds ReadFrom and ReadSafetensorsFrom arbitrary bytes, seeded with real
// torch.save files. Neither may panic or allocate more than allocCap; what reads
// successfully must also write.
//
//	go test -fuzz=FuzzRead -fuzztime=60s ./checkpoint
func FuzzRead(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.pt")
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	var st bytes.Buffer
	d := NewDict()
	d.Set("w", NewTensor(Float32, []int64{2}, make([]byte, 8)))
	if err := WriteSafetensorsTo(&st, d, map[string]string{"k": "v"}); err != nil {
		f.Fatal(err)
	}
	f.Add(st.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v, err := ReadFrom(bytes.NewReader(data), int64(len(data)))
		_, _, _ = ReadSafetensorsFrom(bytes.NewReader(data), int64(len(data)))
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > allocCap(len(data)) {
			t.Fatalf("reading %d bytes allocated %d bytes", len(data), got)
		}
		if err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatalf("reader panicked: %v", err)
		}
		if err == nil {
			// Values read are acyclic and valid, so writing them must not fail
			// except for values torch's weights_only loader could not take back.
			_ = WriteTo(io.Discard, v)
			_ = describeValue(v)
		}
	})
}
