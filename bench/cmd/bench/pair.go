package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
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
}

// pairProc is one loop of a pair.
type pairProc struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	err  bytes.Buffer
}

func startPairProc(cfg config, w loopio.Workload, dir string, threads int, impl string, reps int) (*pairProc, error) {
	env, args := loopCommand(cfg, w, dir, threads, impl, reps)
	p := &pairProc{name: impl, cmd: exec.Command(args[0], append(args[1:], "--pair", "1")...)}
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
		return nil, fmt.Errorf("%s: %w", impl, err)
	}
	return p, nil
}

// epoch lets p run its next epoch and waits for it to end.
func (p *pairProc) epoch(e int) error {
	if _, err := io.WriteString(p.in, "go\n"); err != nil {
		return fmt.Errorf("%s: epoch %d: %w (%s)", p.name, e, err, strings.TrimSpace(p.err.String()))
	}
	line, err := p.out.ReadString('\n')
	if want := fmt.Sprintf("epoch %d\n", e); err != nil || line != want {
		return fmt.Errorf("%s: epoch %d: read %q, %v (%s)", p.name, e, line, err, strings.TrimSpace(p.err.String()))
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

// runPaired measures impl against ref in turns over reps timed epochs each (after
// cfg.warmup), and checks that both computed the losses they compute alone.
func runPaired(cfg config, c *Case, w loopio.Workload, dir string, threads int, ref, impl string, reps int) (*Paired, error) {
	var procs []*pairProc
	defer func() {
		for _, p := range procs {
			if p.cmd.ProcessState == nil {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}
	}()
	for _, name := range []string{ref, impl} {
		p, err := startPairProc(cfg, w, dir, threads, name, reps)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	for e := 1; e <= cfg.warmup+reps; e++ {
		order := procs
		if e%2 == 0 {
			order = []*pairProc{procs[1], procs[0]}
		}
		for _, p := range order {
			if err := p.epoch(e); err != nil {
				return nil, err
			}
		}
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
	pr := &Paired{Ref: ref, Impl: impl}
	for k := cfg.warmup; k < cfg.warmup+reps; k++ {
		pr.Ratios = append(pr.Ratios, res[0].EpochS[k]/res[1].EpochS[k])
	}
	pr.Median = median(pr.Ratios)
	fmt.Fprintf(os.Stderr, "%-9s %d thr  %-15s in turns with %s: median %.3f× over %d pairs\n", w.Name, threads, impl, ref, pr.Median, reps)
	return pr, nil
}
