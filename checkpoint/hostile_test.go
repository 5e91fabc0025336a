package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readCost is what one read of an input cost.
type readCost struct {
	alloc uint64 // bytes allocated (runtime.MemStats.TotalAlloc)
	work  int64  // the budget's work counter
}

// measuredRead reads data as a checkpoint within opts' budget and measures the cost.
func measuredRead(data []byte, opts ReadOptions) (any, error, readCost) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, b, err := readFrom(bytes.NewReader(data), int64(len(data)), opts.budget(int64(len(data))))
	runtime.ReadMemStats(&after)
	return v, err, readCost{after.TotalAlloc - before.TotalAlloc, b.work}
}

// measuredSafetensors is measuredRead for the safetensors reader.
func measuredSafetensors(data []byte) (*Dict, error, readCost) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b := ReadOptions{}.budget(int64(len(data)))
	d, _, err := readSafetensors(bytes.NewReader(data), int64(len(data)), b, false, nil)
	runtime.ReadMemStats(&after)
	return d, err, readCost{after.TotalAlloc - before.TotalAlloc, b.work}
}

// requireWithinBudget checks the package doc's promise for an input of n bytes: at
// most DefaultMemoryFixed + DefaultMemoryPerByte·n bytes allocated and at most the
// default work. Time is not asserted (a loaded or -race machine would fail any bound):
// the work counter, which counts what the reader does, stands for it.
func requireWithinBudget(t *testing.T, n int, c readCost, what string) {
	t.Helper()
	b := ReadOptions{}.budget(int64(n))
	require.LessOrEqual(t, c.alloc, uint64(b.maxMem), "%s: %d bytes allocated reading %d bytes", what, c.alloc, n)
	require.LessOrEqual(t, c.work, b.maxWork, "%s: work", what)
}

func requireLimit(t *testing.T, err error, what string) {
	t.Helper()
	var le *LimitError
	require.True(t, errors.As(err, &le), "want a LimitError, got %v", err)
	require.Equal(t, what, le.What)
	require.ErrorContains(t, err, "ReadOptions."+le.Option)
}

// TestSharingAmplification: a string of 1 MiB referenced 10^5 times (a 1.5 MB file that
// expands to 100 GB) and a "billion laughs" of nested lists read in bounded memory; as a
// tree they are refused by their expanded size, with the option that allows them; read
// with that option, Write keeps the sharing and writes about the input's size back.
func TestSharingAmplification(t *testing.T) {
	for name, pkl := range map[string][]byte{
		"string": sharedStringPickle(1<<20, 100_000),
		"laughs": laughsPickle(80),
	} {
		data := archiveOf(zrec{"data.pkl", pkl})
		_, err, c := measuredRead(data, ReadOptions{})
		requireLimit(t, err, "expanded size")
		requireWithinBudget(t, len(data), c, name)

		v, err, c := measuredRead(data, ReadOptions{MaxExpanded: -1})
		require.NoError(t, err, name)
		requireWithinBudget(t, len(data), c, name)
		var out bytes.Buffer
		require.NoError(t, WriteTo(&out, v), name)
		require.Less(t, out.Len(), 2*len(data)+4096, "%s: Write expanded the shared value", name)
		back, err := ReadOptions{MaxExpanded: -1}.ReadFrom(bytes.NewReader(out.Bytes()), int64(out.Len()))
		require.NoError(t, err, name)
		requireSameValue(t, v, back)
	}
}

// TestSharedKeys: a long key shared through the memo costs its length at every use
// (hashing it), so using it many times runs out of work, not of time.
func TestSharedKeys(t *testing.T) {
	data := archiveOf(zrec{"data.pkl", sharedKeyPickle(1<<20, 10_000)})
	_, err, c := measuredRead(data, ReadOptions{})
	requireLimit(t, err, "work")
	requireWithinBudget(t, len(data), c, "shared key")
}

// TestTupleKeys: a tuple key holding a tuple twice per level doubles its normalised
// form per level; it is refused by the budget, a few levels cost what they should, and
// repeated tuple keys are normalised once.
func TestTupleKeys(t *testing.T) {
	data := archiveOf(zrec{"data.pkl", tupleKeyPickle(100)})
	_, err, c := measuredRead(data, ReadOptions{})
	requireLimit(t, err, "memory")
	requireWithinBudget(t, len(data), c, "tuple key")

	v, err, c := measuredRead(archiveOf(zrec{"data.pkl", tupleKeyPickle(5)}), ReadOptions{})
	require.NoError(t, err)
	requireWithinBudget(t, 200, c, "small tuple key")
	require.Equal(t, 1, v.(*Dict).Len())
	// (None, None) nested: the key found by an equal tuple built in Go.
	k := Tuple{nil, nil}
	for range 4 {
		k = Tuple{k, k}
	}
	_, ok := v.(*Dict).Get(k)
	require.True(t, ok)
}

// TestHugeIntegers: integers beyond what torch's weights_only unpickler reads (LONG1,
// 255 bytes) and text literals beyond Python's 4300 digits are refused by name; keys at
// the limit are linear to normalise.
func TestHugeIntegers(t *testing.T) {
	big300 := new(big.Int).Lsh(big.NewInt(1), 8*300)
	_, err := readRaw(t, string(newPk().op(opEmptyDict).long(big300).op(opNone, opSetItem).stop()), nil)
	require.ErrorContains(t, err, "integer of 301 bytes")
	lit := "\x80\x02L" + strings.Repeat("9", 5000) + "L\n."
	_, err = readRaw(t, lit, nil)
	require.ErrorContains(t, err, "more than 4300 digits")

	// 1000 distinct 254-byte keys, and one of them repeated: linear.
	p := newPk().op(opEmptyDict, opMark)
	for i := range 1000 {
		p.long(new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 8*253), big.NewInt(int64(i)))).op(opNone)
	}
	p.long(new(big.Int).Lsh(big.NewInt(1), 8*253)).str("last")
	data := archiveOf(zrec{"data.pkl", p.op(opSetItems).stop()})
	v, err, c := measuredRead(data, ReadOptions{})
	require.NoError(t, err)
	requireWithinBudget(t, len(data), c, "big keys")
	d := v.(*Dict)
	require.Equal(t, 1000, d.Len())
	got, _ := d.Get(new(big.Int).Lsh(big.NewInt(1), 8*253))
	require.Equal(t, "last", got)
}

// TestPythonKeyEquality: keys that Python's dict treats as one (1, 1.0, True; 0, -0.0,
// False; equal tuples; 2**64 and float(2**64)) are one key, the first one set kept with
// the last value, as torch.load returns; NaN keys are refused.
func TestPythonKeyEquality(t *testing.T) {
	v, err := readRaw(t, string(keyEqualityPickle()), nil)
	require.NoError(t, err)
	d := v.(*Dict)
	require.Equal(t, []any{int64(1), int64(0), Tuple{int64(1), "x"}, new(big.Int).Lsh(big.NewInt(1), 64), 0.5}, d.Keys())
	for k, want := range map[any]string{true: "c", 0.0: "f", 1.0: "c"} {
		got, _ := d.Get(k)
		require.Equal(t, want, got)
	}
	got, _ := d.Get(Tuple{true, "x"})
	require.Equal(t, "h", got)

	_, err = readRaw(t, string(newPk().op(opEmptyDict).float(math.NaN()).op(opNone, opSetItem).stop()), nil)
	require.ErrorContains(t, err, "NaN dict key")
}

// keyEqualityPickle is {1:'a', True:'b', 1.0:'c', 0:'d', -0.0:'e', False:'f',
// (1,'x'):'g', (True,'x'):'h', 2**64:'i', float(2**64):'j', 0.5:'k'} set key by key.
func keyEqualityPickle() []byte {
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	p := newPk().op(opEmptyDict, opMark)
	p.int(1).str("a").op(opNewTrue).str("b").float(1).str("c")
	p.int(0).str("d").float(math.Copysign(0, -1)).str("e").op(opNewFalse).str("f")
	p.int(1).str("x").op(opTuple2).str("g").op(opNewTrue).str("x").op(opTuple2).str("h")
	p.long(two64).str("i").float(math.Ldexp(1, 64)).str("j").float(0.5).str("k")
	return p.op(opSetItems).stop()
}

// TestPerValueOverhead: millions of one-byte values cost far more than a byte each;
// the charge per value keeps every read within its budget, refusing the file when its
// values cost more than the budget allows (a raised limit reads it). A list written as
// picklers write them (APPENDS batches of 1000) of millions of Nones reads.
func TestPerValueOverhead(t *testing.T) {
	batched := newPk().op(opEmptyList)
	for range 2000 {
		batched.op(opMark)
		batched.b = append(batched.b, bytes.Repeat([]byte{opNone}, 1000)...)
		batched.op(opAppends)
	}
	for _, tc := range []struct {
		name string
		pkl  []byte
		fail bool
	}{
		{"batched None", batched.stop(), false},
		{"None on the stack", tinyValuesPickle(opNone, 2_000_000), false},
		{"empty dicts", tinyValuesPickle(opEmptyDict, 2_000_000), true},
		{"empty lists", tinyValuesPickle(opEmptyList, 2_000_000), true},
		{"empty tuples", tinyValuesPickle(opEmptyTuple, 2_000_000), true},
	} {
		data := archiveOf(zrec{"data.pkl", tc.pkl})
		v, err, c := measuredRead(data, ReadOptions{})
		requireWithinBudget(t, len(data), c, tc.name)
		if tc.fail {
			requireLimit(t, err, "memory")
			continue
		}
		require.NoError(t, err, tc.name)
		require.Len(t, v, 2_000_000)
	}
	data := archiveOf(zrec{"data.pkl", tinyValuesPickle(opEmptyDict, 200_000)})
	_, err := ReadFrom(bytes.NewReader(data), int64(len(data)))
	requireLimit(t, err, "memory")
	v, err := ReadOptions{MaxMemory: 1 << 30}.ReadFrom(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	require.Len(t, v, 200_000)
}

// TestZipAliasing: several directory entries for one record, and a record hidden in
// another's data, are refused before anything is read twice.
func TestZipAliasing(t *testing.T) {
	data := aliasedZip(1<<20, 1000)
	_, err, c := measuredRead(data, ReadOptions{})
	require.ErrorContains(t, err, "overlap")
	requireWithinBudget(t, len(data), c, "aliased")

	_, err = ReadFrom(bytes.NewReader(nestedZip()), int64(len(nestedZip())))
	require.ErrorContains(t, err, "overlap")

	// A directory entry whose local header names another record.
	recs := []zrec{{"archive/data.pkl", newPk().op(opNone).stop()}, {"archive/version", []byte("3\n")}}
	bad := rawZip(recs, []zdir{{rec: 0}, {name: "archive/data/0", rec: 1}})
	_, err = ReadFrom(bytes.NewReader(bad), int64(len(bad)))
	require.ErrorContains(t, err, "local header names another file")

	// An archive after a prefix (a "base offset" that Go's archive/zip guesses and
	// torch's reader does not) and an end record that does not end the file.
	good := archiveOf(zrec{"data.pkl", newPk().op(opNone).stop()})
	_, err = ReadFrom(bytes.NewReader(good), int64(len(good)))
	require.NoError(t, err)
	shifted := append(rawZip([]zrec{{"x/y", nil}}, nil)[:34], good...)
	_, err = ReadFrom(bytes.NewReader(shifted), int64(len(shifted)))
	require.ErrorContains(t, err, "central directory")
	trailing := append(slices0(good), 0)
	_, err = ReadFrom(bytes.NewReader(trailing), int64(len(trailing)))
	require.ErrorContains(t, err, "does not end the file")
}

func slices0(b []byte) []byte { return append([]byte{}, b...) }

// TestDuplicateNames: torch finds records by a binary search over case-folded names, so
// with two records of one name (or names equal but for case) it reads one of them
// depending on the search; gotrain refuses such files. In particular two data.pkl
// records, the first calling posix.system, are never shown as the harmless second.
func TestDuplicateNames(t *testing.T) {
	_, err := ReadFrom(bytes.NewReader(dupPickleZip()), int64(len(dupPickleZip())))
	require.ErrorContains(t, err, `"archive/data.pkl" and "archive/data.pkl" have the same name to torch`)

	good := newPk().op(opEmptyDict).str("a").int(1).op(opSetItem).stop()
	for _, names := range [][2]string{{"data.pkl", "DATA.PKL"}, {"version", "Version"}} {
		data := archiveOf(zrec{names[0], good}, zrec{names[1], good})
		_, err := ReadFrom(bytes.NewReader(data), int64(len(data)))
		require.ErrorContains(t, err, "have the same name to torch", names)
	}
	// One record named in another case is found, as torch finds it.
	data := archiveOf(zrec{"DATA.PKL", good})
	v, err := ReadFrom(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	require.Equal(t, int64(1), mustGet(t, v, "a"))
	// No version record: torch refuses the file, and so does gotrain.
	nover := rawZip([]zrec{{"archive/data.pkl", good}}, []zdir{{rec: 0}})
	_, err = ReadFrom(bytes.NewReader(nover), int64(len(nover)))
	require.ErrorContains(t, err, "no version record")
}

func mustGet(t *testing.T, v any, path ...any) any {
	t.Helper()
	x, err := Get(v, path...)
	require.NoError(t, err)
	return x
}

// TestTorchParsesTheSame: hand-built files that torch could read differently from
// gotrain are loaded by the pinned torch; whatever torch loads, gotrain reads to the same
// value or refuses, and the file with a malicious first data.pkl is refused by both.
func TestTorchParsesTheSame(t *testing.T) {
	dir := t.TempDir()
	good := newPk().op(opEmptyDict).str("a").int(1).op(opSetItem).stop()
	files := map[string][]byte{
		"dup_pkl":   dupPickleZip(),
		"upper":     archiveOf(zrec{"DATA.PKL", good}),
		"mixedcase": archiveOf(zrec{"data.pkl", good}, zrec{"Data.pkl", newPk().op(opNone).stop()}),
		"keys":      archiveOf(zrec{"data.pkl", keyEqualityPickle()}),
		"zerostr":   archiveOf(zrec{"data.pkl", hostileSeedPickle(t, "zero stride")}, zrec{"data/0", make([]byte, 4)}),
	}
	var names, paths []string
	for name, data := range files {
		p := filepath.Join(dir, name+".pt")
		require.NoError(t, os.WriteFile(p, data, 0o644))
		names, paths = append(names, name), append(paths, p)
	}
	out := runInterop(t, "", append([]string{"describe"}, paths...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, len(paths))
	for i, line := range lines {
		var res struct {
			Desc  any
			Error string
		}
		require.NoError(t, jsonUnmarshal(line, &res), line)
		v, err := Read(paths[i])
		t.Logf("%s: torch: %.120s; gotrain: %v", names[i], line, err)
		if res.Error != "" {
			if names[i] == "dup_pkl" {
				require.Error(t, err, "torch refuses %s", names[i])
			}
			continue
		}
		if err != nil {
			continue // gotrain may refuse what torch reads ambiguously
		}
		require.Equal(t, res.Desc, describeValue(v), names[i])
	}
}

// hostileSeedPickle returns the data.pkl of a hostile seed archive.
func hostileSeedPickle(t *testing.T, name string) []byte {
	t.Helper()
	entries, err := readZipDir(bytes.NewReader(hostileSeeds()[name]), int64(len(hostileSeeds()[name])), nil)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasSuffix(e.name, "data.pkl") {
			b, err := readRecord(bytes.NewReader(hostileSeeds()[name]), &e, maxPickle, nil)
			require.NoError(t, err)
			return b
		}
	}
	t.Fatal("no data.pkl")
	return nil
}

// TestLegacyBounds: a legacy pickle that never ends is buffered only up to
// maxLegacyPickle, even in a sparse file of 100 GB; storage claims are checked against
// the file before anything is allocated for them, and a storage listed twice or not
// at all is refused.
func TestLegacyBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparse.pt")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = f.Write(hostileSeeds()["legacy endless"])
	require.NoError(t, err)
	require.NoError(t, f.Truncate(100<<30))
	require.NoError(t, f.Close())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Read(path)
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "legacy checkpoint pickles longer than")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(2*maxLegacyPickle))

	oversize := hostileSeeds()["legacy oversize"]
	_, err, c := measuredRead(oversize, ReadOptions{})
	require.ErrorContains(t, err, "larger than the file")
	requireWithinBudget(t, len(oversize), c, "legacy oversize")
	require.Less(t, c.alloc, uint64(1<<20))

	_, err = ReadFrom(bytes.NewReader(legacyFile(4, "0", "0")), int64(len(legacyFile(4, "0", "0"))))
	require.ErrorContains(t, err, "listed twice")
	_, err = ReadFrom(bytes.NewReader(legacyFileBlocks(4, 1)), int64(len(legacyFileBlocks(4, 1))))
	require.ErrorContains(t, err, "not in the storage key list")
	v, err := ReadFrom(bytes.NewReader(legacyFile(4, "0")), int64(len(legacyFile(4, "0"))))
	require.NoError(t, err)
	require.Equal(t, []float64{0, 0, 0, 0}, v.(*Tensor).Float64s())
}

// TestSafetensorsBounds: the header is bounded in size, entries, rank and shape, and
// names a tensor at most once.
func TestSafetensorsBounds(t *testing.T) {
	var h strings.Builder
	h.WriteString("{")
	for i := range 200_000 {
		if i > 0 {
			h.WriteString(",")
		}
		fmt.Fprintf(&h, `"t%d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}`, i)
	}
	h.WriteString("}")
	data := safetensorsOf(h.String(), nil)
	d, err, c := measuredSafetensors(data)
	require.NoError(t, err)
	require.Equal(t, 200_000, d.Len())
	requireWithinBudget(t, len(data), c, "many entries")

	for _, tc := range []struct{ header, err string }{
		{`{"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, "invalid shape"},
		{`{"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}}`, "reach past any storage"},
		{`{"w":{"dtype":"F32","shape":[` + strings.Repeat("1,", 2000) + `1],"data_offsets":[0,4]}}`, "dimensions"},
		{`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, "appears twice"},
		{`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} {}`, "after the JSON object"},
	} {
		data := safetensorsOf(tc.header, make([]byte, 8))
		_, _, err := ReadSafetensorsFrom(bytes.NewReader(data), int64(len(data)))
		require.ErrorContains(t, err, tc.err)
	}
	huge := make([]byte, 8)
	huge[3] = 0x10 // a header length of 256 MiB
	_, _, err = ReadSafetensorsFrom(bytes.NewReader(huge), 8)
	require.ErrorContains(t, err, "header length")
}

// TestZeroStrideViews: a zero-stride view (torch's expand) of 2^60 elements over a
// 4-byte storage reads and writes back as a view; the accessors and the safetensors
// writer refuse to materialise it with an error, and a small expand materialises.
func TestZeroStrideViews(t *testing.T) {
	v, err := readRaw(t, string(hostileSeedPickle(t, "zero stride")), map[string][]byte{"0": f32s(2.5)})
	require.NoError(t, err)
	tn := v.(*Tensor)
	require.Equal(t, int64(1)<<60, tn.Numel())
	for _, f := range []func() error{
		func() error { _, err := tn.ReadBytes(); return err },
		func() error { _, err := tn.ReadFloat64s(); return err },
		func() error { _, err := tn.ReadInt64s(); return err },
		func() error { _, err := tn.ReadComplex128s(); return err },
		func() error {
			d := NewDict()
			d.Set("x", tn)
			return WriteSafetensorsTo(io.Discard, d, nil)
		},
	} {
		require.ErrorContains(t, f(), "materialising them needs more than")
	}
	require.Nil(t, tn.Float64s())
	require.Nil(t, tn.Bytes())
	var out bytes.Buffer
	require.NoError(t, WriteTo(&out, tn))
	back, err := ReadFrom(bytes.NewReader(out.Bytes()), int64(out.Len()))
	require.NoError(t, err)
	require.Equal(t, []int64{0, 0}, back.(*Tensor).Strides)

	small := &Tensor{DType: Float32, Shape: []int64{3, 2}, Strides: []int64{0, 1}, Storage: &Storage{DType: Float32, Data: f32s(1, 2)}}
	got, err := small.ReadFloat64s()
	require.NoError(t, err)
	require.Equal(t, []float64{1, 2, 1, 2, 1, 2}, got)
	// An invalid view is an error too, not a panic.
	bad := &Tensor{DType: Float32, Shape: []int64{3}, Strides: []int64{2}, Storage: &Storage{DType: Float32, Data: f32s(1, 2)}}
	_, err = bad.ReadFloat64s()
	require.ErrorContains(t, err, "needs 5 elements")
	require.Nil(t, (&Tensor{DType: Float32, Shape: []int64{2}}).Float64s())
}

// TestBuildState: BUILD on an OrderedDict takes a dict, as torch's __dict__.update
// would read a tuple as key-value pairs; other states are refused, not reinterpreted.
func TestBuildState(t *testing.T) {
	od := newPk().global("collections", "OrderedDict").op(opEmptyTuple, opReduce)
	_, err := readRaw(t, string(od.op(opEmptyDict, opNone, opTuple2, opBuild).stop()), nil)
	require.ErrorContains(t, err, "BUILD state is a tuple")
}

func jsonUnmarshal(s string, v any) error {
	return jsonDecode([]byte(s), v)
}

// TestDictIndex: a Dict past the linear-search size keeps Python's key equality and
// insertion order through Set, Get and Delete.
func TestDictIndex(t *testing.T) {
	d := NewDict()
	for i := range 20 {
		d.Set(i, i)
	}
	d.Set(3.0, "three")
	d.Set(true, "one")
	d.Set(Tuple{int64(1), "a"}, "t")
	d.Set(Tuple{true, "a"}, "t2")
	require.Equal(t, 21, d.Len())
	v, _ := d.Get(int64(3))
	require.Equal(t, "three", v)
	v, _ = d.Get(1.0)
	require.Equal(t, "one", v)
	v, _ = d.Get(Tuple{1, "a"})
	require.Equal(t, "t2", v)
	d.Delete(false)
	d.Delete(5)
	require.Equal(t, 19, d.Len())
	_, ok := d.Get(0)
	require.False(t, ok)
	v, _ = d.Get(19)
	require.Equal(t, 19, v)
	require.Equal(t, []any{int64(1), int64(2), int64(3), int64(4), int64(6)}, d.Keys()[:5])
	require.Panics(t, func() { d.Set(math.NaN(), 1) })
}
