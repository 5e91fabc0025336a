package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/torch/data"
)

// pyScript is the Python side of the comparison, run from the repository root.
const pyScript = "bench/data/imagefolder.py"

// compareImageFolder measures gotrain's loader and PyTorch's DataLoader on the same
// ImageFolder of JPEGs with the same transforms and worker counts, and prints a table.
func compareImageFolder(root, python, workerList string, batch int) error {
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
	// The two sides take turns, rounds times, and each keeps its best rate: on a shared
	// machine other jobs slow whichever side runs at the time.
	// uint8 is the same pipeline with the images sent as uint8 and ToTensor + Normalize
	// done on the whole batch by libtorch in Next (LoaderOptions.OnDevice).
	goRate, u8Rate, pyRate := map[int]rate{}, map[int]rate{}, map[int]rate{}
	crop8 := data.Compose(data.RandomResizedCrop{Height: crop, Width: crop}, data.RandomHorizontalFlip{P: 0.5})
	onDevice := func(b *data.Batch) {
		b.Fields[data.Input] = data.NormalizeImages(b.Get(data.Input), data.ImageNetMean, data.ImageNetStd)
	}
	for range rounds {
		for _, run := range []struct {
			rates map[int]rate
			opts  data.LoaderOptions
		}{{goRate, data.LoaderOptions{Transform: aug}}, {u8Rate, data.LoaderOptions{Transform: crop8, OnDevice: onDevice}}} {
			if err := measureLoader(ds, run.opts, batch, workers, epochs, run.rates); err != nil {
				return err
			}
		}
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
			r := rates[strconv.Itoa(w)]
			pyRate[w] = pyRate[w].best(rate{r[0], r[1]})
		}
	}
	fmt.Printf("ImageFolder of %d JPEGs (%s), RandomResizedCrop(%d) + flip + ToTensor + Normalize, batch %d, %d CPUs, best of %d rounds\n\n",
		ds.Len(), root, crop, batch, runtime.NumCPU(), rounds)
	fmt.Printf("samples/s of wall time, and in parentheses per CPU-second (all threads; for Python the main process and its workers)\n\n")
	fmt.Printf("| workers | PyTorch DataLoader | gotrain | ratio | gotrain, uint8 + NormalizeImages in Next | ratio |\n")
	fmt.Printf("|--------:|-------------------:|--------:|------:|-----------------------------------------:|------:|\n")
	for _, w := range workers {
		py, g, u := pyRate[w], goRate[w], u8Rate[w]
		fmt.Printf("| %d | %.0f (%.0f) | %.0f (%.0f) | %.2fx (%.2fx) | %.0f (%.0f) | %.2fx (%.2fx) |\n", w, py.wall, py.cpu,
			g.wall, g.cpu, g.wall/py.wall, g.cpu/py.cpu, u.wall, u.cpu, u.wall/py.wall, u.cpu/py.cpu)
	}
	return nil
}

// measureLoader reads a warm-up epoch and then epochs timed epochs of ds for each worker
// count, keeping the best rate seen in rates.
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
		rates[w] = rates[w].best(rate{float64(n) / elapsed.Seconds(), float64(n) / (cpuSeconds() - cpu0)})
	}
	return nil
}

// rate is a throughput in samples per second of wall time and per second of CPU time.
// Other jobs on a shared machine lower the first; the second shows the work per sample.
type rate struct{ wall, cpu float64 }

// best keeps the better of each measure.
func (r rate) best(o rate) rate { return rate{max(r.wall, o.wall), max(r.cpu, o.cpu)} }

// cpuSeconds is the user and system CPU time of this process, all threads.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
