package checkpoint

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/stretchr/testify/require"
)

// sizedTensors is a dict of float32 tensors of the given sizes in bytes (a multiple of
// 4), named t0, t1, ...
func sizedTensors(sizes ...int) *Dict {
	d := NewDict()
	for i, n := range sizes {
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(i*7 + j)
		}
		d.Set(fmt.Sprintf("t%d", i), NewTensor(Float32, []int64{int64(n / 4)}, data))
	}
	return d
}

// readIndexJSON reads an index as Python's json would.
func readIndexJSON(t *testing.T, path string) (meta map[string]int64, weightMap map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var idx struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	require.NoError(t, json.Unmarshal(b, &idx))
	return idx.Metadata, idx.WeightMap
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// requireSameByName compares two dicts of tensors by name, whatever their order.
func requireSameByName(t *testing.T, want, got *Dict) {
	t.Helper()
	require.ElementsMatch(t, want.Keys(), got.Keys())
	for k, w := range want.All() {
		g, _ := got.Get(k)
		wt, gt := w.(*Tensor), g.(*Tensor)
		require.Equal(t, wt.DType, gt.DType, k)
		require.Equal(t, nonNil(wt.Shape), nonNil(gt.Shape), k)
		require.Equal(t, wt.Bytes(), gt.Bytes(), k)
	}
}

// TestShardPlan: shards split as transformers splits them: huggingface_hub's own
// example ([6, 6, 2, 6, 2, 2] GB with a 10 GB limit: [6], [6+2], [6+2+2]), a tensor
// larger than the limit in a shard of its own placed before the shard being filled,
// and no limit: one shard.
func TestShardPlan(t *testing.T) {
	for _, tc := range []struct {
		sizes []int
		max   int64
		want  [][]int
	}{
		{[]int{24, 24, 8, 24, 8, 8}, 40, [][]int{{0}, {1, 2}, {3, 4, 5}}},
		{[]int{8, 80, 8, 8}, 40, [][]int{{1}, {0, 2, 3}}},
		{[]int{8, 80, 36, 80}, 40, [][]int{{1}, {0}, {3}, {2}}},
		{[]int{8, 80, 8}, 0, [][]int{{0, 1, 2}}},
		{[]int{40, 40}, 40, [][]int{{0}, {1}}},
		{nil, 40, [][]int{nil}},
	} {
		plan, total, params := planShards(specsOf(t, sizedTensors(tc.sizes...)), tc.max)
		require.Equal(t, tc.want, plan, "%v / %d", tc.sizes, tc.max)
		sum := 0
		for _, s := range tc.sizes {
			sum += s
		}
		require.Equal(t, int64(sum), total)
		require.Equal(t, int64(sum/4), params)
	}
}

// TestSafetensorsDirRoundTrip: a sharded save is named, indexed and read back as
// transformers does it; a save that fits is one file; each save removes the files of
// the previous one it does not use (stale shards, the single file, the index); the
// adapter name works the same way.
func TestSafetensorsDirRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	want := sizedTensors(24, 24, 8, 24, 8, 8)
	require.NoError(t, WriteSafetensorsDir(dir, "", want, map[string]string{"note": "x"}, 40))
	require.Equal(t, []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
		"model-00003-of-00003.safetensors", "model.safetensors.index.json"}, dirNames(t, dir))
	meta, wm := readIndexJSON(t, filepath.Join(dir, "model.safetensors.index.json"))
	require.Equal(t, map[string]int64{"total_size": 96, "total_parameters": 24}, meta)
	require.Equal(t, map[string]string{"t0": "model-00001-of-00003.safetensors", "t1": "model-00002-of-00003.safetensors",
		"t2": "model-00002-of-00003.safetensors", "t3": "model-00003-of-00003.safetensors",
		"t4": "model-00003-of-00003.safetensors", "t5": "model-00003-of-00003.safetensors"}, wm)
	got, gotMeta, err := ReadSafetensorsDir(dir, ModelWeights)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"format": "pt", "note": "x"}, gotMeta)
	requireSameTensors(t, want, got) // shards in order: the dict's order here

	// Two shards now: the third of the earlier save goes.
	want = sizedTensors(24, 24, 24)
	require.NoError(t, WriteSafetensorsDir(dir, "", want, nil, 50))
	require.Equal(t, []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
		"model.safetensors.index.json"}, dirNames(t, dir))
	got, _, err = ReadSafetensorsDir(dir, "")
	require.NoError(t, err)
	requireSameTensors(t, want, got)

	// It fits: one file, and neither the shards nor the index stay.
	require.NoError(t, WriteSafetensorsDir(dir, "", want, nil, 0))
	require.Equal(t, []string{"model.safetensors"}, dirNames(t, dir))
	got, _, err = ReadSafetensorsDir(dir, "")
	require.NoError(t, err)
	requireSameTensors(t, want, got)

	// Sharded again: the single file, which readers prefer, goes.
	require.NoError(t, WriteSafetensorsDir(dir, "", want, nil, 30))
	require.Equal(t, []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
		"model-00003-of-00003.safetensors", "model.safetensors.index.json"}, dirNames(t, dir))

	// An adapter beside the model: its own files, the model's untouched.
	adapter := sizedTensors(8, 8)
	require.NoError(t, WriteSafetensorsDir(dir, AdapterWeights, adapter, nil, 0))
	require.Contains(t, dirNames(t, dir), "adapter_model.safetensors")
	require.Len(t, dirNames(t, dir), 5)
	got, _, err = ReadSafetensorsDir(dir, AdapterWeights)
	require.NoError(t, err)
	requireSameTensors(t, adapter, got)
	got, _, err = ReadSafetensorsDir(dir, "")
	require.NoError(t, err)
	requireSameTensors(t, want, got)
}

// TestSafetensorsDirFailedSave: a save that fails part-way (a tensor that cannot be
// written; a shard whose file cannot be created) leaves no file of its own, temporary
// or not, and the previous save readable as it was.
func TestSafetensorsDirFailedSave(t *testing.T) {
	dir := t.TempDir()
	old := sizedTensors(24, 24, 24)
	require.NoError(t, WriteSafetensorsDir(dir, "", old, nil, 30))
	before := dirNames(t, dir)

	bad := sizedTensors(24, 24, 24)
	bad.Set("t9", "not a tensor")
	require.ErrorContains(t, WriteSafetensorsDir(dir, "", bad, nil, 30), `"t9" is a str, not a tensor`)
	require.Equal(t, before, dirNames(t, dir))

	// Shard 2 of 4 is a directory: shard 1 is written, shard 2 cannot be, and shard 1
	// must not replace the old one. (A symlink at a shard's name, even a dangling one,
	// is no failure: it is replaced, TestSafetensorsDirReplacesLinks.)
	require.NoError(t, os.Remove(filepath.Join(dir, "model-00002-of-00003.safetensors")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x"), nil, 0o644))
	link := filepath.Join(dir, "model-00002-of-00004.safetensors")
	require.NoError(t, os.MkdirAll(filepath.Join(link, "sub"), 0o755))
	err := WriteSafetensorsDir(dir, "", sizedTensors(24, 24, 24, 24), nil, 30)
	require.ErrorContains(t, err, "model-00002-of-00004.safetensors")
	require.ElementsMatch(t, []string{"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors",
		"model.safetensors.index.json", "x", "model-00002-of-00004.safetensors"}, dirNames(t, dir))
	_, _, err = ReadSafetensorsDir(dir, "")
	require.ErrorContains(t, err, "model-00002-of-00003.safetensors")
}

// TestSafetensorsDirIndexRules: an index is checked against its directory and shards,
// with errors naming the file: shard names that leave the directory, missing shards,
// shards that are not regular files, tensors missing from their shard, in another
// shard or in no entry, names listed twice, and metadata the shards disagree on.
func TestSafetensorsDirIndexRules(t *testing.T) {
	shard := func(t *testing.T, dir, file string, meta map[string]string, names ...string) {
		d := NewDict()
		for _, n := range names {
			d.Set(n, NewTensor(Uint8, []int64{1}, []byte{1}))
		}
		require.NoError(t, WriteSafetensors(filepath.Join(dir, file), d, meta))
	}
	for _, tc := range []struct {
		name, index, err string
		setup            func(t *testing.T, dir string)
	}{
		{"traversal", `{"weight_map":{"a":"../a.safetensors"}}`, `shard "../a.safetensors": "../a.safetensors" is not a file name in the directory`, nil},
		{"absolute", `{"weight_map":{"a":"/etc/passwd"}}`, "is not a file name in the directory", nil},
		{"subdirectory", `{"weight_map":{"a":"sub/a.safetensors"}}`, "is not a file name in the directory", nil},
		{"missing shard", `{"weight_map":{"a":"s1.safetensors"}}`, "s1.safetensors: no such file", nil},
		{"directory shard", `{"weight_map":{"a":"s1.safetensors"}}`, "s1.safetensors is a directory, not a regular file",
			func(t *testing.T, dir string) {
				require.NoError(t, os.Mkdir(filepath.Join(dir, "s1.safetensors"), 0o755))
			}},
		{"not in its shard", `{"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}}`, `lists "b" in`,
			func(t *testing.T, dir string) { shard(t, dir, "s1.safetensors", nil, "a") }},
		{"unlisted tensor", `{"weight_map":{"a":"s1.safetensors"}}`, `holds "b", which`,
			func(t *testing.T, dir string) { shard(t, dir, "s1.safetensors", nil, "a", "b") }},
		{"in another shard", `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`, `holds "b", which`,
			func(t *testing.T, dir string) {
				shard(t, dir, "s1.safetensors", nil, "a", "b")
				shard(t, dir, "s2.safetensors", nil, "b")
			}},
		{"listed twice", `{"weight_map":{"a":"s1.safetensors","a":"s2.safetensors"}}`, `weight_map: "a" appears twice`, nil},
		{"no weight_map", `{"metadata":{"total_size":1}}`, "no weight_map", nil},
		{"not an object", `{"weight_map":["a"]}`, "want an object", nil},
		{"metadata disagree", `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`, `disagree on metadata "format"`,
			func(t *testing.T, dir string) {
				shard(t, dir, "s1.safetensors", map[string]string{"format": "pt"}, "a")
				shard(t, dir, "s2.safetensors", map[string]string{"format": "np"}, "b")
			}},
		{"deep metadata", `{"metadata":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"weight_map":{}}`, "nested deeper than 64", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			index := filepath.Join(dir, "model.safetensors.index.json")
			require.NoError(t, os.WriteFile(index, []byte(tc.index), 0o644))
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			_, _, err := ReadSafetensorsDir(dir, "")
			require.ErrorContains(t, err, tc.err)
			require.ErrorContains(t, err, dir)
		})
	}

	// What the rules allow: other members and metadata of any shape, shards through
	// symlinks into the Hugging Face cache's blobs (a snapshot's layout), an empty map.
	repo := filepath.Join(t.TempDir(), "models--org--tiny")
	dir, blobs := filepath.Join(repo, "snapshots", "rev"), filepath.Join(repo, "blobs")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.MkdirAll(blobs, 0o755))
	shard(t, blobs, "blob1", map[string]string{"format": "pt"}, "a", "b")
	require.NoError(t, os.Symlink(filepath.Join("..", "..", "blobs", "blob1"), filepath.Join(dir, "s1.safetensors")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"),
		[]byte(`{"metadata":{"total_size":2.0,"x":[null,true,{"y":-1e3}]},"extra":"\u00e9","weight_map":{"b":"s1.safetensors","a":"s1.safetensors"}}`), 0o644))
	d, meta, err := ReadSafetensorsDir(dir, "")
	require.NoError(t, err)
	require.Equal(t, []any{"a", "b"}, d.Keys())
	require.Equal(t, map[string]string{"format": "pt"}, meta)

	// A shard that links out of the directory (not into the cache's blobs) is refused,
	// naming it, and its contents are not read.
	plain := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(blobs, "blob1"), filepath.Join(plain, "s1.safetensors")))
	require.NoError(t, os.WriteFile(filepath.Join(plain, "model.safetensors.index.json"), []byte(`{"weight_map":{"a":"s1.safetensors"}}`), 0o644))
	_, _, err = ReadSafetensorsDir(plain, "")
	require.ErrorContains(t, err, filepath.Join(plain, "s1.safetensors")+" leads to")
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(plain, "model.safetensors")))
	_, _, err = ReadSafetensorsDir(plain, "")
	require.ErrorContains(t, err, "leads to /etc/passwd, outside")

	_, _, err = ReadSafetensorsDir(t.TempDir(), "")
	require.ErrorContains(t, err, "holds neither model.safetensors nor model.safetensors.index.json")
	_, _, err = ReadSafetensorsDir(dir, "../model")
	require.ErrorContains(t, err, "not a file name")
	require.ErrorContains(t, WriteSafetensorsDir(dir, "a/b", NewDict(), nil, 0), "not a file name")
}

// TestSafetensorsDirIndexBounds: a 100 MB index listing 1.8 million tensors is refused
// at the entry past MaxHeaderEntries, having allocated what those entries need.
func TestSafetensorsDirIndexBounds(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "model.safetensors.index.json"))
	require.NoError(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString(`{"weight_map":{`)
	for i := range 1_800_000 {
		fmt.Fprintf(w, `"t%07d":"s.safetensors",`, i)
	}
	w.WriteString(`"end":"s.safetensors"}}`)
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	var rerr error
	total, _ := allocated(func() { _, _, rerr = ReadSafetensorsDir(dir, "") })
	t.Logf("%v; %d MB allocated", rerr, total>>20)
	requireLimit(t, rerr, "header entries")
	require.Less(t, total, uint64(160<<20))
}

// TestSafetensorsDirPython: directories written by transformers' save_pretrained (a
// tiny GPT-2, 20 KB shards) and huggingface_hub's save_torch_state_dict (every
// safetensors dtype, NaNs, a scalar, an empty tensor, one tensor past the shard size)
// read in Go bit for bit; Go shards that state dict exactly as huggingface_hub did
// (file names, weight_map, total_size); and what Go writes sharded, huggingface_hub's
// loader, transformers' load_state_dict, safetensors' safe_open and
// GPT2LMHeadModel.from_pretrained read back bit for bit.
func TestSafetensorsDirPython(t *testing.T) {
	py := testpy.Python(t, "torch", "safetensors", "transformers", "huggingface_hub")
	script, err := os.ReadFile("testdata/shards.py")
	require.NoError(t, err)
	dir := t.TempDir()
	cmd := exec.Command(py, "-c", string(script), dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if err != nil {
		// stderr is complete (and no longer written) once the process is waited for.
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("phase 1: %v: %s", err, stderr.String())
	}
	// desc: name -> [dtype, shape, sha256 of the bytes].
	type desc = map[string][3]any
	var gen struct {
		Model, SD desc
		SDOrder   []string `json:"sd_order"`
		Files     map[string][]string
	}
	require.NoError(t, json.Unmarshal([]byte(line), &gen))
	t.Logf("transformers wrote %v", gen.Files)
	require.Greater(t, len(gen.Files["hf_model"]), 4, "save_pretrained wrote no shards")

	requireDesc := func(what string, d *Dict, want desc, skip ...string) {
		t.Helper()
		n := 0
		for k, v := range d.All() {
			name := k.(string)
			w, ok := want[name]
			require.True(t, ok, "%s: %s not in Python's state dict", what, name)
			tn := v.(*Tensor)
			require.Equal(t, w[0], dtypes[tn.DType].st, "%s %s", what, name)
			require.Equal(t, fmt.Sprint(w[1]), fmt.Sprint(toAnys(tn.Shape)), "%s %s", what, name)
			sum := sha256.Sum256(tn.Bytes())
			require.Equal(t, w[2], hex.EncodeToString(sum[:]), "%s %s: bytes differ", what, name)
			n++
		}
		for _, s := range skip {
			if _, ok := want[s]; ok {
				n++
			}
		}
		require.Equal(t, len(want), n, "%s: tensor count", what)
	}
	model, meta, err := ReadSafetensorsDir(filepath.Join(dir, "hf_model"), "")
	require.NoError(t, err)
	require.Equal(t, "pt", meta["format"])
	requireDesc("save_pretrained", model, gen.Model, "lm_head.weight") // tied: not saved
	sd, _, err := ReadSafetensorsDir(filepath.Join(dir, "hf_sd"), "")
	require.NoError(t, err)
	requireDesc("save_torch_state_dict", sd, gen.SD)

	// The state dict in Python's order, sharded by Go as huggingface_hub sharded it.
	ordered := NewDict()
	for _, k := range gen.SDOrder {
		v, _ := sd.Get(k)
		ordered.Set(k, v)
	}
	goSD := filepath.Join(dir, "go_sd")
	require.NoError(t, WriteSafetensorsDir(goSD, "", ordered, nil, 4096))
	hfMeta, hfMap := readIndexJSON(t, filepath.Join(dir, "hf_sd", "model.safetensors.index.json"))
	goMeta, goMap := readIndexJSON(t, filepath.Join(goSD, "model.safetensors.index.json"))
	require.Equal(t, hfMap, goMap, "Go's shards differ from huggingface_hub's")
	require.Equal(t, hfMeta["total_size"], goMeta["total_size"])
	require.Equal(t, gen.Files["hf_sd"], dirNames(t, goSD))

	// The model, resharded by Go with another size, with transformers' config.
	goModel := filepath.Join(dir, "go_model")
	require.NoError(t, WriteSafetensorsDir(goModel, "", model, map[string]string{"format": "pt"}, 30_000))
	cfg, err := os.ReadFile(filepath.Join(dir, "hf_model", "config.json"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(goModel, "config.json"), cfg, 0o644))
	require.Greater(t, len(dirNames(t, goModel)), 3)

	_, err = fmt.Fprintf(stdin, "%s %s\n", goSD, goModel)
	require.NoError(t, err)
	require.NoError(t, stdin.Close())
	rest, err := io.ReadAll(out)
	require.NoError(t, err)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("phase 2: %v: %s", err, stderr.String())
	}
	t.Logf("Python: %s", bytes.TrimSpace(rest))
	var res struct{ OK bool }
	require.NoError(t, json.Unmarshal(rest, &res))
	require.True(t, res.OK)
	require.True(t, slices.Contains(dirNames(t, goModel), "model.safetensors.index.json"))
}

// TestSafetensorsDirReplacesLinks: a save into a directory whose shard, index and
// single-file names are symlinks (to a file outside, or dangling) leaves the link
// targets as they were and writes regular files that read back as the tensors.
func TestSafetensorsDirReplacesLinks(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	outside := filepath.Join(other, "outside")
	require.NoError(t, os.WriteFile(outside, []byte("not to be overwritten"), 0o644))
	names := []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors",
		"model.safetensors.index.json"}
	for _, n := range names {
		require.NoError(t, os.Symlink(outside, filepath.Join(dir, n)))
	}
	require.NoError(t, os.Symlink(filepath.Join(other, "dangling"), filepath.Join(dir, "model.safetensors")))
	want := sizedTensors(24, 24, 24)
	require.NoError(t, WriteSafetensorsDir(dir, "", want, nil, 30))
	b, err := os.ReadFile(outside)
	require.NoError(t, err)
	require.Equal(t, "not to be overwritten", string(b))
	_, err = os.Lstat(filepath.Join(other, "dangling"))
	require.True(t, os.IsNotExist(err), "the dangling link's target was created")
	require.Equal(t, names, dirNames(t, dir))
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(dir, n))
		require.NoError(t, err)
		require.True(t, fi.Mode().IsRegular(), n)
	}
	got, _, err := ReadSafetensorsDir(dir, "")
	require.NoError(t, err)
	requireSameTensors(t, want, got)
}
