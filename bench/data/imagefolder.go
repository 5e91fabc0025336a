package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
)

// pyScript is the Python side of the comparison, run from the repository root.
const pyScript = "bench/data/imagefolder.py"

// compareImageFolder measures gotrain's loader and PyTorch's DataLoader on the same
// ImageFolder of JPEGs with the same transforms and worker counts, and prints a table.
// With cpuProfile set, the first round of gotrain's loader runs is profiled into that
// file.
func compareImageFolder(root, python, workerList string, batch int, cpuProfile string) error {
	if root == "" {
		dir, err := os.MkdirTemp("", "gotrain-imagefolder-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if out, err := exec.Command(python, pyScript, "--make", "--root", dir).CombinedOutput(); err != nil {
			return fmt.Errorf("%s --make: %v\n%s", pyScript, err, out)
		}
		root = dir
	}
	ds, err := data.NewImageFolder(root, data.ImageFolderOptions{})
	if err != nil {
		return err
	}
	const crop, epochs, rounds = 112, 2, 3
	// Python's side runs torch.set_num_threads(1) (its workers do so themselves); so does
	// this one, for the libtorch ops of the uint8 variant.
	torch.SetNumThreads(1)
	aug := data.Compose(data.RandomResizedCrop{Height: crop, Width: crop}, data.RandomHorizontalFlip{P: 0.5},
		data.ToTensor(), data.Normalize{Mean: data.ImageNetMean, Std: data.ImageNetStd})
	var workers []int
	for _, f := range strings.Split(workerList, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("bad -workers %q", workerList)
		}
		workers = append(workers, w)
	}
	// The two sides take turns, rounds times, in alternating order; each round's ratio
	// compares runs made back to back, since other jobs on a shared machine slow
	// whichever side runs at the time. uint8 is the same pipeline with the images sent
	// as uint8 and ToTensor + Normalize done on the whole batch by libtorch in Next
	// (LoaderOptions.OnDevice).
	crop8 := data.Compose(data.RandomResizedCrop{Height: crop, Width: crop}, data.RandomHorizontalFlip{P: 0.5})
	onDevice := func(b *data.Batch) {
		b.Fields[data.Input] = data.NormalizeImages(b.Get(data.Input), data.ImageNetMean, data.ImageNetStd)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	results := make([]round, rounds)
	for r := range results {
		res := &results[r]
		res.f32, res.u8, res.py = map[int]rate{}, map[int]rate{}, map[int]rate{}
		res.load[0] = loadAverage()
		goSide := func() error {
			defer pprof.StopCPUProfile() // the first round only: a no-op later
			if err := measureLoader(ds, data.LoaderOptions{Transform: aug}, batch, workers, epochs, res.f32); err != nil {
				return err
			}
			return measureLoader(ds, data.LoaderOptions{Transform: crop8, OnDevice: onDevice}, batch, workers, epochs, res.u8)
		}
		pySide := func() error {
			out, err := exec.Command(python, pyScript, "--root", root, "--workers", workerList, "--batch", strconv.Itoa(batch),
				"--crop", strconv.Itoa(crop), "--epochs", strconv.Itoa(epochs)).Output()
			if err != nil {
				return fmt.Errorf("%s: %w", pyScript, err)
			}
			var rates map[string][2]float64
			if err := json.Unmarshal(out, &rates); err != nil {
				return fmt.Errorf("%s printed %q: %w", pyScript, out, err)
			}
			for _, w := range workers {
				v := rates[strconv.Itoa(w)]
				res.py[w] = rate{v[0], v[1]}
			}
			return nil
		}
		sides := []func() error{goSide, pySide}
		if r%2 == 1 {
			sides[0], sides[1] = pySide, goSide
		}
		for _, side := range sides {
			if err := side(); err != nil {
				return err
			}
		}
		res.load[1] = loadAverage()
	}
	fmt.Printf("ImageFolder of %d JPEGs (%s), RandomResizedCrop(%d) + flip + ToTensor + Normalize, batch %d, %d CPUs, %d rounds\n\n",
		ds.Len(), root, crop, batch, runtime.NumCPU(), rounds)
	fmt.Printf("samples/s of wall time, and in parentheses per CPU-second (all threads; for Python the main process and its workers); load: the 1-minute load average before and after the round\n\n")
	fmt.Printf("| round | load | workers | PyTorch DataLoader | gotrain | ratio | gotrain, uint8 + NormalizeImages in Next | ratio |\n")
	fmt.Printf("|------:|-----:|--------:|-------------------:|--------:|------:|-----------------------------------------:|------:|\n")
	for r, res := range results {
		for _, w := range workers {
			py, g, u := res.py[w], res.f32[w], res.u8[w]
			fmt.Printf("| %d | %.1f–%.1f | %d | %.0f (%.0f) | %.0f (%.0f) | %.2fx (%.2fx) | %.0f (%.0f) | %.2fx (%.2fx) |\n", r+1, res.load[0], res.load[1], w,
				py.wall, py.cpu, g.wall, g.cpu, g.wall/py.wall, g.cpu/py.cpu, u.wall, u.cpu, u.wall/py.wall, u.cpu/py.cpu)
		}
	}
	fmt.Printf("\nmedian over the rounds of each round's ratio (wall time; per CPU-second):\n\n")
	fmt.Printf("| workers | gotrain / PyTorch | gotrain, uint8 + NormalizeImages / PyTorch |\n|--------:|------------------:|------------------------------------------:|\n")
	for _, w := range workers {
		f32 := medianRatio(results, func(r round) (rate, rate) { return r.f32[w], r.py[w] })
		u8 := medianRatio(results, func(r round) (rate, rate) { return r.u8[w], r.py[w] })
		fmt.Printf("| %d | %.2fx (%.2fx) | %.2fx (%.2fx) |\n", w, f32.wall, f32.cpu, u8.wall, u8.cpu)
	}
	return nil
}

// medianRatio is the median over the rounds of the ratio of the two rates pair picks
// from each, in wall time and per CPU-second.
func medianRatio(results []round, pair func(round) (rate, rate)) rate {
	var wall, cpu []float64
	for _, r := range results {
		a, b := pair(r)
		wall, cpu = append(wall, a.wall/b.wall), append(cpu, a.cpu/b.cpu)
	}
	slices.Sort(wall)
	slices.Sort(cpu)
	return rate{wall[len(wall)/2], cpu[len(cpu)/2]}
}

// round is one round of the comparison: the rates per worker count of gotrain's
// float32 and uint8 pipelines and of Python's, and the load average around them.
type round struct {
	f32, u8, py map[int]rate
	load        [2]float64
}

// loadAverage is the 1-minute load average (0 where /proc/loadavg is unreadable).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// measureLoader reads a warm-up epoch and then epochs timed epochs of ds for each worker
// count, recording the rate in rates.
func measureLoader(ds data.Dataset, opts data.LoaderOptions, batch int, workers []int, epochs int, rates map[int]rate) error {
	for _, w := range workers {
		opts.BatchSize, opts.Shuffle, opts.Workers, opts.Seed = batch, true, w, 1
		l, err := data.NewLoader(ds, opts)
		if err != nil {
			return err
		}
		readEpoch(l, 0, l.Len()) // warm-up: page cache, buffers
		var n int
		var elapsed time.Duration
		cpu0 := cpuSeconds()
		for e := range epochs {
			k, d := readEpoch(l, 1+e, l.Len())
			n, elapsed = n+k, elapsed+d
		}
		rates[w] = rate{float64(n) / elapsed.Seconds(), float64(n) / (cpuSeconds() - cpu0)}
	}
	return nil
}

// rate is a throughput in samples per second of wall time and per second of CPU time.
// Other jobs on a shared machine lower the first; the second shows the work per sample.
type rate struct{ wall, cpu float64 }

// cpuSeconds is the user and system CPU time of this process, all threads.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
