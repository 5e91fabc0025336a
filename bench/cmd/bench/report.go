package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

func markdown(r *Results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("Command: `%s` — %s on %s (%s, %d cores), torch %s; load average %s at the start, %s at the end. ",
		r.Command, r.Date, r.Host, r.CPU, r.Cores, r.Torch, r.LoadStart, r.LoadEnd)
	p("Every process ran with `%s` (glibc's malloc thresholds as gotrain sets them).\n\n", strings.Join(r.MallocEnv, " "))

	p("Step time in µs, scored: the fastest of %d runs (processes) of each implementation, in rotated order, each run counted by its median over %d timed epochs after one warm-up epoch; in brackets the median of the runs, then the fastest and slowest epoch of all runs. ", r.Rounds, len(firstTimed(r))/max(r.Rounds, 1))
	p("The fastest run is scored because this machine's interference only adds time, and a process keeps its speed for its life (up to 30%% slower than the next), so the fastest run is the closest to the code's own cost; every implementation gets the same runs. ")
	p("Columns are grouped by the Adam kernel they run, each group with a C++ twin that calls the same ATen functions: **fused** = `_fused_adam_` (PyTorch's `fused=True`, gotrain's default); ")
	p("**foreach** = the multi-tensor `_foreach_*` ops (PyTorch's `foreach=True`, gotrain's `Fused: false`); **single** = per-tensor ops, `_single_tensor_adam`, PyTorch's default on the CPU (multi-tensor is its default on CUDA only), which the seed's loop runs. ")
	p("gotrain = the Trainer over a Loader; raw loop = the same steps against package torch, each narrowing its batch out of the in-memory tensors (a view) as the Loader does for resident data; own layers = the Trainer with the model's Linear, ReLU and Flatten stages written as a user's own layers (`goloop -own-layers`), whose step the Trainer records and replays as it does the built-ins'; Python = the seed's loop over a DataLoader; Python (batches) = over pre-sliced batches; C++ = libtorch's C++ API narrowing its batches as the raw loop does. ")
	p("Load = the highest 1-minute load average around the runs (%d cores; above that, timings are inflated by other jobs).\n\n", r.Cores)
	p("| workload | threads |")
	for _, im := range impls {
		p(" %s |", im.label)
	}
	p(" load |\n|---|--:|%s--:|\n", strings.Repeat("--:|", len(impls)))
	for _, c := range r.Cases {
		p("| %s | %d |", c.Desc, c.Threads)
		for _, im := range impls {
			p(" %s |", stepCell(c.Impl[im.name]))
		}
		p(" %.1f |\n", maxLoad(c))
	}

	p("\nLike for like: speed ratios of each gotrain loop against the loops running the same Adam kernel (>1: gotrain is faster), and the step time over the C++ twin, which is the binding's own cost. ")
	p("Losses: every implementation's first-epoch losses against its C++ twin's (tolerance %g), and the three twins against each other (tolerance %g in float32, %g under bf16 autocast). ",
		sameKernelTol, crossKernelTol(false), crossKernelTol(true))
	p("Loader alone = one epoch of gotrain's Loader with nothing else, per step. The last column is the comparison a user of the seed makes (its default single-tensor Adam against gotrain's fused default): different kernels, so it is not scored.\n\n")
	fp := firstPaired(r)
	p("In turns: the same C++ twin and gotrain loop run as two live processes that take one epoch each in turn (pair.go), %d pairs of epochs from %s; the cell is the median over the pairs of the C++ epoch's time over its gotrain neighbour's, with the middle half of the pairs in brackets. Two epochs side by side see the same machine, so this ratio is free of the drift between minutes that the separate runs are exposed to, and pooling several pairs of processes evens out the speed each process keeps for its life; it is the scored figure where it exists.\n\n", fp.pairs(), fp.procsText())
	p("| workload | threads | gotrain vs C++ (fused), in turns | raw loop vs C++ (fused), in turns | own layers vs C++ (fused), in turns | unfused vs C++ (foreach), in turns | gotrain vs C++ (fused) | gotrain vs Python (fused) | unfused vs C++ (foreach) | unfused vs Python (foreach) | gotrain − C++ (fused) | raw loop − C++ (fused) | own layers − C++ (fused) | unfused − C++ (foreach) | loader alone | gotrain samples/s | losses: same kernel | losses: across kernels | gotrain vs the seed's Python (unscored) |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|:-:|--:|\n")
	for _, c := range r.Cases {
		p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f µs | %.0f | %s | %s | %s |\n", c.Desc, c.Threads,
			pairedCell(c, "go"), pairedCell(c, "go-raw"), pairedCell(c, "go-own"), pairedCell(c, "go-unfused"), ratio(c, "cpp-fused", "go"), ratio(c, "python-fused", "go"), ratio(c, "cpp-foreach", "go-unfused"), ratio(c, "python-foreach", "go-unfused"),
			overCell(c, "go"), overCell(c, "go-raw"), overCell(c, "go-own"), overCell(c, "go-unfused"), c.GoLoaderUS, get(c, "go").SamplesPerS,
			lossCell(c.SameKernelDiff, sameKernelTol), lossCell(c.CrossKernelDiff, c.CrossKernelTol),
			ratio(c, "python", "go"))
	}

	p("\nMemory in MiB: peak RSS over the RSS at start-up with the libraries loaded (each process maps different ones: Python's `import torch` maps the wheel's CUDA libraries, the Go and C++ binaries libtorch_cpu's), then the absolute peak and the RSS growth from epoch 2 to the last epoch.\n\n")
	p("| workload | threads |")
	for _, im := range impls {
		p(" %s |", im.label)
	}
	p("\n|---|--:|%s\n", strings.Repeat("--:|", len(impls)))
	for _, c := range r.Cases {
		p("| %s | %d |", c.Desc, c.Threads)
		for _, im := range impls {
			if m := c.Impl[im.name]; m != nil {
				p(" %.0f (%.0f; %+.2f%%) |", m.PeakOverBaseMB, m.PeakRSSMB, m.RSSGrowthPct)
			} else {
				p(" – |")
			}
		}
		p("\n")
	}
	if len(r.Ops) > 0 {
		g, c, py := r.Ops["go"], r.Ops["cpp"], r.Ops["python"]
		p("\nPer-op cost (`bench/cmd/opbench`, `bench/cpp/ops.cpp`, `bench/python/ops.py`), ns per op at 1 thread: the fastest of %d reps of %d ops (%d runs of each, in rotated order), as `timeit` advises, in brackets the median rep; scored where there is no in-turns figure. ", len(g.NsPerOp["add"]), g.N, g.Runs)
		if op := firstOpPaired(r); op.pairs() > 0 {
			p("**gotrain / C++ in turns** is the like-for-like figure, scored where it exists: the Go and C++ processes run together and take turns one rep of %d ops at a time (a, b, b, a, ...), and each rep is compared with the other's rep beside it; the median of %d pairs from %s, with the middle half of the pairs in brackets. ", g.N, op.pairs(), op.procsText())
		}
		p("add = `add` of two 16-element float32 tensors; linear = the forward of `Linear(16, 16)` on a [1, 16] input with autograd recording. Each runs in blocks of %d ops whose results are freed together (gotrain: one scope per block, as the Trainer's step scope; C++ and Python: a vector / list of results cleared), the free included.\n\n", g.Block)
		p("| op | gotrain | C++ | Python | gotrain / C++ in turns | gotrain / C++ | gotrain − C++ | Python / gotrain | gotrain / C++ (medians) |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, op := range []string{"add", "linear"} {
			gm, cm, pm := g.Best(op), c.Best(op), py.Best(op)
			p("| %s | %.0f (%.0f) | %.0f (%.0f) | %.0f (%.0f) | %s | %.2f× | %+.0f ns | %.2f× | %.2f× |\n", op, gm, g.Median(op), cm, c.Median(op), pm, py.Median(op),
				opPairedCell(r.OpsPaired[op]), gm/cm, gm-cm, pm/gm, g.Median(op)/c.Median(op))
		}
	}
	if r.Checkpoint != "" {
		p("\nCheckpoint save and load (`bench/checkpoint`):\n\n%s\n", r.Checkpoint)
	}
	if r.DataTable != "" {
		p("\nDataLoader throughput (`bench/data`):\n\n%s\n", r.DataTable)
	}
	p("\nTargets, scored on like-for-like pairs only:\n\n")
	for _, t := range r.Targets {
		p("- %s\n", t)
	}
	return b.String()
}

func firstTimed(r *Results) []float64 {
	if len(r.Cases) == 0 {
		return nil
	}
	return r.Cases[0].Impl["go"].Timed
}

func stepCell(m *Measurement) string {
	if m == nil || m.Steps == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f (%.0f; %.0f–%.0f)", m.StepUS, m.StepUSMedian, m.StepUSMin, m.StepUSMax)
}

// get returns an implementation's measurement, or an empty one for an implementation a
// quick run leaves out: its cells print "–" and its ratios NaN.
func get(c *Case, impl string) *Measurement {
	if m := c.Impl[impl]; m != nil {
		return m
	}
	return &Measurement{StepUS: math.NaN(), OverTwinUS: math.NaN(), PeakOverBaseMB: math.NaN()}
}

// speed is how much faster impl is than ref (ref's step time over impl's).
func speed(c *Case, ref, impl string) float64 { return get(c, ref).StepUS / get(c, impl).StepUS }

func ratio(c *Case, ref, impl string) string {
	v := speed(c, ref, impl)
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

// pairedCell is impl's in-turns ratio to its C++ twin, with the spread of the middle
// half of the pairs.
func pairedCell(c *Case, impl string) string {
	p := c.Paired[impl]
	if p == nil {
		return "–"
	}
	q := slices.Clone(p.Ratios)
	slices.Sort(q)
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", p.Median, q[len(q)/4], q[(3*len(q))/4])
}

// firstPaired is one of the loops' in-turns measurements (they share their counts), or
// nil when there is none.
func firstPaired(r *Results) *Paired {
	for _, c := range r.Cases {
		for _, p := range c.Paired {
			return p
		}
	}
	return nil
}

// firstOpPaired is one of the per-op in-turns measurements, or nil when there is none.
func firstOpPaired(r *Results) *Paired {
	for _, p := range r.OpsPaired {
		return p
	}
	return nil
}

// pairs is the number of pairs of turns of p (0 for nil).
func (p *Paired) pairs() int {
	if p == nil {
		return 0
	}
	return len(p.Ratios)
}

// procsText says how many pairs of processes p's turns were spread over (Procs is 0 in
// results written before it was recorded: one pair).
func (p *Paired) procsText() string {
	if p == nil || p.Procs <= 1 {
		return "one pair of processes"
	}
	return fmt.Sprintf("%d pairs of processes (each started afresh, the one to go first alternating)", p.Procs)
}

// opPairedCell is gotrain's per-op cost over C++'s in turns (the reciprocal of the
// pairs' C++-over-gotrain ratios), with the middle half of the pairs.
func opPairedCell(p *Paired) string {
	if p == nil {
		return "–"
	}
	q := make([]float64, len(p.Ratios))
	for i, v := range p.Ratios {
		q[i] = 1 / v
	}
	slices.Sort(q)
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", 1/p.Median, q[len(q)/4], q[(3*len(q))/4])
}

func overCell(c *Case, impl string) string {
	v := get(c, impl).OverTwinUS
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%+.0f µs", v)
}

func lossCell(d, tol float64) string {
	mark := "✓"
	if d > tol {
		mark = "✗"
	}
	return fmt.Sprintf("%s %.1e (≤ %g)", mark, d, tol)
}

// maxLoad is the highest 1-minute load average seen around the case's runs.
func maxLoad(c *Case) float64 {
	l := 0.0
	for _, m := range c.Impl {
		l = max(l, m.Load[0], m.Load[1])
	}
	return l
}

// targets scores issue 7's, 12's and 39's targets, each on a pair of implementations
// that run the same Adam kernel: the fused pairs (gotrain's default, and the same model
// built from a user's own layers) and the foreach pair (gotrain's Fused: false).
func targets(r *Results) []string {
	var out []string
	check := func(v float64, ok bool, format string, args ...any) {
		mark := "met"
		switch {
		case math.IsNaN(v):
			return // an implementation a quick run leaves out
		case !ok:
			mark = "**missed**"
		}
		out = append(out, mark+": "+fmt.Sprintf(format, args...))
	}
	pairs := []struct{ impl, kernel string }{{"go", "fused"}, {"go-own", "fused"}, {"go-unfused", "foreach"}}
	for _, c := range r.Cases {
		name := fmt.Sprintf("%s, %d thr", c.Desc, c.Threads)
		for _, pr := range pairs {
			cpp, py := "cpp-"+pr.kernel, "python-"+pr.kernel
			label := lookupImpl(pr.impl).label
			vsC, vsPy := speed(c, cpp, pr.impl), speed(c, py, pr.impl)
			switch c.Workload {
			case "mlp", "mlp256", "cnn":
				if p := c.Paired[pr.impl]; p != nil {
					check(p.Median, p.Median >= 0.97, "%s: %s %.2f× C++ (%s) in turns, %.2f× in separate runs (target ≥ 0.97×)", name, label, p.Median, pr.kernel, vsC)
				} else {
					check(vsC, vsC >= 0.97, "%s: %s %.2f× C++ (%s) (target ≥ 0.97×)", name, label, vsC, pr.kernel)
				}
			}
			switch c.Workload {
			case "mlp":
				check(vsPy, vsPy >= 1.4, "%s: %s %.2f× Python (%s) (target ≥ 1.4×)", name, label, vsPy, pr.kernel)
			case "mlp256":
				faster := min(get(c, py).StepUS, get(c, cpp).StepUS) / get(c, pr.impl).StepUS
				check(faster, faster >= 1.1, "%s: %s %.2f× the faster of Python and C++ (%s) (target ≥ 1.1×)", name, label, faster, pr.kernel)
			case "cnn":
				check(vsPy, vsPy >= 1.0, "%s: %s %.2f× Python (%s) (target ≥ 1.0×)", name, label, vsPy, pr.kernel)
			}
			g, p := get(c, pr.impl), get(c, py)
			check(g.PeakOverBaseMB, g.PeakOverBaseMB <= p.PeakOverBaseMB, "%s: %s peak RSS over start-up %.0f MiB vs Python (%s) %.0f MiB (target ≤)",
				name, label, g.PeakOverBaseMB, pr.kernel, p.PeakOverBaseMB)
		}
		g := get(c, "go")
		check(g.RSSGrowthPct, g.RSSGrowthPct < 2, "%s: gotrain RSS growth epoch 2→%d %+.2f%% (target < 2%%)", name, len(g.RSSMB), g.RSSGrowthPct)
	}
	if len(r.Ops) > 0 {
		g, c := r.Ops["go"].Best("add"), r.Ops["cpp"].Best("add")
		if pr := r.OpsPaired["add"]; pr != nil {
			v := 1 / pr.Median
			check(v, v <= 1.2, "tiny op (add of two 16-element tensors): gotrain %.2f× C++ in turns; fastest reps %.0f ns vs %.0f ns, %.2f× (target ≤ 1.2×)", v, g, c, g/c)
		} else {
			check(g, g <= 1.2*c, "tiny op (add of two 16-element tensors): gotrain %.0f ns vs C++ %.0f ns, %.2f× (target ≤ 1.2×)", g, c, g/c)
		}
	}
	if len(r.CkptGo) >= 3 && len(r.CkptPy) >= 3 {
		check(r.CkptGo[0], r.CkptGo[0] <= r.CkptPy[0], "checkpoint save (median): gotrain %.2fs vs torch.save %.2fs", r.CkptGo[0], r.CkptPy[0])
		check(r.CkptGo[2], r.CkptGo[2] <= r.CkptPy[2], "checkpoint load (median): gotrain %.2fs vs torch.load %.2fs", r.CkptGo[2], r.CkptPy[2])
	}
	return out
}
