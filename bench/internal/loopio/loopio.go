// Package loopio holds what the three training-loop benchmark programs share on the Go
// side: the workloads, the raw tensor files that carry the dataset and the initial
// weights between them, and the JSON result each prints; and what the benchmark programs
// read of the process and the machine (resident set size, load average).
package loopio

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// Workload is one benchmarked training configuration.
type Workload struct {
	Name   string
	Hidden int64 // MLP 784-Hidden-10; 0 means models.SmallCNN
	Batch  int
	BF16   bool // autocast to bfloat16 on the CPU
	Desc   string
}

// Workloads lists the training workloads in table order.
var Workloads = []Workload{
	{Name: "mlp", Hidden: 32, Batch: 16, Desc: "MLP 784-32-10, batch 16, Adam"},
	{Name: "mlp256", Hidden: 256, Batch: 64, Desc: "MLP 784-256-10, batch 64, Adam"},
	{Name: "cnn", Batch: 128, Desc: "SmallCNN, batch 128, Adam"},
	{Name: "cnn-bf16", Batch: 128, BF16: true, Desc: "SmallCNN, batch 128, Adam, AMP bf16"},
}

// Lookup returns the workload called name.
func Lookup(name string) (Workload, error) {
	for _, w := range Workloads {
		if w.Name == name {
			return w, nil
		}
	}
	return Workload{}, fmt.Errorf("unknown workload %q", name)
}

// Result is what each implementation prints: one JSON object.
type Result struct {
	Impl string `json:"impl"`
	// Adam is the Adam implementation the loop ran: fused, foreach or single.
	Adam     string `json:"adam"`
	Torch    string `json:"torch"`
	Workload string `json:"workload"`
	Threads  int    `json:"threads"`
	Steps    int    `json:"steps"`
	Batch    int    `json:"batch"`
	Warmup   int    `json:"warmup"`
	// EpochS is the wall time of every epoch, warm-up epochs first.
	EpochS []float64 `json:"epoch_s"`
	// RSSMB is the resident set size after every epoch, in MiB.
	RSSMB []float64 `json:"rss_mb"`
	// BaseRSSMB is the resident set size at start-up, libtorch loaded and nothing
	// allocated: peak minus base is what the loop itself used, comparable between
	// processes that map different libraries (Python's wheel maps CUDA's too).
	BaseRSSMB float64 `json:"base_rss_mb"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// Losses are the first epoch's first losses, from the shared initial weights.
	Losses []float64 `json:"losses"`
	// Go only: one loader epoch alone, GOMAXPROCS, live tensor handles at the end.
	LoaderS     float64 `json:"loader_s,omitempty"`
	GOMAXPROCS  int     `json:"gomaxprocs,omitempty"`
	LiveTensors int64   `json:"live_tensors,omitempty"`
	Loader      string  `json:"loader,omitempty"`
	// CgoCallsPerStep is the cgo calls of the timed epochs divided by their steps
	// (runtime.NumCgoCall): the crossings a step makes into C.
	CgoCallsPerStep float64 `json:"cgo_calls_per_step,omitempty"`
	// GoAllocBytesPerStep and GoAllocsPerStep are the Go heap's allocations (bytes,
	// objects) of the timed epochs divided by their steps (Go loops only).
	GoAllocBytesPerStep float64 `json:"go_alloc_bytes_per_step,omitempty"`
	GoAllocsPerStep     float64 `json:"go_allocs_per_step,omitempty"`
	// FusedStep is true when the Trainer ran its steps as one call each
	// (trainer.WithOneCallStep).
	FusedStep bool `json:"fused_step,omitempty"`
	// StepsPerCall is the most steps the Trainer ran per call in the timed epochs
	// (trainer.WithStepsPerCall).
	StepsPerCall int `json:"steps_per_call,omitempty"`
}

// Tensor is one named array of a raw tensor file: F32 or I64 is set.
type Tensor struct {
	Name  string
	Shape []int64
	F32   []float32
	I64   []int64
}

// ReadTensors reads base.bin (little-endian arrays, back to back) as described by
// base.txt, one "name dtype numel dims..." line per array, dtype f32 or i64.
func ReadTensors(base string) ([]Tensor, error) {
	man, err := os.Open(base + ".txt")
	if err != nil {
		return nil, err
	}
	defer man.Close()
	bin, err := os.Open(base + ".bin")
	if err != nil {
		return nil, err
	}
	defer bin.Close()
	r := bufio.NewReaderSize(bin, 1<<20)
	var out []Tensor
	sc := bufio.NewScanner(man)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("%s.txt: %q: %w", base, sc.Text(), err)
		}
		t := Tensor{Name: f[0]}
		for _, d := range f[3:] {
			v, err := strconv.ParseInt(d, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s.txt: %q: %w", base, sc.Text(), err)
			}
			t.Shape = append(t.Shape, v)
		}
		switch f[1] {
		case "f32":
			t.F32 = make([]float32, n)
			err = binary.Read(r, binary.LittleEndian, t.F32)
		case "i64":
			t.I64 = make([]int64, n)
			err = binary.Read(r, binary.LittleEndian, t.I64)
		default:
			err = fmt.Errorf("dtype %q", f[1])
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", base, t.Name, err)
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

// RSSMB returns a /proc/self/status field in MiB ("VmRSS:" now, "VmHWM:" the peak).
func RSSMB(key string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return math.NaN()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / 1024
			}
		}
	}
	return math.NaN()
}

// LoadAvg returns the load averages of the last 1, 5 and 15 minutes, as /proc/loadavg
// writes them ("0.52 0.58 0.59"), or "?" where it cannot be read.
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
