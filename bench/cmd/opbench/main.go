// Command opbench is the Go side of the per-op microbenchmark: the cost of one tiny op
// through gotrain's binding, where the op's own work is negligible and what is measured
// is the crossing (cgo call, handle, scope bookkeeping, free). bench/cpp/ops.cpp and
// bench/python/ops.py run the same ops on the same libtorch.
//
//	opbench [-n 100000] [-reps 7] [-block 100] [-threads 1] [-ops add,linear] [-pair 1] [-cpuprofile FILE]
//
// The ops: "add", a.Add(b) of two 16-element float32 tensors; "linear", the forward of
// nn.Linear(16, 16) on a [1, 16] input with autograd recording (its parameters require
// grad, as in training). Ops run in blocks of -block inside one scope, renewed after each
// block as the Trainer renews its step scope after each step, and the time includes the
// renewal (freeing the block's results). One rep is -n ops; the first rep is a warm-up. It prints one JSON
// object: impl, torch, threads, block, n, and ns_per_op[op] for every timed rep. With -pair 1
// each rep waits for a line on stdin and prints "rep N" when done (N counts the reps of every
// op from 1), so that the driver can run it in turns with bench/cpp/ops.cpp.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

func main() {
	n := flag.Int("n", 100000, "ops per rep")
	reps := flag.Int("reps", 7, "timed reps (after one warm-up rep)")
	block := flag.Int("block", 100, "ops per scope")
	threads := flag.Int("threads", 1, "libtorch intra-op threads")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of all reps (go tool pprof)")
	only := flag.String("ops", "add,linear", "the ops to run, comma-separated")
	pair := flag.Int("pair", 0, "1: take turns with another process, waiting for a line on stdin before each rep and printing \"rep N\" after it")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("opbench: ")
	runtime.LockOSThread()
	torch.SetNumThreads(*threads)

	vals := make([]float32, 16)
	for i := range vals {
		vals[i] = float32(i) * 0.25
	}
	a := torch.FromSlice(vals).Escape()
	b := torch.FromSlice(vals).Escape()
	x := torch.FromSlice(vals, 1, 16).Escape()
	lin := nn.NewLinear(16, 16)
	ops := map[string]func(){
		"add":    func() { a.Add(b) },
		"linear": func() { lin.Forward(x) },
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	live := torch.LiveTensors()
	out := map[string][]float64{}
	var turns *bufio.Reader
	if *pair == 1 {
		turns = bufio.NewReader(os.Stdin)
	}
	turn := 0
	for _, name := range strings.Split(*only, ",") {
		op, ok := ops[name]
		if !ok {
			log.Fatalf("-ops: no op %q (add, linear)", name)
		}
		for r := range *reps + 1 {
			if turns != nil {
				if _, err := turns.ReadString('\n'); err != nil {
					log.Fatalf("-pair: stdin closed before rep %d", turn+1)
				}
			}
			t0 := time.Now()
			s := torch.NewScope()
			for done := 0; done < *n; done += *block {
				for range *block {
					op()
				}
				s = s.Renew()
			}
			s.Close()
			if r > 0 {
				out[name] = append(out[name], float64(time.Since(t0).Nanoseconds())/float64(*n))
			}
			if turns != nil {
				turn++
				fmt.Printf("rep %d\n", turn)
			}
		}
	}
	if now := torch.LiveTensors(); now != live {
		log.Fatalf("%d live tensors after the runs, %d before: the scopes did not free the results", now, live)
	}
	res := map[string]any{"impl": "go", "torch": torch.Version(), "threads": torch.NumThreads(),
		"block": *block, "n": *n, "ns_per_op": out}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		log.Fatal(err)
	}
}
