package main

import (
	"fmt"
	"math"
	"strings"
)

func markdown(r *Results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("Command: `%s` — %s on %s (%s, %d cores), torch %s; load average %s at the start, %s at the end.\n\n",
		r.Command, r.Date, r.Host, r.CPU, r.Cores, r.Torch, r.LoadStart, r.LoadEnd)
	p("Step time: median over %d timed epochs per implementation (min–max), in µs, pooled over %d run(s) of each implementation in rotated order, each after one warm-up epoch. ", len(firstTimed(r)), r.Rounds)
	p("Ratios are speed ratios (>1: gotrain is faster). gotrain = the Trainer with its default fused Adam (PyTorch's fused=True kernel); Python = the seed's loop fed by a DataLoader; ")
	p("Python (batches) = the same loop over pre-sliced batch tensors; gotrain (raw loop) = the loop written against package torch over pre-sliced batches, without Trainer and Loader; gotrain (unfused) = the Trainer with PyTorch's default Adam arithmetic, the algorithm the Python and C++ loops run; Python (fused) = the seed's loop with Adam(fused=True), the kernel gotrain runs. Losses agree = each implementation's first-epoch losses against the implementation running the same Adam kernel (C++, or Python (fused) for the fused ones), within 1e-4. ")
	p("Loader alone = one epoch of gotrain's Loader with nothing else, per step. Load = the highest 1-minute load average around the runs (the machine has %d cores; above that, timings are inflated by other jobs).\n\n", r.Cores)
	p("| workload | threads | gotrain | gotrain (raw loop) | gotrain (unfused) | Python | Python (batches) | Python (fused) | C++ | vs Python | vs Python (batches) | vs Python (fused) | vs C++ | unfused vs C++ | gotrain − C++ | raw − C++ | loader alone | gotrain samples/s | losses agree | load |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|--:|\n")
	for _, c := range r.Cases {
		g, py, cc := c.Impl["go"], c.Impl["python"], c.Impl["cpp"]
		gr, gu, pb, pf := orEmpty(c.Impl["go-raw"]), orEmpty(c.Impl["go-unfused"]), orEmpty(c.Impl["python-batches"]), orEmpty(c.Impl["python-fused"])
		ok := "✓"
		if !c.LossCheckOK {
			ok = "✗"
		}
		p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %.2f× | %.2f× | %.2f× | %.2f× | %.2f× | %+.0f µs | %+.0f µs | %.0f µs | %.0f | %s (%.0e) | %.1f |\n",
			c.Desc, c.Threads, stepCell(g), stepCell(gr), stepCell(gu), stepCell(py), stepCell(pb), stepCell(pf), stepCell(cc),
			py.StepUS/g.StepUS, pb.StepUS/g.StepUS, pf.StepUS/g.StepUS, cc.StepUS/g.StepUS, cc.StepUS/gu.StepUS, g.OverCppUS, gr.OverCppUS, c.GoLoaderUS, g.SamplesPerS,
			ok, maxLossDiff(c), maxLoad(c))
	}
	p("\nMemory: peak RSS (MiB) and RSS growth from epoch 2 to the last epoch.\n\n")
	p("| workload | threads | gotrain | gotrain (raw loop) | gotrain (unfused) | Python | Python (batches) | Python (fused) | C++ |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range r.Cases {
		p("| %s | %d |", c.Desc, c.Threads)
		for _, impl := range impls {
			if m := c.Impl[impl]; m != nil {
				p(" %.0f (%+.2f%%) |", m.PeakRSSMB, m.RSSGrowthPct)
			} else {
				p(" – |")
			}
		}
		p("\n")
	}
	if r.Checkpoint != "" {
		p("\nCheckpoint save and load (`bench/checkpoint`):\n\n%s\n", r.Checkpoint)
	}
	if r.DataTable != "" {
		p("\nDataLoader throughput (`bench/data`):\n\n%s\n", r.DataTable)
	}
	p("\nTargets:\n\n")
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
	if m.Steps == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", m.StepUS, m.StepUSMin, m.StepUSMax)
}

// orEmpty stands in for an implementation a quick run leaves out: its cells print "–"
// and its ratios NaN.
func orEmpty(m *Measurement) *Measurement {
	if m == nil {
		return &Measurement{StepUS: math.NaN(), OverCppUS: math.NaN()}
	}
	return m
}

// maxLoad is the highest 1-minute load average seen around the case's runs.
func maxLoad(c *Case) float64 {
	l := 0.0
	for _, m := range c.Impl {
		l = max(l, m.Load[0], m.Load[1])
	}
	return l
}

func maxLossDiff(c *Case) float64 {
	d := 0.0
	for _, m := range c.Impl {
		d = max(d, m.LossDiff)
	}
	return d
}

// targets evaluates issue 7's targets on the measurements.
func targets(r *Results) []string {
	var out []string
	check := func(ok bool, format string, args ...any) {
		mark := "met"
		if !ok {
			mark = "**missed**"
		}
		out = append(out, mark+": "+fmt.Sprintf(format, args...))
	}
	for _, c := range r.Cases {
		g, py, cc := c.Impl["go"], c.Impl["python"], c.Impl["cpp"]
		vsPy, vsC := py.StepUS/g.StepUS, cc.StepUS/g.StepUS
		switch c.Workload {
		case "mlp":
			check(vsPy >= 1.4, "tiny MLP, %d thr: gotrain %.2f× Python (target ≥ 1.4×)", c.Threads, vsPy)
			check(vsC >= 0.95, "tiny MLP, %d thr: gotrain %.2f× C++ (target ≥ 0.95×; with the C++ loop's unfused Adam arithmetic %.2f×)", c.Threads, vsC, unfusedVsC(c))
		case "mlp256":
			faster := min(py.StepUS, cc.StepUS) / g.StepUS
			check(faster >= 1.1, "MLP 784-256-10, %d thr: gotrain %.2f× the faster of Python and C++ (target ≥ 1.1×; unfused %.2f× C++)", c.Threads, faster, unfusedVsC(c))
		case "cnn":
			check(vsPy >= 1.0, "CNN, %d thr: gotrain %.2f× Python (target ≥ 1.0×)", c.Threads, vsPy)
			check(vsC >= 0.97, "CNN, %d thr: gotrain %.2f× C++ (target ≥ 0.97×; unfused %.2f×)", c.Threads, vsC, unfusedVsC(c))
		}
		check(g.PeakRSSMB <= py.PeakRSSMB, "%s, %d thr: gotrain peak RSS %.0f MiB vs Python %.0f MiB (target ≤)", c.Workload, c.Threads, g.PeakRSSMB, py.PeakRSSMB)
		check(g.RSSGrowthPct < 2, "%s, %d thr: gotrain RSS growth epoch 2→%d %+.2f%% (target < 2%%)", c.Workload, c.Threads, len(g.RSSMB), g.RSSGrowthPct)
	}
	if len(r.CkptGo) >= 3 && len(r.CkptPy) >= 3 {
		check(r.CkptGo[0] <= r.CkptPy[0], "checkpoint save: gotrain %.2fs vs torch.save %.2fs", r.CkptGo[0], r.CkptPy[0])
		check(r.CkptGo[2] <= r.CkptPy[2], "checkpoint load: gotrain %.2fs vs torch.load %.2fs", r.CkptGo[2], r.CkptPy[2])
	}
	return out
}

// unfusedVsC is the unfused Trainer's speed against the C++ loop (NaN in quick runs).
func unfusedVsC(c *Case) float64 {
	return c.Impl["cpp"].StepUS / orEmpty(c.Impl["go-unfused"]).StepUS
}
