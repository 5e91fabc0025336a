package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/internal/testsupport"
	"github.com/gotrain/gotrain/torch/data"
)

// classFolders are three Fashion-MNIST classes, as folder names.
var classFolders = map[int]string{1: "trouser", 7: "sneaker", 9: "ankle_boot"}

// writeImageFolder writes real Fashion-MNIST test images as PNG files into
// root/<split>/<class>/, perClass for each split.
func writeImageFolder(t *testing.T, root string, splits []string, perClass int) {
	t.Helper()
	fm, err := data.FashionMNIST("", false)
	if err != nil {
		t.Skipf("Fashion-MNIST is not installed: %v", err)
	}
	count := map[string]int{}
	for i := 0; i < fm.Len() && len(count) < len(splits)*len(classFolders)*perClass; i++ {
		class, ok := classFolders[int(fm.Labels[i])]
		if !ok {
			continue
		}
		split := ""
		for _, s := range splits {
			if count[s+class] < perClass {
				split = s
				break
			}
		}
		if split == "" {
			continue
		}
		count[split+class]++
		dir := filepath.Join(root, split, class)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		img := image.NewGray(image.Rect(0, 0, fm.Width, fm.Height))
		copy(img.Pix, fm.Pixels[i*fm.Width*fm.Height:(i+1)*fm.Width*fm.Height])
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%05d.png", i)))
		require.NoError(t, err)
		require.NoError(t, png.Encode(f, img))
		require.NoError(t, f.Close())
	}
}

// loadsInPython opens a checkpoint with torch.load(weights_only=True) and returns its
// class_names (nil when it has none) and the shape of every model weight.
func loadsInPython(t *testing.T, path string) (names []string, shapes map[string][]int64) {
	out := testpy.Run(t, `
import sys, json, torch
ck = torch.load(sys.argv[1], weights_only=True)
print(json.dumps({"names": ck.get("class_names"), "shapes": {k: list(v.shape) for k, v in ck["model_state_dict"].items()}}))
`, []string{"torch"}, path)
	var got struct {
		Names  []string           `json:"names"`
		Shapes map[string][]int64 `json:"shapes"`
	}
	require.NoError(t, json.Unmarshal(out, &got), string(out))
	return got.Names, got.Shapes
}

func configClassNames(t *testing.T, runDir string) []string {
	b, err := os.ReadFile(filepath.Join(runDir, "config.json"))
	require.NoError(t, err)
	var cfg struct {
		ClassNames []string `json:"class_names"`
	}
	require.NoError(t, json.Unmarshal(b, &cfg))
	return cfg.ClassNames
}

// TestDataImageFolder: --data on an ImageFolder tree with train/ and val/ trains the
// default CNN one epoch; the class names (sorted folder names) are in config.json and in
// the checkpoint, which Python loads with weights_only=True. A single tree with
// --val-split trains an MLP whose input size follows --image-size and the RGB images.
func TestDataImageFolder(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tree")
	writeImageFolder(t, root, []string{"train", "val"}, 12)
	want := []string{"ankle_boot", "sneaker", "trouser"}
	runs := t.TempDir()
	out, err := child("--data", root, "--epochs", "1", "--batch-size", "8", "--workers", "1", "--threads", "1",
		"--runs-dir", runs, "--experiment", "tree").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "val samples: 36")
	assert.Equal(t, want, configClassNames(t, filepath.Join(runs, "tree")))
	names, shapes := loadsInPython(t, filepath.Join(runs, "tree", "checkpoints", "last.pt"))
	assert.Equal(t, want, names)
	heads := 0
	for k, s := range shapes {
		if strings.HasSuffix(k, ".bias") && fmt.Sprint(s) == "[3]" {
			heads++
		}
	}
	assert.Equal(t, 1, heads, "the classifier has one output per class folder: %v", shapes)

	out, err = child("--data", filepath.Join(root, "train"), "--val-split", "0.25", "--model", "mlp", "--image-size", "14",
		"--epochs", "1", "--batch-size", "8", "--workers", "1", "--threads", "1", "--runs-dir", runs, "--experiment", "split").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "train samples: 27")
	_, shapes = loadsInPython(t, filepath.Join(runs, "split", "checkpoints", "last.pt"))
	assert.Equal(t, []int64{256, 3 * 14 * 14}, shapes["1.weight"], "an RGB 14x14 input")
	assert.Equal(t, []int64{3, 256}, shapes["3.weight"])
	v, err := checkpoint.Read(filepath.Join(runs, "split", "checkpoints", "last.pt"))
	require.NoError(t, err)
	cfg, err := checkpoint.GetString(v, "config")
	require.NoError(t, err)
	assert.Contains(t, cfg, `"class_names":["ankle_boot","sneaker","trouser"]`)
}

// TestRangeChecks: every numeric flag out of range is refused before training (no run
// directory is made), with a message naming the flag.
func TestRangeChecks(t *testing.T) {
	for _, c := range []struct{ flag, value, want string }{
		{"--batch-size", "0", "--batch-size (batch_size in a config file) must be >= 1, got 0"},
		{"--lr", "nan", "--lr (lr in a config file) must be a finite number > 0, got NaN"},
		{"--lr", "-1", "--lr"},
		{"--epochs", "0", "--epochs"},
		{"--workers", "-1", "--workers"},
		{"--accumulation", "0", "--accumulation"},
		{"--grad-clip", "inf", "--grad-clip"},
		{"--momentum", "1", "--momentum"},
		{"--weight-decay", "-0.1", "--weight-decay"},
		{"--val-split", "1", "--val-split"},
		{"--image-size", "-3", "--image-size"},
		{"--top-k", "-1", "--top-k"},
		{"--patience", "-2", "--patience"},
		{"--threads", "-1", "--threads"},
		{"--log-every", "-1", "--log-every"},
		{"--nproc-per-node", "0", "--nproc-per-node must be >= 1"},
		{"--master-port", "70000", "--master-port"},
		{"--monitor", "val_f2", "--monitor-mode"},
		{"--amp", "fp8", "fp8"},
		// Data-side sizes: bounded above too, before anything is read or allocated.
		{"--image-size", "100000", "--image-size (image_size in a config file) must be at most 9459"},
		{"--synthetic", "1099511627776", "--synthetic (synthetic in a config file) must be at most"},
		{"--block-size", "9223372036854775807", "--block-size (block_size in a config file) must be at most 1048576, got 9223372036854775807"},
	} {
		runs := t.TempDir()
		args := []string{"--synthetic", "64", "--epochs", "1", "--runs-dir", runs, c.flag, c.value}
		if c.flag == "--synthetic" {
			args = args[2:]
		}
		var err error
		alloc := testsupport.AllocatedBy(func() { err = run(args) })
		require.Error(t, err, "%s %s was accepted", c.flag, c.value)
		assert.Less(t, alloc, uint64(64<<20), "%s %s: refused before anything is allocated", c.flag, c.value)
		assert.Contains(t, err.Error(), c.want, "%s %s", c.flag, c.value)
		made, _ := os.ReadDir(runs)
		assert.Empty(t, made, "%s %s: nothing trains", c.flag, c.value)
	}
}

// TestDataText: --data on a text file trains the byte-level GPT (chosen for the default
// model) through the language-model step, monitoring val_loss.
func TestDataText(t *testing.T) {
	corpus := smallCorpus(t, 12_000)
	runs := t.TempDir()
	out, err := child("--data", corpus, "--block-size", "32", "--limit", "96", "--epochs", "1", "--batch-size", "32",
		"--workers", "1", "--threads", "1", "--runs-dir", runs, "--experiment", "text").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "val perplexity")
	assert.Contains(t, string(out), "best val_loss")
	v, err := checkpoint.Read(filepath.Join(runs, "text", "checkpoints", "last.pt"))
	require.NoError(t, err)
	model, err := checkpoint.GetString(v, "model_config")
	require.NoError(t, err)
	assert.Equal(t, "gpt", model)
}

// TestDataCSV: --data on a CSV file with string labels (Fashion-MNIST images pooled to
// 7x7, one feature per cell, named classes) trains an MLP whose input and output sizes
// follow the table; the sorted label names are the recorded classes, and the checkpoint
// loads with weights_only=True.
func TestDataCSV(t *testing.T) {
	fm, err := data.FashionMNIST("", false)
	if err != nil {
		t.Skipf("Fashion-MNIST is not installed: %v", err)
	}
	var b strings.Builder
	for k := range 49 {
		fmt.Fprintf(&b, "p%d,", k)
	}
	b.WriteString("kind\n")
	rows := map[byte]int{}
	px := fm.Width * fm.Height
	for i, label := range fm.Labels {
		if (label != 1 && label != 7 && label != 8) || rows[label] >= 30 {
			continue
		}
		rows[label]++
		img := fm.Pixels[i*px : (i+1)*px]
		for cell := range 49 {
			sum := 0
			for k := range 16 {
				sum += int(img[(cell/7*4+k/4)*fm.Width+cell%7*4+k%4])
			}
			fmt.Fprintf(&b, "%g,", float64(sum)/16/255)
		}
		b.WriteString(data.FashionMNISTClasses[label] + "\n")
	}
	path := filepath.Join(t.TempDir(), "pooled.csv")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))

	runs := t.TempDir()
	out, err := child("--data", path, "--label-column", "kind", "--val-split", "0.2", "--epochs", "1", "--batch-size", "8",
		"--workers", "1", "--threads", "1", "--runs-dir", runs, "--experiment", "csv").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "train samples: 72")
	want := []string{"Bag", "Sneaker", "Trouser"}
	assert.Equal(t, want, configClassNames(t, filepath.Join(runs, "csv")))
	names, shapes := loadsInPython(t, filepath.Join(runs, "csv", "checkpoints", "last.pt"))
	assert.Equal(t, want, names)
	assert.Equal(t, []int64{256, 49}, shapes["1.weight"])
	assert.Equal(t, []int64{3, 256}, shapes["3.weight"])

	out, err = child("--data", path, "--runs-dir", runs).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "--label-column")
}

// TestDataTokens: --data on nanoGPT's train.bin (uint16 ids, with val.bin beside it)
// trains the GPT with a vocabulary sized by the largest id, next to the (x, y) windows.
func TestDataTokens(t *testing.T) {
	text, err := os.ReadFile(smallCorpus(t, 8_000))
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name string, b []byte) {
		ids := make([]byte, 2*len(b))
		for i, c := range b {
			binary.LittleEndian.PutUint16(ids[2*i:], uint16(c)+300) // ids beyond a byte's range
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), ids, 0o644))
	}
	write("train.bin", text[:7000])
	write("val.bin", text[7000:])
	maxID := 0
	for _, c := range text {
		maxID = max(maxID, int(c)+300)
	}
	runs := t.TempDir()
	out, err := child("--data", filepath.Join(dir, "train.bin"), "--block-size", "16", "--limit", "64", "--epochs", "1",
		"--batch-size", "16", "--workers", "1", "--threads", "1", "--runs-dir", runs, "--experiment", "tok").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "best val_loss")
	_, shapes := loadsInPython(t, filepath.Join(runs, "tok", "checkpoints", "last.pt"))
	assert.Equal(t, []int64{int64(maxID + 1), 128}, shapes["transformer.wte.weight"])
}

// TestDataInputErrors: data a user gets wrong ends in an error naming the input, at
// once and before a run directory is made: special files as --data, a flat folder of
// images, a directory that is neither layout, sizes from a config file, a CSV label
// beyond the class limit, a class folder whose name is not UTF-8.
func TestDataInputErrors(t *testing.T) {
	dir := t.TempDir()
	fifo := testsupport.FIFO(t, dir, "fifo.csv")
	flat := filepath.Join(dir, "flat")
	require.NoError(t, os.MkdirAll(flat, 0o755))
	for _, name := range []string{"1.png", "2.png"} {
		f, err := os.Create(filepath.Join(flat, name))
		require.NoError(t, err)
		require.NoError(t, png.Encode(f, image.NewGray(image.Rect(0, 0, 4, 4))))
		require.NoError(t, f.Close())
	}
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.MkdirAll(empty, 0o755))
	yaml := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(yaml, []byte("synthetic: 1099511627776\n"), 0o644))
	labels := filepath.Join(dir, "labels.csv")
	require.NoError(t, os.WriteFile(labels, []byte("x,label\n1,0\n2,1099511627776\n"), 0o644))
	dup := filepath.Join(dir, "dup.csv")
	require.NoError(t, os.WriteFile(dup, []byte("a,a,label\n1,2,0\n"), 0o644))
	headerOnly := filepath.Join(dir, "header.csv")
	require.NoError(t, os.WriteFile(headerOnly, []byte("x,label\n"), 0o644))
	badName := filepath.Join(dir, "latin1")
	for _, class := range []string{"cat", "caf\xe9"} {
		require.NoError(t, os.MkdirAll(filepath.Join(badName, class), 0o755))
		f, err := os.Create(filepath.Join(badName, class, "1.png"))
		require.NoError(t, err)
		require.NoError(t, png.Encode(f, image.NewGray(image.Rect(0, 0, 28, 28))))
		require.NoError(t, f.Close())
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"FIFO", []string{"--data", fifo, "--label-column", "label"}, "--data: " + fifo + " is a named pipe (FIFO), not a regular file"},
		{"/dev/zero", []string{"--data", "/dev/zero"}, "--data: /dev/zero is a character device, not a regular file"},
		{"flat folder", []string{"--data", flat}, flat + " holds 2 images but no class folders; ImageFolder expects one folder per class"},
		{"empty folder", []string{"--data", empty}, "--data " + empty + " is neither an ImageFolder tree"},
		{"synthetic 2^40 in a config", []string{"--config", yaml}, "--synthetic (synthetic in a config file) must be at most"},
		{"CSV label 2^40", []string{"--data", labels, "--label-column", "label"}, labels + `:3:3: column "label": integer label 1099511627776 is outside [0, 1048576)`},
		{"CSV duplicate columns", []string{"--data", dup, "--label-column", "label"}, dup + `:1: column name "a" appears twice`},
		{"CSV header only", []string{"--data", headerOnly, "--label-column", "label"}, headerOnly + ": the header line is followed by no data rows"},
		{"class name not UTF-8", []string{"--data", badName}, `class folder "caf\xe9" in ` + badName + ": the name is not valid UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := t.TempDir()
			type result struct {
				err   error
				alloc uint64
			}
			done := make(chan result, 1)
			go func() {
				var r result
				r.alloc = testsupport.AllocatedBy(func() { r.err = run(append(c.args, "--epochs", "1", "--threads", "1", "--runs-dir", runs)) })
				done <- r
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(time.Minute): // a guard against a read that blocks, not a timing
				t.Fatalf("%v: still running after a minute", c.args)
			}
			require.Error(t, r.err)
			assert.Contains(t, r.err.Error(), c.want)
			assert.Less(t, r.alloc, uint64(64<<20))
			made, _ := os.ReadDir(runs)
			assert.Empty(t, made, "nothing trains")
		})
	}
}

// pyMeta writes nanoGPT's meta.pkl as data/shakespeare_char/prepare.py does, for a
// vocabulary of the given size.
const pyMeta = `
import pickle, sys
chars = [chr(32 + i) for i in range(int(sys.argv[2]))]
meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
with open(sys.argv[1], "wb") as f:
    pickle.dump(meta, f)
`

// TestDataTokensMeta: with nanoGPT's meta.pkl beside train.bin, the vocabulary is its
// vocab_size (no scan of the token file), and an id at or above it is an error naming
// the file and the token.
func TestDataTokensMeta(t *testing.T) {
	text, err := os.ReadFile(smallCorpus(t, 4_000))
	require.NoError(t, err)
	dir := t.TempDir()
	ids := make([]byte, 2*len(text))
	for i, c := range text {
		binary.LittleEndian.PutUint16(ids[2*i:], uint16(c))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "train.bin"), ids, 0o644))
	testpy.Run(t, pyMeta, nil, filepath.Join(dir, "meta.pkl"), "300")
	runs := t.TempDir()
	out, err := child("--data", filepath.Join(dir, "train.bin"), "--val-split", "0.1", "--block-size", "16", "--limit", "32",
		"--epochs", "1", "--batch-size", "16", "--workers", "1", "--threads", "1", "--runs-dir", runs, "--experiment", "meta").CombinedOutput()
	require.NoError(t, err, string(out))
	_, shapes := loadsInPython(t, filepath.Join(runs, "meta", "checkpoints", "last.pt"))
	assert.Equal(t, []int64{300, 128}, shapes["transformer.wte.weight"], "vocab_size from meta.pkl")

	testpy.Run(t, pyMeta, nil, filepath.Join(dir, "meta.pkl"), "40") // the text's letters lie above 40
	out, err = child("--data", filepath.Join(dir, "train.bin"), "--val-split", "0.1", "--block-size", "16", "--limit", "32",
		"--epochs", "1", "--batch-size", "16", "--workers", "1", "--threads", "1", "--runs-dir", runs, "--experiment", "small").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), filepath.Join(dir, "train.bin")+": token ")
	assert.Contains(t, string(out), "outside the vocabulary of 40")
}
