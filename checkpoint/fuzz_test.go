package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// FuzzRead feeds ReadFrom and ReadSafetensorsFrom arbitrary bytes, starting from the
// real torch.save files in testdata and from one input of each hostile class of
// hostileSeeds (built by code). For every input it checks:
//
//   - no panic, and the read stays within its budget: allocation (runtime.MemStats)
//     and work within the package doc's bounds for the input's size (the work counter
//     standing for time: see requireWithinBudget);
//
//   - what reads, writes, and reads back to the same value (sharing and storage
//     identity included): Read, Write, Read is the identity on everything Read returns;
//
//   - a safetensors read whose data is mapped (as MapSafetensors maps a file) accepts
//     and refuses what the read into a buffer does, with the same tensors, each
//     pointing into the input's data area.
//
//     go test -run '^$' -fuzz='^FuzzRead$' -fuzztime=60s ./checkpoint
func FuzzRead(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.pt")
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range hostileSeeds() {
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
		v, err, c := measuredRead(data, ReadOptions{})
		if err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatalf("reader panicked: %v", err)
		}
		requireWithinBudget(t, len(data), c, "ReadFrom")
		if err == nil {
			var out bytes.Buffer
			if err := WriteTo(&out, v); err != nil {
				t.Fatalf("Read returned a value Write refuses: %v", err)
			}
			back, err := ReadFrom(bytes.NewReader(out.Bytes()), int64(out.Len()))
			if err != nil {
				t.Fatalf("reading back what Write wrote: %v", err)
			}
			requireSameValue(t, v, back)
		}

		sd, err, c := measuredSafetensors(data)
		requireWithinBudget(t, len(data), c, "ReadSafetensorsFrom")
		inMap := func(off, n int64) ([]byte, error) { return data[off : off+n : off+n], nil }
		msd, _, merr := readSafetensors(bytes.NewReader(data), int64(len(data)), ReadOptions{}.budget(int64(len(data))), false, inMap)
		if (err == nil) != (merr == nil) || (err != nil && err.Error() != merr.Error()) {
			t.Fatalf("read into a buffer: %v; mapped: %v", err, merr)
		}
		if err == nil {
			requireSameValue(t, sd, msd)
			for _, v := range msd.All() {
				if s := v.(*Tensor).Storage.Data; len(s) > 0 && !inside(s, data) {
					t.Fatalf("a mapped tensor's bytes are not the input's")
				}
			}
		}
		if err == nil {
			_, meta, _ := ReadSafetensorsFrom(bytes.NewReader(data), int64(len(data)))
			var out bytes.Buffer
			if err := WriteSafetensorsTo(&out, sd, meta); err != nil {
				t.Fatalf("ReadSafetensors returned tensors WriteSafetensors refuses: %v", err)
			}
			back, backMeta, err := ReadSafetensorsFrom(bytes.NewReader(out.Bytes()), int64(out.Len()))
			if err != nil {
				t.Fatalf("reading back what WriteSafetensors wrote: %v", err)
			}
			requireSameValue(t, sd, back)
			if len(meta) != len(backMeta) {
				t.Fatalf("metadata %v came back as %v", meta, backMeta)
			}
			for k, v := range meta {
				if backMeta[k] != v {
					t.Fatalf("metadata %v came back as %v", meta, backMeta)
				}
			}
		}
	})
}

// inside reports whether s lies within the memory of b.
func inside(s, b []byte) bool {
	if len(s) == 0 || len(b) == 0 {
		return false
	}
	start, end := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&b[len(b)-1]))
	p, q := uintptr(unsafe.Pointer(&s[0])), uintptr(unsafe.Pointer(&s[len(s)-1]))
	return p >= start && q <= end
}
