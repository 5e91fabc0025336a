package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/bench/internal/loopio"
)

// Paired is a like-for-like pair measured in turns: the two loops run as two live
// processes on the same data, and take turns one epoch at a time (ref, impl, then impl,
// ref, ...) so that whatever the machine does to one epoch it does to its neighbour of
// the other loop. This machine's speed drifts by tens of percent between minutes and
// between processes (bench/README.md), more than the difference being measured; an
// epoch and the other loop's epoch beside it see the same machine, so their ratio
// cancels the drift that separate processes' timings keep.
type Paired struct {
	Ref  string `json:"ref"`
	Impl string `json:"impl"`
	// Ratios are ref's epoch time over impl's, one per timed pair of epochs (>1: impl
	// is faster); Median is the scored figure.
	Ratios []float64 `json:"ratios"`
	Median float64   `json:"median"`
	// Procs is the number of pairs of processes the ratios were pooled from: a process
	// keeps its speed for its life, so one pair alone is one draw of that luck.
	Procs int `json:"procs,omitempty"`
}

// split divides reps timed turns among n pairs of processes, the first ones taking one
// more where they do not divide evenly; a pair gets at least one.
func split(reps, n int) []int {
	n = max(1, min(n, reps))
	out := make([]int, n)
	for i := range out {
		out[i] = reps / n
		if i < reps%n {
			out[i]++
		}
	}
	return out
}

// pairProc is one process of a pair. It takes a turn when it reads a line on stdin and
// ends it by printing "<word> N" (N counting its turns from 1): "epoch" for the loops,
// "rep" for the per-op benchmarks.
type pairProc struct {
	name string
	word string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	err  bytes.Buffer
}

// startTurns starts args (with env added to this process's environment) as name.
func startTurns(name, word string, env, args []string) (*pairProc, error) {
	p := &pairProc{name: name, word: word, cmd: exec.Command(args[0], args[1:]...)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = &p.err
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReader(stdout)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}

func startPairProc(cfg config, w loopio.Workload, dir string, threads int, impl string, reps int) (*pairProc, error) {
	env, args := loopCommand(cfg, w, dir, threads, impl, reps)
	return startTurns(impl, "epoch", env, append(args, "--pair", "1"))
}

// turn lets p take its k-th turn and waits for it to end.
func (p *pairProc) turn(k int) error {
	if _, err := io.WriteString(p.in, "go\n"); err != nil {
		return fmt.Errorf("%s: %s %d: %w (%s)", p.name, p.word, k, err, strings.TrimSpace(p.err.String()))
	}
	line, err := p.out.ReadString('\n')
	if want := fmt.Sprintf("%s %d\n", p.word, k); err != nil || line != want {
		return fmt.Errorf("%s: %s %d: read %q, %v (%s)", p.name, p.word, k, line, err, strings.TrimSpace(p.err.String()))
	}
	return nil
}

// inTurns lets the two processes take n turns each, in the order a, b, b, a, a, b, ...
func inTurns(a, b *pairProc, n int) error {
	for k := 1; k <= n; k++ {
		order := []*pairProc{a, b}
		if k%2 == 0 {
			order = []*pairProc{b, a}
		}
		for _, p := range order {
			if err := p.turn(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish closes p's turns and returns its result line.
func (p *pairProc) finish() (string, error) {
	p.in.Close()
	rest, err := io.ReadAll(p.out)
	if werr := p.cmd.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w (%s)", p.name, err, strings.TrimSpace(p.err.String()))
	}
	return string(rest), nil
}

// stop kills the processes that have not finished.
func stop(procs []*pairProc) {
	for _, p := range procs {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	}
}

// pooled measures ref against impl over reps timed turns spread over procs pairs of
// processes (split), once(n, swap) running one pair for n turns with impl going first
// when swap (every other pair), and pools the pairs' ratios.
func pooled(ref, impl string, reps, procs int, once func(n int, swap bool) ([]float64, error)) (*Paired, error) {
	pr := &Paired{Ref: ref, Impl: impl}
	for i, n := range split(reps, procs) {
		ratios, err := once(n, i%2 == 1)
		if err != nil {
			return nil, err
		}
		pr.Ratios = append(pr.Ratios, ratios...)
		pr.Procs++
	}
	pr.Median = median(pr.Ratios)
	return pr, nil
}

// startedInTurns starts the two processes of a pair (start(0), the reference, and
// start(1)) and lets them take n turns each, the second going first when swap. It returns
// the processes it started, for the caller to finish or stop, also on failure.
func startedInTurns(n int, swap bool, start func(i int) (*pairProc, error)) ([]*pairProc, error) {
	var procs []*pairProc
	for i := range 2 {
		p, err := start(i)
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
	}
	if swap {
		return procs, inTurns(procs[1], procs[0], n)
	}
	return procs, inTurns(procs[0], procs[1], n)
}

// runPaired measures impl against ref in turns over reps timed epochs each (after
// cfg.warmup), spread over cfg.pairProcs pairs of processes, and checks that both
// computed the losses they compute alone.
func runPaired(cfg config, c *Case, w loopio.Workload, dir string, threads int, ref, impl string, reps int) (*Paired, error) {
	pr, err := pooled(ref, impl, reps, cfg.pairProcs, func(n int, swap bool) ([]float64, error) {
		return pairOnce(cfg, c, w, dir, threads, ref, impl, n, swap)
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "%-9s %d thr  %-15s in turns with %s: median %.3f× over %d pairs of %d pairs of processes\n", w.Name, threads, impl, ref, pr.Median, len(pr.Ratios), pr.Procs)
	return pr, nil
}

// pairOnce runs one pair of processes in turns for n timed epochs (impl first when
// implFirst) and returns ref's epoch time over impl's for each.
func pairOnce(cfg config, c *Case, w loopio.Workload, dir string, threads int, ref, impl string, n int, implFirst bool) ([]float64, error) {
	procs, err := startedInTurns(cfg.warmup+n, implFirst, func(i int) (*pairProc, error) {
		return startPairProc(cfg, w, dir, threads, []string{ref, impl}[i], n)
	})
	defer stop(procs)
	if err != nil {
		return nil, err
	}
	var res []*loopio.Result
	for _, p := range procs {
		out, err := p.finish()
		if err != nil {
			return nil, err
		}
		r, err := loopResult(out, p.name, w, threads)
		if err != nil {
			return nil, err
		}
		if alone := c.Impl[p.name]; alone != nil && !slices.Equal(r.Losses, alone.Losses) {
			return nil, fmt.Errorf("%s in turns computed other losses than alone", p.name)
		}
		res = append(res, r)
	}
	var ratios []float64
	for k := cfg.warmup; k < cfg.warmup+n; k++ {
		ratios = append(ratios, res[0].EpochS[k]/res[1].EpochS[k])
	}
	return ratios, nil
}

// runOpsPaired measures the per-op benchmark's Go side against its C++ side in turns: for
// each op, both run as live processes and take turns one rep (n ops) at a time, so that a
// rep and the other language's rep beside it see the same machine. The first rep of each
// is the warm-up. Ratios are C++'s ns per op over gotrain's (as Paired's: ref over impl).
func runOpsPaired(cfg config, n string, reps int) (map[string]*Paired, error) {
	out := map[string]*Paired{}
	for _, op := range []string{"add", "linear"} {
		pr, err := pooled("cpp", "go", reps, cfg.pairProcs, func(k int, swap bool) ([]float64, error) {
			return opsPairOnce(cfg, n, op, k, swap)
		})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "per-op    %-7s in turns with C++: gotrain / C++ %.3f× (median of %d pairs of %d pairs of processes)\n", op, 1/pr.Median, len(pr.Ratios), pr.Procs)
		out[op] = pr
	}
	return out, nil
}

// opsPairOnce runs the per-op benchmark's two sides for op as one pair of processes in
// turns, reps timed reps each after the warm-up (Go first when goFirst), and returns
// C++'s ns per op over gotrain's for each pair of reps.
func opsPairOnce(cfg config, n, op string, reps int, goFirst bool) ([]float64, error) {
	flags := []string{"--n", n, "--reps", fmt.Sprint(reps), "--threads", "1", "--ops", op, "--pair", "1"}
	sides := []struct{ name, bin string }{{"cpp", "ops"}, {"go", "opbench"}}
	procs, err := startedInTurns(reps+1, goFirst, func(i int) (*pairProc, error) {
		return startTurns(sides[i].name, "rep", opsEnv, append([]string{filepath.Join(cfg.bin, sides[i].bin)}, flags...))
	})
	defer stop(procs)
	if err != nil {
		return nil, err
	}
	var res []OpResult
	for _, p := range procs {
		text, err := p.finish()
		var r OpResult
		if err == nil {
			if err = json.Unmarshal([]byte(lastLine(text)), &r); err == nil && len(r.NsPerOp[op]) != reps {
				err = fmt.Errorf("%d timed reps of %s, not %d", len(r.NsPerOp[op]), op, reps)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("per-op %s in turns: %w", p.name, err)
		}
		res = append(res, r)
	}
	var ratios []float64
	for k := range reps {
		ratios = append(ratios, res[0].NsPerOp[op][k]/res[1].NsPerOp[op][k])
	}
	return ratios, nil
}
