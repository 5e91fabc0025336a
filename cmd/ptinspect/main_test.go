package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testsupport"

	"github.com/stretchr/testify/require"
)

func TestPrint(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, "../../checkpoint/testdata/training_checkpoint.pt", options{}))
	s := out.String()
	for _, want := range []string{
		"dict (15 items)\n",
		"  'model_state_dict': OrderedDict (9 items)\n",
		"    '0.weight': tensor float32 [8, 4]\n",
		"        'step': tensor float32 [] = 2.0\n",
		"        'betas': (0.9, 0.999)\n",
		"  'global_step': 1099511627776\n",
		"  'best_metric': 0.8125\n",
		"    'name': 'run-é'\n",
		"    (1, 'a'): 'tuple key'\n",
	} {
		require.Contains(t, s, want)
	}
}

func TestJSON(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, "../../checkpoint/testdata/views.pt", options{json: true}))
	var v struct {
		Type  string
		Items []struct {
			Key   struct{ Value string }
			Value struct {
				Type    string
				DType   string
				Shape   []int64
				Strides []int64
				Offset  int64
			}
		}
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &v))
	require.Equal(t, "dict", v.Type)
	require.Equal(t, "t", v.Items[1].Key.Value)
	require.Equal(t, "float32", v.Items[1].Value.DType)
	require.Equal(t, []int64{4, 3}, v.Items[1].Value.Shape)
	require.Equal(t, []int64{1, 4}, v.Items[1].Value.Strides)
}

func TestNotACheckpoint(t *testing.T) {
	var out bytes.Buffer
	require.Error(t, run(&out, "main.go", options{}))
}

func TestSafetensors(t *testing.T) {
	d := checkpoint.NewDict()
	d.Set("w", checkpoint.NewTensor(checkpoint.Int16, []int64{2}, []byte{1, 0, 0xff, 0xff}))
	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, checkpoint.WriteSafetensors(path, d, map[string]string{"format": "pt"}))
	var out bytes.Buffer
	require.NoError(t, run(&out, path, options{}))
	require.Contains(t, out.String(), "'w': tensor int16 [2] = [1, -1]\n")
	require.Contains(t, out.String(), "'format': 'pt'\n")
}

// controls is every C0 control, DEL, every C1 control, and the characters that reorder
// or break lines (bidi overrides, line separators), which a terminal may act on.
func controls() string {
	var sb strings.Builder
	for c := rune(0); c < 0x20; c++ {
		sb.WriteRune(c)
	}
	sb.WriteRune(0x7f)
	for c := rune(0x80); c < 0xa0; c++ {
		sb.WriteRune(c)
	}
	sb.WriteString("\u202e\u2066\u2028\u2029\ufeff")
	sb.WriteString("\x1b]0;title\x07\x1b[2J\r# 0 tensors, forged\n")
	return sb.String()
}

// requireNoControls checks output byte by byte: nothing below 0x20 but the newline, no
// DEL, valid UTF-8, and no rune that is not printable.
func requireNoControls(t *testing.T, out []byte) {
	t.Helper()
	for i, c := range out {
		require.False(t, (c < 0x20 && c != '\n') || c == 0x7f, "raw control byte 0x%02x at %d", c, i)
	}
	require.True(t, utf8.Valid(out))
	for i, r := range string(out) {
		require.True(t, r == '\n' || unicode.IsPrint(r), "non-printable %U at %d", r, i)
	}
}

// TestControlCharacters: keys, strings, bytes, attribute names, safetensors metadata
// and error messages (a refused global's name) with every control character print
// escaped, in text and in JSON; the JSON still decodes to the original strings.
func TestControlCharacters(t *testing.T) {
	dir := t.TempDir()
	c := controls()
	d := checkpoint.NewOrderedDict()
	d.Set(c, c)
	d.Set("plain", []byte(c))
	d.Set(checkpoint.Tuple{c, int64(1)}, []any{c})
	d.Attrs = checkpoint.NewDict()
	d.Attrs.Set(c, c)
	pt := filepath.Join(dir, "c.pt")
	require.NoError(t, checkpoint.Write(pt, d))
	st := filepath.Join(dir, "c.safetensors")
	w := checkpoint.NewDict()
	w.Set(c, checkpoint.NewTensor(checkpoint.Uint8, []int64{1}, []byte{1}))
	require.NoError(t, checkpoint.WriteSafetensors(st, w, map[string]string{c: c}))

	for _, path := range []string{pt, st} {
		var out bytes.Buffer
		require.NoError(t, run(&out, path, options{maxString: 1000}))
		requireNoControls(t, out.Bytes())
		require.Contains(t, out.String(), `\x1b]0;title\x07\x1b[2J\r# 0 tensors, forged\n`)
		require.Contains(t, out.String(), `\u202e`)

		out.Reset()
		require.NoError(t, run(&out, path, options{json: true, maxString: 1000}))
		requireNoControls(t, out.Bytes())
		var v any
		require.NoError(t, json.Unmarshal(out.Bytes(), &v))
		require.Contains(t, fmt.Sprint(v), c)
	}

	// A file refused for a global whose name holds controls: the error is escaped.
	evil := "\x80\x02c" + "os\x1b[2J\nsys\x07tem\n."
	require.Contains(t, checkpointError(t, dir, evil), `\x1b[2J`)
	requireNoControls(t, []byte(escape(checkpointError(t, dir, evil))))
}

// checkpointError returns the error ptinspect reports for a file of the given pickle.
func checkpointError(t *testing.T, dir, pkl string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, r := range [][2]string{{"archive/data.pkl", pkl}, {"archive/version", "3\n"}} {
		f, err := zw.CreateHeader(&zip.FileHeader{Name: r[0], Method: zip.Store})
		require.NoError(t, err)
		_, err = f.Write([]byte(r[1]))
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	p := filepath.Join(dir, "evil.pt")
	require.NoError(t, os.WriteFile(p, buf.Bytes(), 0o644))
	err := run(io.Discard, p, options{})
	require.Error(t, err)
	return err.Error()
}

// sharedStringFile writes a checkpoint whose one string of size bytes is referenced
// refs times (the pickle memo): small on disk, size·refs when expanded.
func sharedStringFile(t *testing.T, size, refs int) string {
	t.Helper()
	s := strings.Repeat("x", size)
	list := make([]any, refs)
	for i := range list {
		list[i] = s
	}
	d := checkpoint.NewDict()
	d.Set("shared", list)
	m := checkpoint.NewDict()
	for i := range refs {
		m.Set(i, s)
	}
	d.Set("map", m)
	p := filepath.Join(t.TempDir(), "shared.pt")
	require.NoError(t, checkpoint.Write(p, d))
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.Less(t, fi.Size(), int64(2*size+16*refs), "Write did not keep the sharing")
	return p
}

// TestBoundedOutput: a 1 MiB string shared 1024 times (2 GiB expanded in two
// containers) prints cut, in text and JSON, with every bound honoured, including with
// no item limit, in memory linear in what is printed.
func TestBoundedOutput(t *testing.T) {
	p := sharedStringFile(t, 1<<20, 1024)
	for _, o := range []options{
		{maxItems: 50, maxString: 200, maxOutput: 4 << 20},
		{json: true, maxItems: 50, maxString: 200, maxOutput: 4 << 20},
		{maxItems: 0, maxString: 0, maxOutput: 1 << 20},
		{json: true, maxItems: 0, maxString: 0, maxOutput: 1 << 20},
	} {
		var out bytes.Buffer
		total := testsupport.AllocatedBy(func() { require.NoError(t, run(&out, p, o)) })
		t.Logf("%+v: %d bytes printed, %d MB allocated", o, out.Len(), total>>20)
		require.Less(t, out.Len(), int(o.maxOutput)+(64<<10), "%+v", o)
		require.Less(t, total, uint64(64<<20)+40*uint64(o.maxOutput), "%+v", o)
		if !o.json && o.maxString > 0 {
			require.Contains(t, out.String(), "... (1048376 more bytes elided)")
			require.Contains(t, out.String(), "... 974 more")
		}
		if o.json {
			var v any
			require.NoError(t, json.Unmarshal(out.Bytes(), &v), "%+v", o)
		}
	}
}

// writeHeaderFile writes a header-only safetensors file whose header is exactly size
// bytes: prefix, unit(i) for as many i as fit, spaces, suffix. It streams, so a 100 MB
// file costs the test no memory.
func writeHeaderFile(t *testing.T, path string, size int, prefix, suffix string, unitLen int, unit func(i int, b []byte)) int {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	require.NoError(t, binary.Write(w, binary.LittleEndian, uint64(size)))
	w.WriteString(prefix)
	n := (size - len(prefix) - len(suffix)) / unitLen
	b := make([]byte, unitLen)
	for i := range n {
		unit(i, b)
		w.Write(b)
	}
	w.WriteString(strings.Repeat(" ", size-len(prefix)-len(suffix)-n*unitLen))
	w.WriteString(suffix)
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	return n
}

// TestHostileFiles: the files of issue 36, built here: a 100 MB safetensors header
// giving one tensor 50 million dimensions, one listing 1.8 million empty tensors, and
// a 0.5 MB checkpoint whose one string is shared through four levels of lists of 16
// references (65536 uses, 32 GB expanded). ptinspect refuses the first two with the
// reader's message and prints the third within its output limit, in text and JSON,
// with and without the default limits; each within 512 MB of allocation.
func TestHostileFiles(t *testing.T) {
	dir := t.TempDir()
	const size = 100_000_000
	dims := filepath.Join(dir, "dims.safetensors")
	writeHeaderFile(t, dims, size, `{"w":{"dtype":"F32","data_offsets":[0,0],"shape":[`, `0]}}`, 2,
		func(_ int, b []byte) { copy(b, "0,") })
	entries := filepath.Join(dir, "entries.bin") // no suffix: found as safetensors after the .pt readers fail
	const entry = `"#####":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},`
	n := writeHeaderFile(t, entries, size, "{", `"end":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, len(entry),
		func(i int, b []byte) {
			copy(b, entry)
			for j := 5; j >= 1; j-- {
				b[j] = "0123456789abcdefghijklmnopqrstuvwxyz"[i%36]
				i /= 36
			}
		})
	require.Greater(t, n, 1_750_000)

	s := any(strings.Repeat("s", 512<<10))
	for range 4 {
		l := make([]any, 16)
		for i := range l {
			l[i] = s
		}
		s = l
	}
	shared := filepath.Join(dir, "shared.pt")
	require.NoError(t, checkpoint.Write(shared, s))
	fi, err := os.Stat(shared)
	require.NoError(t, err)
	require.Less(t, fi.Size(), int64(600<<10))

	for _, tc := range []struct {
		path, err string
	}{
		{dims, "shape of more than 1024 dimensions"},
		{entries, "needs more header entries than its budget of 262144"},
		{shared, ""},
	} {
		for _, o := range []options{
			{maxItems: 50, maxString: 200, maxOutput: 4 << 20},
			{json: true, maxItems: 50, maxString: 200, maxOutput: 4 << 20},
			{},
			{json: true},
		} {
			// The output goes to a file, so that what the test keeps of it is not
			// counted as ptinspect's memory.
			f, err := os.Create(filepath.Join(dir, "out"))
			require.NoError(t, err)
			total := testsupport.AllocatedBy(func() { err = run(f, tc.path, o) })
			require.NoError(t, f.Close())
			b, rerr := os.ReadFile(f.Name())
			require.NoError(t, rerr)
			out := bytes.NewBuffer(b)
			t.Logf("%s %+v: %v; %d bytes printed, %d MB allocated", filepath.Base(tc.path), o, err, out.Len(), total>>20)
			require.Less(t, total, uint64(512<<20))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				continue
			}
			require.NoError(t, err)
			limit, _, err := outputLimit(tc.path, o.maxOutput)
			require.NoError(t, err)
			require.Less(t, out.Len(), int(limit)+(64<<10))
			// (strings.Contains: a failure does not print the megabytes of output.)
			switch {
			case o.json:
				var v any
				require.NoError(t, json.Unmarshal(out.Bytes(), &v))
				require.True(t, strings.Contains(out.String(), `"length": 524288`))
			case o.maxString > 0:
				require.True(t, strings.Contains(out.String(), "'... (524088 more bytes elided)"))
				fallthrough
			default:
				require.True(t, strings.Contains(out.String(), "# output cut after"))
			}
		}
	}
}

// TestOutputLimit: a shared structure that expands exponentially (each level a list of
// the previous one twice) prints up to --max-output and says so.
func TestOutputLimit(t *testing.T) {
	v := any("leaf")
	for range 40 {
		v = []any{v, v}
	}
	p := filepath.Join(t.TempDir(), "laughs.pt")
	require.NoError(t, checkpoint.Write(p, v))
	var out bytes.Buffer
	require.NoError(t, run(&out, p, options{maxItems: 50, maxString: 200, maxOutput: 64 << 10}))
	require.LessOrEqual(t, out.Len(), 64<<10+200)
	require.Contains(t, out.String(), "# output cut after")
	out.Reset()
	require.NoError(t, run(&out, p, options{json: true, maxOutput: 64 << 10}))
	require.Less(t, out.Len(), 1<<20)
	require.Contains(t, out.String(), `"omitted"`)
}
