package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/bench/internal/loopio"
)

// Every implementation has a C++ twin in the table that runs its Adam kernel, and each
// kernel's twin is the last column of its group.
func TestEveryImplementationHasItsTwin(t *testing.T) {
	for i, im := range impls {
		tw := lookupImpl(twin(im.name))
		assert.Equal(t, im.adam, tw.adam, im.name)
		assert.True(t, strings.HasPrefix(tw.name, "cpp-"), im.name)
		if im.quick {
			assert.True(t, tw.quick, "%s runs in quick runs, so its twin must", im.name)
		}
		if i+1 == len(impls) || impls[i+1].adam != im.adam {
			assert.Equal(t, tw.name, im.name, "the twin closes the %s group", im.adam)
		}
	}
}

func caseWith(bf16 bool, losses map[string][]float64) *Case {
	c := &Case{BF16: bf16, CrossKernelTol: crossKernelTol(bf16), Impl: map[string]*Measurement{}}
	for name, l := range losses {
		c.Impl[name] = &Measurement{Result: loopio.Result{Losses: l}, Name: name}
	}
	return c
}

func TestCheckLosses(t *testing.T) {
	base := []float64{2.3, 2.2, 2.1}
	shift := func(d float64) []float64 { return []float64{2.3, 2.2 + d, 2.1} }
	t.Run("same kernel must be exact", func(t *testing.T) {
		c := caseWith(false, map[string][]float64{"go": shift(1e-7), "cpp-fused": base})
		checkLosses(c)
		assert.False(t, c.LossCheckOK)
		assert.InDelta(t, 1e-7, c.Impl["go"].LossDiff, 1e-12)
	})
	t.Run("across kernels within the float32 tolerance", func(t *testing.T) {
		c := caseWith(false, map[string][]float64{"go": base, "cpp-fused": base, "go-unfused": shift(5e-7), "cpp-foreach": shift(5e-7), "cpp-single": shift(5e-7)})
		checkLosses(c)
		assert.True(t, c.LossCheckOK, c.LossProblems)
		assert.InDelta(t, 5e-7, c.CrossKernelDiff, 1e-12)
		assert.Zero(t, c.SameKernelDiff)
	})
	t.Run("across kernels past the float32 tolerance", func(t *testing.T) {
		c := caseWith(false, map[string][]float64{"cpp-fused": base, "cpp-foreach": shift(2e-5)})
		checkLosses(c)
		assert.False(t, c.LossCheckOK)
	})
	t.Run("bf16 allows more", func(t *testing.T) {
		c := caseWith(true, map[string][]float64{"cpp-fused": base, "cpp-foreach": shift(5e-4)})
		checkLosses(c)
		assert.True(t, c.LossCheckOK, c.LossProblems)
	})
	t.Run("missing twin or losses", func(t *testing.T) {
		c := caseWith(false, map[string][]float64{"python-foreach": base})
		checkLosses(c)
		assert.False(t, c.LossCheckOK)
		c = caseWith(false, map[string][]float64{"python": base[:2], "cpp-single": base})
		checkLosses(c)
		assert.False(t, c.LossCheckOK)
	})
}

// The targets are scored on pairs of the same kernel only: a slow single-tensor C++ loop
// does not make the fused Trainer look fast.
func TestTargetsPairLikeWithLike(t *testing.T) {
	step := map[string]float64{"go": 100, "cpp-fused": 90, "python-fused": 300,
		"go-unfused": 150, "cpp-foreach": 160, "python-foreach": 400, "cpp-single": 1000, "python": 2000}
	c := &Case{Workload: "mlp", Desc: "tiny", Threads: 1, Impl: map[string]*Measurement{}}
	for name, us := range step {
		c.Impl[name] = &Measurement{Name: name, StepUS: us}
	}
	got := strings.Join(targets(&Results{Cases: []*Case{c}}), "\n")
	assert.Contains(t, got, "**missed**: tiny, 1 thr: gotrain 0.90× C++ (fused)")
	assert.Contains(t, got, "met: tiny, 1 thr: gotrain (unfused) 1.07× C++ (foreach)")
	assert.Contains(t, got, "met: tiny, 1 thr: gotrain 3.00× Python (fused)")
	assert.NotContains(t, got, "single")
	assert.NotContains(t, got, "10.00×", "the single-tensor loop is no one's pair")
}

func TestUpdateReadme(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(path, []byte("a\n<!-- bench:begin -->\nold\n<!-- bench:end -->\nb\n"), 0o644))
	require.NoError(t, updateReadme(path, "new\n"))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "a\n<!-- bench:begin -->\nnew\n<!-- bench:end -->\nb\n", string(b))
	require.NoError(t, os.WriteFile(path, []byte("no markers\n"), 0o644))
	assert.Error(t, updateReadme(path, "new\n"))
}

// The per-op runs of one language pool their reps, and the scored cost is the fastest
// rep of all of them; a run at the wrong thread count is an error.
func TestPerOpRunsPool(t *testing.T) {
	out := map[string]*OpResult{}
	for _, reps := range []string{"[900,700]", "[650,1200]"} {
		js := `{"impl":"go","threads":1,"block":100,"n":10,"ns_per_op":{"add":` + reps + `}}`
		require.NoError(t, runOp(nil, []string{"sh", "-c", "echo '" + js + "'"}, "go", out))
	}
	g := out["go"]
	assert.Equal(t, 2, g.Runs)
	assert.Equal(t, []float64{900, 700, 650, 1200}, g.NsPerOp["add"])
	assert.Equal(t, 650.0, g.Best("add"))
	assert.Equal(t, 800.0, g.Median("add"))
	js := `{"impl":"go","threads":2,"ns_per_op":{"add":[1]}}`
	assert.Error(t, runOp(nil, []string{"sh", "-c", "echo '" + js + "'"}, "go", out))
}

// The per-op target is scored in turns when that figure exists: a fastest rep that
// happens to favour one side does not decide it.
func TestPerOpTargetScoredInTurns(t *testing.T) {
	ops := map[string]*OpResult{
		"go":  {NsPerOp: map[string][]float64{"add": {600, 700}}},
		"cpp": {NsPerOp: map[string][]float64{"add": {550, 650}}},
	}
	alone := strings.Join(targets(&Results{Ops: ops}), "\n")
	assert.Contains(t, alone, "met: tiny op (add of two 16-element tensors): gotrain 600 ns vs C++ 550 ns, 1.09×")
	// C++ over gotrain per pair: gotrain is 1.25× C++ in the median pair.
	paired := &Paired{Ref: "cpp", Impl: "go", Ratios: []float64{0.9, 0.8, 0.7}, Median: 0.8}
	got := strings.Join(targets(&Results{Ops: ops, OpsPaired: map[string]*Paired{"add": paired}}), "\n")
	assert.Contains(t, got, "**missed**: tiny op (add of two 16-element tensors): gotrain 1.25× C++ in turns; fastest reps 600 ns vs 550 ns, 1.09×")
	assert.Equal(t, "1.25× (1.11–1.43)", opPairedCell(paired))
}

// Two processes take their turns a, b, b, a, ... and each must report the turn it took.
func TestInTurns(t *testing.T) {
	log := filepath.Join(t.TempDir(), "order")
	proc := func(name string) *pairProc {
		script := `n=0; while read l; do n=$((n+1)); echo ` + name + ` >> ` + log + `; echo "rep $n"; done; echo '{}'`
		p, err := startTurns(name, "rep", nil, []string{"sh", "-c", script})
		require.NoError(t, err)
		return p
	}
	a, b := proc("a"), proc("b")
	require.NoError(t, inTurns(a, b, 4))
	for _, p := range []*pairProc{a, b} {
		out, err := p.finish()
		require.NoError(t, err)
		assert.Equal(t, "{}\n", out)
	}
	order, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, "a\nb\nb\na\na\nb\nb\na\n", string(order))

	bad, err := startTurns("bad", "rep", nil, []string{"sh", "-c", `read l; echo "epoch 1"`})
	require.NoError(t, err)
	defer stop([]*pairProc{bad})
	assert.ErrorContains(t, bad.turn(1), `read "epoch 1\n"`)
}

func TestOverrideSteps(t *testing.T) {
	steps := map[string]int{"mlp": 400, "cnn": 12}
	require.NoError(t, overrideSteps(steps, ""))
	require.NoError(t, overrideSteps(steps, "mlp=2000,cnn=24"))
	assert.Equal(t, map[string]int{"mlp": 2000, "cnn": 24}, steps)
	for _, bad := range []string{"mlp", "mlp=0", "mlp=x", "gpt=10", "mlp=10,"} {
		assert.Error(t, overrideSteps(steps, bad), bad)
	}
	assert.Equal(t, map[string]int{"mlp": 2000, "cnn": 24}, steps, "a spec with a bad pair sets nothing")
}

func TestSplitTurnsAmongProcesses(t *testing.T) {
	assert.Equal(t, []int{5, 5, 5}, split(15, 3))
	assert.Equal(t, []int{6, 5, 5}, split(16, 3))
	assert.Equal(t, []int{1, 1}, split(2, 3), "no pair of processes without a turn")
	assert.Equal(t, []int{4}, split(4, 0))
}
