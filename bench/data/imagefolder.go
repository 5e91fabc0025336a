package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
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
	goRate, pyRate := map[int]float64{}, map[int]float64{}
	for range rounds {
		for _, w := range workers {
			l, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: batch, Shuffle: true, Workers: w, Seed: 1, Transform: aug})
			if err != nil {
				return err
			}
			readEpoch(l, 0, l.Len()) // warm-up: page cache, buffers
			var n int
			var elapsed time.Duration
			for e := range epochs {
				k, d := readEpoch(l, 1+e, l.Len())
				n, elapsed = n+k, elapsed+d
			}
			goRate[w] = max(goRate[w], float64(n)/elapsed.Seconds())
		}
		out, err := exec.Command(python, pyScript, "--root", root, "--workers", workerList, "--batch", strconv.Itoa(batch),
			"--crop", strconv.Itoa(crop), "--epochs", strconv.Itoa(epochs)).Output()
		if err != nil {
			return fmt.Errorf("%s: %w", pyScript, err)
		}
		var rates map[string]float64
		if err := json.Unmarshal(out, &rates); err != nil {
			return fmt.Errorf("%s printed %q: %w", pyScript, out, err)
		}
		for _, w := range workers {
			pyRate[w] = max(pyRate[w], rates[strconv.Itoa(w)])
		}
	}
	fmt.Printf("ImageFolder of %d JPEGs (%s), RandomResizedCrop(%d) + flip + ToTensor + Normalize, batch %d, %d CPUs, best of %d rounds\n\n",
		ds.Len(), root, crop, batch, runtime.NumCPU(), rounds)
	fmt.Printf("| workers | gotrain samples/s | PyTorch DataLoader samples/s | ratio |\n")
	fmt.Printf("|--------:|------------------:|-----------------------------:|------:|\n")
	for _, w := range workers {
		py := pyRate[w]
		fmt.Printf("| %7d | %17.0f | %28.0f | %4.2fx |\n", w, goRate[w], py, goRate[w]/py)
	}
	return nil
}
