// Command checkpoint measures package checkpoint against PyTorch on the same machine
// and disk: writing and reading a ~500 MB float32 state dict with checkpoint.Write
// (atomic: temporary file, fsync, rename), checkpoint.WriteTo into a plain file (no
// fsync, as torch.save) and checkpoint.Read, against torch.save (with and without
// fsync) and torch.load (weights_only=True, and mmap=True) in the project virtualenv.
//
//	go run ./bench/checkpoint [-mb 500] [-tensors 100] [-reps 5] [-dir DIR] [-python PY]
//
// Each number is the median of -reps runs (at least 5), in MB/s of file size. Both
// languages get the same page-cache treatment (prepare): before every timed write the
// previous file is removed and sync(2) flushes all dirty pages, so no write pays for the
// last one's write-back; before every timed read the same sync runs, and the file, just
// written by the same process, is in the page cache, clean.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
)

func main() {
	mb := flag.Int("mb", 500, "state dict size in MiB")
	tensors := flag.Int("tensors", 100, "number of float32 tensors")
	reps := flag.Int("reps", 5, "repetitions (the median is reported; at least 5)")
	dir := flag.String("dir", os.TempDir(), "directory for the files")
	python := flag.String("python", filepath.Join(testpy.Root(), ".venv", "bin", "python"), "Python with torch")
	flag.Parse()
	if *reps < 5 {
		log.Fatalf("-reps %d: the median needs at least 5 runs", *reps)
	}

	numel := *mb << 20 / 4 / *tensors
	sd := checkpoint.NewOrderedDict()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range *tensors {
		data := make([]byte, 4*numel)
		for j := 0; j < numel; j++ {
			binary.LittleEndian.PutUint32(data[4*j:], math.Float32bits(float32(rng.NormFloat64())))
		}
		sd.Set(fmt.Sprintf("layer%d.weight", i), checkpoint.NewTensor(checkpoint.Float32, []int64{int64(numel)}, data))
	}
	path := filepath.Join(*dir, "gotrain-bench-go.pt")
	defer os.Remove(path)

	// median runs prepare, untimed, then f, timed, -reps times.
	median := func(prepare func(), f func() error) float64 {
		var ts []float64
		for range *reps {
			prepare()
			t := time.Now()
			if err := f(); err != nil {
				log.Fatal(err)
			}
			ts = append(ts, time.Since(t).Seconds())
		}
		slices.Sort(ts)
		return ts[len(ts)/2]
	}
	beforeWrite := func() {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			log.Fatal(err)
		}
		syscall.Sync()
	}
	goWrite := median(beforeWrite, func() error { return checkpoint.Write(path, sd) })
	goWriteTo := median(beforeWrite, func() error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := checkpoint.WriteTo(f, sd); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	var v any
	goRead := median(syscall.Sync, func() (err error) { v, err = checkpoint.Read(path); return err })
	if d, _ := checkpoint.GetDict(v); d.Len() != *tensors {
		log.Fatalf("read back %d tensors", d.Len())
	}
	fi, err := os.Stat(path)
	if err != nil {
		log.Fatal(err)
	}
	size := float64(fi.Size()) / 1e6

	cmd := exec.Command(*python, "bench/checkpoint/bench.py", filepath.Join(*dir, "gotrain-bench-py.pt"),
		fmt.Sprint(*mb), fmt.Sprint(*tensors), fmt.Sprint(*reps))
	cmd.Dir = testpy.Root()
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		log.Fatalf("python: %v", err)
	}
	var py map[string]float64
	if err := json.Unmarshal(out, &py); err != nil {
		log.Fatalf("python output %q: %v", out, err)
	}
	pySize := py["bytes"] / 1e6

	fmt.Printf("state dict: %d float32 tensors, %.0f MB file (Go), %.0f MB (Python); median of %d runs, each write to a removed file after sync(2), each read after sync(2) from the page cache\n\n", *tensors, size, pySize, *reps)
	fmt.Printf("| operation | Go | Python torch |\n|---|---:|---:|\n")
	row := func(name string, g float64, gs float64, p float64, ps float64) {
		fmt.Printf("| %s | %.0f MB/s (%.2fs) | %.0f MB/s (%.2fs) |\n", name, gs/g, g, ps/p, p)
	}
	row("write, no fsync (WriteTo / torch.save)", goWriteTo, size, py["save"], pySize)
	row("write + fsync (atomic Write / torch.save + fsync)", goWrite, size, py["save_fsync"], pySize)
	row("read (Read / torch.load)", goRead, size, py["load"], pySize)
	fmt.Printf("| read, torch.load(mmap=True) (lazy: pages not touched) | | %.0f MB/s (%.2fs) |\n", pySize/py["load_mmap"], py["load_mmap"])
}
