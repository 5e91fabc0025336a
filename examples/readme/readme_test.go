// Package readme holds the tests that the Go snippets of README.md and docs/*.md compile
// and run as written.
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
	"slices"
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

// A ```go block of a page is one of three kinds:
//   - a whole program (package main), which the test builds and runs with the check of
//     its section (checks below): a reader can paste it;
//   - an excerpt, marked by a line `<!-- excerpt: PATH -->` right before the block: its
//     lines, in order and together, are lines of the Go file PATH (a test file whose
//     test runs them), so the page shows code that compiles and runs;
//   - an outline, marked `<!-- outline: PATH -->`: a sketch with elisions, whose runnable
//     version is the file PATH.
//
// Any other ```go block fails the test.
const (
	excerptMark = "<!-- excerpt: "
	outlineMark = "<!-- outline: "
)

// snippet is one ```go block of a page.
type snippet struct {
	page    string // README.md or docs/NAME.md
	src     string
	line    int    // where the block starts in the page
	section string // the heading above it
	excerpt string // the file it is an excerpt of, or ""
	outline string // the file it outlines, or ""
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d (%s)", s.page, s.line, s.section) }

// key names the check of a whole program: its page and section.
func (s snippet) key() string { return s.page + ": " + s.section }

// program is how the test runs a whole-program snippet.
type program struct {
	// run runs the built snippet in dir, an empty directory, as the page says one runs
	// it, and asserts what it did; it returns the checkpoints it wrote, which the test
	// then loads in Python.
	run func(t *testing.T, r *runner, bin, dir string, s snippet) []string
	// pureGo builds the snippet with CGO_ENABLED=0, as the page says it builds.
	pureGo bool
}

// programs maps each whole-program snippet, by page and section, to its check. A snippet
// in any other section fails the test until it has one.
var programs = map[string]program{
	"README.md: Quickstart":                        {run: checkQuickstart},
	"README.md: Your own step":                     {run: checkOwnStep},
	"docs/checkpoints.md: In Go, without libtorch": {run: checkReadCheckpoint, pureGo: true},
	"docs/distributed.md: In Go":                   {run: checkDataParallel},
}

// runner is the state the checks share: the directories the snippets ran in, by key,
// for a snippet that reads what an earlier one wrote.
type runner struct {
	dirs map[string]string
}

// pages returns README.md and docs/*.md, relative to the module root.
func pages(t *testing.T, root string) []string {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	out := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		require.NoError(t, err)
		out = append(out, filepath.ToSlash(rel))
	}
	slices.Sort(out[1:])
	return out
}

// readSnippets returns page's ```go blocks, each with the Markdown heading above it (a
// "# comment" inside another fenced block is not a heading) and its mark.
func readSnippets(t *testing.T, root, page string) []snippet {
	b, err := os.ReadFile(filepath.Join(root, page))
	require.NoError(t, err)
	var out []snippet
	var fence string // the opening line of the block being read, "" outside blocks
	var cur *snippet
	section, prev := "", ""
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case fence == "" && strings.HasPrefix(line, "```"):
			fence = line
			if line == "```go" {
				cur = &snippet{page: page, line: i + 1, section: section}
				cur.excerpt = markPath(prev, excerptMark)
				cur.outline = markPath(prev, outlineMark)
			}
		case fence != "" && line == "```":
			if cur != nil {
				out = append(out, *cur)
			}
			fence, cur = "", nil
		case cur != nil:
			cur.src += line + "\n"
		case fence == "" && strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	require.Empty(t, fence, "%s: a code block that does not end", page)
	return out
}

// markPath returns the path of a `<!-- mark PATH -->` line, or "".
func markPath(line, mark string) string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, mark) || !strings.HasSuffix(line, "-->") {
		return ""
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, mark), "-->"))
}

// allSnippets reads every page's snippets and sorts them into programs, excerpts and
// outlines, failing on a block that is none of them.
func allSnippets(t *testing.T, root string) (progs, excerpts, outlines []snippet) {
	for _, page := range pages(t, root) {
		for _, s := range readSnippets(t, root, page) {
			switch {
			case s.excerpt != "":
				excerpts = append(excerpts, s)
			case s.outline != "":
				outlines = append(outlines, s)
			default:
				require.True(t, strings.HasPrefix(s.src, "package main\n"),
					"%s: a Go snippet is a whole program (package main), or marked %sPATH --> or %sPATH -->", s, excerptMark, outlineMark)
				progs = append(progs, s)
			}
		}
	}
	return progs, excerpts, outlines
}

// TestDocSnippets extracts every whole-program ```go block of README.md and docs/*.md,
// builds each as a program of the module (through an overlay, so nothing is written into
// the tree) and runs it from an empty directory, then checks what it wrote: the epochs
// reached, the metrics, the run's record of its model, optimizer and scheduler, the
// checkpoints (read in Go, and in Python with weights_only=True).
func TestDocSnippets(t *testing.T) {
	root := testpy.Root()
	progs, _, _ := allSnippets(t, root)
	require.NotEmpty(t, progs)
	for _, s := range progs {
		_, ok := programs[s.key()]
		require.True(t, ok, "%s: a Go program this test does not run; add its check to programs", s)
	}
	bins := buildSnippets(t, root, progs)
	if _, err := data.FashionMNIST("", false); err != nil {
		t.Skipf("the snippets train on Fashion-MNIST, which is not installed: %v", err)
	}
	runs := t.TempDir() // the parent's: the checkpoints outlive the subtests
	r := &runner{dirs: map[string]string{}}
	var written []string
	for i, s := range progs {
		t.Run(strings.NewReplacer(" ", "_", ":", "", "/", "_").Replace(s.key()), func(t *testing.T) {
			dir := filepath.Join(runs, fmt.Sprint("snippet", i))
			require.NoError(t, os.Mkdir(dir, 0o755))
			written = append(written, programs[s.key()].run(t, r, bins[i], dir, s)...)
			r.dirs[s.key()] = dir
		})
	}
	if t.Failed() || len(written) == 0 {
		return
	}
	loadInPython(t, written)
}

// TestDocExcerpts checks that every excerpt is still what its file holds: its lines
// (without their indentation, runs of spaces as one, blank lines left out) are
// consecutive lines of that Go file. An outline's file must exist.
func TestDocExcerpts(t *testing.T) {
	root := testpy.Root()
	_, excerpts, outlines := allSnippets(t, root)
	require.NotEmpty(t, excerpts, "docs/extending.md's excerpts")
	for _, s := range excerpts {
		require.True(t, strings.HasSuffix(s.excerpt, ".go"), "%s: an excerpt of a Go file, not %s", s, s.excerpt)
		b, err := os.ReadFile(filepath.Join(root, s.excerpt))
		require.NoError(t, err, "%s: the excerpt's file", s)
		want, in := codeLines(s.src), codeLines(string(b))
		require.NotEmpty(t, want, "%s is empty", s)
		assert.True(t, containsRun(in, want), "%s is no longer an excerpt of %s: copy it again from there", s, s.excerpt)
	}
	for _, s := range outlines {
		_, err := os.Stat(filepath.Join(root, s.outline))
		assert.NoError(t, err, "%s: the runnable version it names", s)
	}
}

// codeLines returns src's lines trimmed, with runs of white space as one space and blank
// lines left out.
func codeLines(src string) []string {
	var out []string
	for _, l := range strings.Split(src, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// containsRun reports whether want appears in lines as consecutive elements.
func containsRun(lines, want []string) bool {
	for i := 0; i+len(want) <= len(lines); i++ {
		if slices.Equal(lines[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// buildSnippets builds each snippet as examples/readme/snippetN (a package that exists
// only in the overlay) and returns the binaries' paths. The cgo ones build in one go
// command, which links them in parallel.
func buildSnippets(t *testing.T, root string, snippets []snippet) []string {
	tmp := t.TempDir()
	replace := map[string]string{}
	var cgoPkgs, pureGoPkgs, bins []string
	for i, s := range snippets {
		file := filepath.Join(tmp, fmt.Sprintf("snippet%d.go", i))
		require.NoError(t, os.WriteFile(file, []byte(s.src), 0o644))
		pkg := filepath.Join("examples", "readme", fmt.Sprintf("snippet%d", i))
		replace[filepath.Join(root, pkg, "main.go")] = file
		if programs[s.key()].pureGo {
			pureGoPkgs = append(pureGoPkgs, "./"+pkg)
		} else {
			cgoPkgs = append(cgoPkgs, "./"+pkg)
		}
		bins = append(bins, filepath.Join(tmp, "bin", fmt.Sprintf("snippet%d", i)))
	}
	ov, err := json.Marshal(map[string]any{"Replace": replace})
	require.NoError(t, err)
	ovPath := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(ovPath, ov, 0o644))
	for _, b := range []struct {
		pkgs []string
		env  []string
	}{{cgoPkgs, nil}, {pureGoPkgs, []string{"CGO_ENABLED=0"}}} {
		if len(b.pkgs) == 0 {
			continue
		}
		args := append([]string{"build", "-tags=" + buildTags, "-overlay", ovPath, "-o", filepath.Join(tmp, "bin") + "/"}, b.pkgs...)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), b.env...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "the snippets %v (%s) do not compile:\n%s", b.pkgs, b.env, out)
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
// checks assert what the snippet asks for, so that editing a number in a page does not
// need an edit here.
func intArg(t *testing.T, s snippet, re string) int {
	m := regexp.MustCompile(re).FindStringSubmatch(s.src)
	require.NotNil(t, m, "%s: no %s", s, re)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// stringArg is intArg for a string.
func stringArg(t *testing.T, s snippet, re string) string {
	m := regexp.MustCompile(re).FindStringSubmatch(s.src)
	require.NotNil(t, m, "%s: no %s", s, re)
	return m[1]
}

// epochRecord is the part of a history.jsonl line the checks read.
type epochRecord struct {
	Epoch     int      `json:"epoch"`
	TrainLoss float64  `json:"train_loss"`
	ValAcc    *float64 `json:"val_acc"`
	TrainAcc  *float64 `json:"train_acc"`
	TrainTop1 *float64 `json:"train_top1"`
}

// runRecord is the part of config.json, and of a checkpoint's "config", that says what
// the Trainer was given.
type runRecord struct {
	Epochs       int    `json:"epochs"`
	AMP          string `json:"amp"`
	Accumulation int    `json:"accumulation"`
	Model        string `json:"model"`
	Optimizer    struct {
		Class       string           `json:"class"`
		ParamGroups []map[string]any `json:"param_groups"`
	} `json:"optimizer"`
	Scheduler string `json:"scheduler"`
}

// runDir checks what every run directory holds after a run of epochs epochs — the
// config, one history line per epoch in order, last.pt at the last epoch with the same
// record of the run as config.json, best_model.pth — and returns the config, the history
// and the two checkpoints' paths.
func runDir(t *testing.T, dir string, epochs int) (runRecord, []epochRecord, []string) {
	var config runRecord
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &config))
	assert.Equal(t, epochs, config.Epochs)

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
	name, err := checkpoint.GetString(ck, "model_config")
	require.NoError(t, err)
	assert.Equal(t, config.Model, name, "model_config names the model as config.json does")
	recorded, err := checkpoint.GetString(ck, "config")
	require.NoError(t, err)
	var inCheckpoint runRecord
	require.NoError(t, json.Unmarshal([]byte(recorded), &inCheckpoint))
	assert.Equal(t, config, inCheckpoint, "the checkpoint's config records what config.json does")
	_, err = checkpoint.Read(best)
	require.NoError(t, err)
	return config, history, []string{last, best}
}

// checkQuickstart: the MLP trains for the epochs asked, validating each, and the run
// directory and its checkpoints name the MLP, Adam with the LR given, and no scheduler.
func checkQuickstart(t *testing.T, _ *runner, bin, dir string, s snippet) []string {
	epochs := intArg(t, s, `trainer\.WithEpochs\((\d+)\)`)
	runOne(t, bin, dir, s)
	config, history, ckpts := runDir(t, filepath.Join(dir, "runs", "quickstart"), epochs)

	assert.Equal(t, stringArg(t, s, `trainer\.WithModelConfig\("([^"]+)"\)`), config.Model)
	assert.Equal(t, "mlp", config.Model, "README says the record names the MLP")
	assert.Equal(t, "Adam", config.Optimizer.Class)
	require.Len(t, config.Optimizer.ParamGroups, 1)
	lr, err := strconv.ParseFloat(stringArg(t, s, `AdamOptions\{LR: ([0-9.e-]+)\}`), 64)
	require.NoError(t, err)
	assert.Equal(t, lr, config.Optimizer.ParamGroups[0]["lr"])
	assert.Equal(t, "none", config.Scheduler)

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
func checkOwnStep(t *testing.T, _ *runner, bin, dir string, s snippet) []string {
	epochs := intArg(t, s, `trainer\.WithEpochs\((\d+)\)`)
	runOne(t, bin, dir, s)
	config, history, ckpts := runDir(t, filepath.Join(dir, "runs", "own-step"), epochs)
	assert.Equal(t, "bf16", config.AMP)
	assert.Equal(t, intArg(t, s, `trainer\.WithAccumulation\((\d+)\)`), config.Accumulation)
	for _, r := range history {
		require.NotNil(t, r.TrainTop1, "epoch %d records the step's top1 as train_top1", r.Epoch)
		assert.Nil(t, r.TrainAcc, "the user's step replaces the default one")
	}
	top1 := *history[epochs-1].TrainTop1
	assert.True(t, top1 > 0.7 && top1 <= 1, "top-1 training accuracy %v", top1)
	return ckpts
}

// checkReadCheckpoint runs the pure-Go reader in a directory holding the quickstart's
// run, and checks that it prints what the page says.
func checkReadCheckpoint(t *testing.T, r *runner, bin, dir string, s snippet) []string {
	quick, ok := r.dirs["README.md: Quickstart"]
	require.True(t, ok, "%s reads the quickstart's checkpoint: the quickstart runs first", s)
	src := filepath.Join(quick, "runs", "quickstart", "checkpoints", "last.pt")
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "runs", "quickstart", "checkpoints"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "runs", "quickstart", "checkpoints", "last.pt"), b, 0o644))
	out := strings.TrimSpace(runOne(t, bin, dir, s))
	page, err := os.ReadFile(filepath.Join(testpy.Root(), s.page))
	require.NoError(t, err)
	m := regexp.MustCompile("It prints `([^`]+)`").FindSubmatch(page)
	require.NotNil(t, m, "%s: the page says what it prints", s)
	assert.Equal(t, string(m[1]), out)
	return nil
}

// checkDataParallel runs the snippet as torchrun --nproc-per-node 2 would: two processes
// in one directory with torchrun's environment. Rank 0 alone prints and writes the run
// directory, and trains on its half of the data.
func checkDataParallel(t *testing.T, _ *runner, bin, dir string, s snippet) []string {
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
