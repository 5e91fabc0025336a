// Package readme holds the test that README.md's Go snippets compile and run as written.
package readme

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
)

// runTimeout bounds one run of a snippet. They train for seconds; the bound catches a
// hang (a rank waiting for a peer that died), with room for a machine busy with the rest
// of make test.
const runTimeout = 5 * time.Minute

// snippet is one ```go block of README.md.
type snippet struct {
	src     string
	line    int    // where the block starts in README.md
	section string // the heading above it, which chooses its check
}

func (s snippet) String() string { return fmt.Sprintf("README.md:%d (%s)", s.line, s.section) }

// checks run a built snippet in dir, an empty directory, as the README says one runs it
// and assert what it did; each returns the checkpoints it wrote, which the test then
// loads in Python. A snippet in any other section fails the test until it has a check.
var checks = map[string]func(t *testing.T, bin, dir string, s snippet) []string{
	"Quickstart in Go":         checkQuickstart,
	"Your own step":            checkOwnStep,
	"Multi-GPU and multi-node": checkDataParallel,
}

// TestREADMESnippets extracts every ```go block of README.md, builds it as a program of
// the module (through an overlay, so nothing is written into the tree) and runs it from
// an empty directory, then checks the run directory it wrote: the epochs reached, the
// metrics, the checkpoints (read in Go, and in Python with weights_only=True). A snippet
// must be a whole program (package main), so that a reader can paste it.
func TestREADMESnippets(t *testing.T) {
	root := testpy.Root()
	snippets := readmeSnippets(t, root)
	bins := buildSnippets(t, root, snippets)
	if _, err := data.FashionMNIST("", false); err != nil {
		t.Skipf("the snippets train on Fashion-MNIST, which is not installed: %v", err)
	}
	runs := t.TempDir() // the parent's: the checkpoints outlive the subtests
	var written []string
	for i, s := range snippets {
		check, ok := checks[s.section]
		require.True(t, ok, "%s: a Go snippet this test does not run; add its check", s)
		t.Run(strings.ReplaceAll(s.section, " ", "_"), func(t *testing.T) {
			dir := filepath.Join(runs, fmt.Sprint("snippet", i))
			require.NoError(t, os.Mkdir(dir, 0o755))
			written = append(written, check(t, bins[i], dir, s)...)
		})
	}
	if t.Failed() || len(written) == 0 {
		return
	}
	loadInPython(t, written)
}

// readmeSnippets returns README.md's ```go blocks, each with the Markdown heading above
// it (a "# comment" inside another fenced block is not a heading).
func readmeSnippets(t *testing.T, root string) []snippet {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	var out []snippet
	var fence string // the opening line of the block being read, "" outside blocks
	var cur *snippet
	section := ""
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case fence == "" && strings.HasPrefix(line, "```"):
			fence = line
			if line == "```go" {
				cur = &snippet{line: i + 1, section: section}
			}
		case fence != "" && line == "```":
			if cur != nil {
				require.True(t, strings.HasPrefix(cur.src, "package main\n"), "%s: a Go snippet must be a whole program (package main)", cur)
				out = append(out, *cur)
			}
			fence, cur = "", nil
		case cur != nil:
			cur.src += line + "\n"
		case fence == "" && strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	require.Empty(t, fence, "README.md: a code block that does not end")
	require.NotEmpty(t, out, "README.md has Go snippets")
	return out
}

// buildSnippets builds each snippet as examples/readme/snippetN (a package that exists
// only in the overlay) and returns the binaries' paths.
func buildSnippets(t *testing.T, root string, snippets []snippet) []string {
	tmp := t.TempDir()
	replace := map[string]string{}
	var pkgs, bins []string
	for i, s := range snippets {
		file := filepath.Join(tmp, fmt.Sprintf("snippet%d.go", i))
		require.NoError(t, os.WriteFile(file, []byte(s.src), 0o644))
		dir := filepath.Join("examples", "readme", fmt.Sprintf("snippet%d", i))
		replace[filepath.Join(root, dir, "main.go")] = file
		pkgs = append(pkgs, "./"+dir)
		bins = append(bins, filepath.Join(tmp, fmt.Sprintf("snippet%d", i)))
	}
	ov, err := json.Marshal(map[string]any{"Replace": replace})
	require.NoError(t, err)
	ovPath := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(ovPath, ov, 0o644))
	for i, p := range pkgs {
		cmd := exec.Command("go", "build", "-tags="+buildTags, "-overlay", ovPath, "-o", bins[i], p)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s does not compile:\n%s", snippets[i], out)
	}
	return bins
}

// start starts bin in dir with env added to the test's environment; its output, stdout
// and stderr together, goes to the returned buffer.
func start(ctx context.Context, t *testing.T, bin, dir string, env ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	return cmd, &out
}

// runOne runs a snippet as one process in dir and returns the program's output.
func runOne(t *testing.T, bin, dir string, s snippet) string {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd, out := start(ctx, t, bin, dir)
	require.NoError(t, cmd.Wait(), "%s failed:\n%s", s, out)
	return out.String()
}

// intArg returns the integer argument that re's group captures in the snippet: the
// checks assert what the snippet asks for, so that editing a number in README.md does
// not need an edit here.
func intArg(t *testing.T, s snippet, re string) int {
	m := regexp.MustCompile(re).FindStringSubmatch(s.src)
	require.NotNil(t, m, "%s: no %s", s, re)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// epochRecord is the part of a history.jsonl line the checks read.
type epochRecord struct {
	Epoch     int      `json:"epoch"`
	TrainLoss float64  `json:"train_loss"`
	ValAcc    *float64 `json:"val_acc"`
	TrainAcc  *float64 `json:"train_acc"`
	TrainTop1 *float64 `json:"train_top1"`
}

// runDir checks what every run directory holds after a run of epochs epochs — the
// config, one history line per epoch in order, last.pt at the last epoch, best_model.pth
// — and returns the config, the history and the two checkpoints' paths.
func runDir(t *testing.T, dir string, epochs int) (map[string]any, []epochRecord, []string) {
	var config map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &config))
	assert.EqualValues(t, epochs, config["epochs"])

	f, err := os.Open(filepath.Join(dir, "history.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var history []epochRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r epochRecord
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "%s", sc.Bytes())
		require.Equal(t, len(history)+1, r.Epoch, "history.jsonl holds the epochs in order")
		history = append(history, r)
	}
	require.NoError(t, sc.Err())
	require.Len(t, history, epochs)
	assert.Less(t, history[epochs-1].TrainLoss, history[0].TrainLoss, "the training loss falls")

	last := filepath.Join(dir, "checkpoints", "last.pt")
	best := filepath.Join(dir, "checkpoints", "best_model.pth")
	ck, err := checkpoint.Read(last)
	require.NoError(t, err)
	e, err := checkpoint.GetInt(ck, "epoch")
	require.NoError(t, err)
	assert.EqualValues(t, epochs, e, "last.pt is the last epoch's")
	_, err = checkpoint.GetTensor(ck, "model_state_dict", "1.weight")
	require.NoError(t, err, "last.pt holds the model's weights")
	_, err = checkpoint.Read(best)
	require.NoError(t, err)
	return config, history, []string{last, best}
}

// checkQuickstart: the seed's flow, trainer(3) then trainer(), trains epochs 1-3, stops,
// then trains on to the configured count, validating each epoch.
func checkQuickstart(t *testing.T, bin, dir string, s snippet) []string {
	epochs := intArg(t, s, `trainer\.WithEpochs\((\d+)\)`)
	require.Greater(t, epochs, 3, "%s: the second call trains on past epoch 3", s)
	out := runOne(t, bin, dir, s)
	_, history, ckpts := runDir(t, filepath.Join(dir, "runs", "quickstart"), epochs)

	// Each call ends with a summary line; the first comes between epochs 3 and 4.
	done := strings.Index(out, "training done")
	require.Equal(t, 2, strings.Count(out, "training done"), "two calls, two runs:\n%s", out)
	assert.Less(t, strings.Index(out, "Epoch 3 |"), done, "%s", out)
	assert.Greater(t, strings.Index(out, "Epoch 4 |"), done, "%s", out)

	best := 0
	for i, r := range history {
		require.NotNil(t, r.ValAcc, "epoch %d validated", r.Epoch)
		if *r.ValAcc > *history[best].ValAcc {
			best = i
		}
	}
	// Ten classes: chance is 0.1. A small model on 10,000 images reaches above 0.8.
	assert.Greater(t, *history[epochs-1].ValAcc, 0.75, "validation accuracy after %d epochs", epochs)
	ck, err := checkpoint.Read(ckpts[1])
	require.NoError(t, err)
	e, err := checkpoint.GetInt(ck, "epoch")
	require.NoError(t, err)
	assert.EqualValues(t, history[best].Epoch, e, "best_model.pth is the epoch of the best val_acc")
	t.Logf("val_acc by epoch: %v", valAccs(history))
	return ckpts
}

func valAccs(h []epochRecord) []float64 {
	var v []float64
	for _, r := range h {
		v = append(v, math.Round(*r.ValAcc*1e4)/1e4)
	}
	return v
}

// checkOwnStep: the user's step trains under bf16 autocast with accumulation, and its
// metric is recorded as train_top1.
func checkOwnStep(t *testing.T, bin, dir string, s snippet) []string {
	epochs := intArg(t, s, `trainer\.WithEpochs\((\d+)\)`)
	runOne(t, bin, dir, s)
	config, history, ckpts := runDir(t, filepath.Join(dir, "runs", "own-step"), epochs)
	assert.Equal(t, "bf16", config["amp"])
	assert.EqualValues(t, intArg(t, s, `trainer\.WithAccumulation\((\d+)\)`), config["accumulation"])
	for _, r := range history {
		require.NotNil(t, r.TrainTop1, "epoch %d records the step's top1 as train_top1", r.Epoch)
		assert.Nil(t, r.TrainAcc, "the user's step replaces the default one")
	}
	top1 := *history[epochs-1].TrainTop1
	assert.True(t, top1 > 0.7 && top1 <= 1, "top-1 training accuracy %v", top1)
	return ckpts
}

// checkDataParallel runs the snippet as torchrun --nproc-per-node 2 would: two processes
// in one directory with torchrun's environment. Rank 0 alone prints and writes the run
// directory, and trains on its half of the data.
func checkDataParallel(t *testing.T, bin, dir string, s snippet) []string {
	const world = 2
	epochs := intArg(t, s, `trainer\.WithEpochs\((\d+)\)`)
	samples := intArg(t, s, `data\.Head\(ds, (\d+)\)`)
	batch := intArg(t, s, `BatchSize: (\d+)`)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	port := disttest.FreePort(t)
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for r := range world {
		cmd, out := start(ctx, t, bin, dir, fmt.Sprint("RANK=", r), fmt.Sprint("LOCAL_RANK=", r),
			fmt.Sprint("WORLD_SIZE=", world), fmt.Sprint("LOCAL_WORLD_SIZE=", world),
			"MASTER_ADDR=127.0.0.1", fmt.Sprint("MASTER_PORT=", port), "OMP_NUM_THREADS=1")
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	errs := make([]chan error, world)
	for r, cmd := range cmds {
		errs[r] = make(chan error, 1)
		go func() {
			err := cmd.Wait()
			if err != nil {
				cancel() // the other rank would wait for this one until its timeout
			}
			errs[r] <- err
		}()
	}
	for r := range world {
		require.NoError(t, <-errs[r], "%s: rank %d failed:\n%s", s, r, outs[r])
	}
	share := samples / world
	steps := (share + batch - 1) / batch
	assert.Contains(t, outs[0].String(), fmt.Sprintf("train samples: %d (%d batches)", share, steps))
	assert.NotContains(t, outs[1].String(), "Epoch", "only rank 0 prints")

	_, history, ckpts := runDir(t, filepath.Join(dir, "runs", "ddp"), epochs)
	ck, err := checkpoint.Read(ckpts[0])
	require.NoError(t, err)
	step, err := checkpoint.GetInt(ck, "global_step")
	require.NoError(t, err)
	assert.EqualValues(t, epochs*steps, step, "rank 0 stepped once per batch of its share")
	// Chance over ten classes is a cross-entropy of ln 10 = 2.3; this MLP gets to about 0.6.
	assert.Less(t, history[epochs-1].TrainLoss, 1.0, "training loss over both ranks")
	return ckpts
}

// loadInPython loads every checkpoint with torch.load(weights_only=True), as a Python
// user of the run directory would, and compares its epoch with Go's reading.
func loadInPython(t *testing.T, paths []string) {
	out := testpy.Run(t, `
import json, sys, torch
for p in sys.argv[1:]:
    ck = torch.load(p, weights_only=True)
    print(json.dumps({"path": p, "epoch": ck["epoch"], "tensors": len(ck["model_state_dict"])}))
`, []string{"torch"}, paths...)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, len(paths), "%s", out)
	for i, line := range lines {
		var got struct {
			Path    string
			Epoch   int64
			Tensors int
		}
		require.NoError(t, json.Unmarshal([]byte(line), &got), line)
		require.Equal(t, paths[i], got.Path)
		ck, err := checkpoint.Read(got.Path)
		require.NoError(t, err)
		e, err := checkpoint.GetInt(ck, "epoch")
		require.NoError(t, err)
		assert.Equal(t, e, got.Epoch, "%s: epoch in Python", got.Path)
		sd, err := checkpoint.GetDict(ck, "model_state_dict")
		require.NoError(t, err)
		assert.Equal(t, sd.Len(), got.Tensors, "%s: model_state_dict in Python", got.Path)
	}
}
