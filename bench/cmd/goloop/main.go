// Command goloop is the gotrain side of the training-loop benchmark: gotrain's
// trainer.Trainer on the same model, initial weights, data and thread count as
// bench/python/seed_loop.py and bench/cpp/loop.cpp.
//
//	goloop -prep DIR -workload W -steps N -seed S   writes DIR/{data,init}.{bin,txt}
//	goloop -dir DIR -workload W -threads N -warmup W -reps R -seed S [-cpuprofile F]
//
// With GOLOOP_MEMPROFILE=F it writes every allocation of the timed epochs to F.
//
// One epoch is one pass over the in-memory dataset (steps × batch samples) through a
// data.Loader over a data.TensorDataset; the first -warmup epochs are not timed. The
// output is one JSON object on stdout (fields in bench/README.md).
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/bench/internal/loopio"
	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

func main() {
	baseRSS := loopio.RSSMB("VmRSS:") // libtorch is loaded before main runs
	prep := flag.String("prep", "", "write the dataset and initial weights to this directory and exit")
	dir := flag.String("dir", "", "directory written by -prep")
	workload := flag.String("workload", "mlp", "mlp | mlp256 | cnn | cnn-bf16")
	steps := flag.Int("steps", 200, "steps per epoch (with -prep)")
	threads := flag.Int("threads", 1, "libtorch intra-op threads")
	warmup := flag.Int("warmup", 1, "untimed warm-up epochs")
	reps := flag.Int("reps", 5, "timed epochs")
	check := flag.Int("check", 50, "losses of the first epoch's first N steps to report")
	seed := flag.Int64("seed", 1, "seed")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the timed epochs")
	device := flag.String("device", "cpu", "device for the Trainer run: cpu, cuda, cuda:N (scripts/gpu/run.sh)")
	fused := flag.Bool("fused", true, "fused Adam (optim.AdamOptions.Fused, cmd/train's default); false: the multi-tensor (_foreach_*) arithmetic of Python's Adam(foreach=True)")
	raw := flag.Bool("raw", false, "the loop written directly against package torch, narrowing each batch out of the in-memory tensors, without Trainer and Loader")
	flag.BoolVar(&own, "own-layers", false, "the model's Linear, ReLU and Flatten stages replaced by layers written in this file, as a user writes a layer of their own")
	flag.BoolVar(&fuseStep, "fusedstep", true, "let the Trainer run its step as one call into libtorch (trainer.WithOneCallStep); false: call by call")
	flag.IntVar(&stepsPerCall, "steps-per-call", trainer.DefaultStepsPerCall, "the most fused steps the Trainer runs per call into libtorch (trainer.WithStepsPerCall); 1: one step per call")
	pair := flag.Int("pair", 0, "1: take turns with another loop, waiting for a line on stdin before each epoch and printing \"epoch N\" after it (paired epochs, bench/README.md)")
	flag.Parse()
	if *pair == 1 {
		pairTurns = bufio.NewReader(os.Stdin)
	}
	log.SetFlags(0)
	log.SetPrefix("goloop: ")
	// One OS thread for all libtorch calls, as Trainer.Run does for its duration: glibc
	// gives each thread its own malloc arena, and a loop that wandered between threads
	// would grow RSS by an arena per thread.
	runtime.LockOSThread()
	w, err := loopio.Lookup(*workload)
	if err != nil {
		log.Fatal(err)
	}
	if *prep != "" {
		if err := prepare(*prep, w, *steps, *seed); err != nil {
			log.Fatal(err)
		}
		return
	}
	res, err := run(*dir, w, *threads, *warmup, *reps, *check, *seed, *cpuprofile, *raw, *fused, *device)
	if err != nil {
		log.Fatal(err)
	}
	res.BaseRSSMB = baseRSS
	json.NewEncoder(os.Stdout).Encode(res)
}

// own is -own-layers.
var own bool

func newModel(w loopio.Workload) *nn.Sequential {
	var m *nn.Sequential
	if w.Hidden > 0 {
		m = models.MLP(784, w.Hidden, 10)
	} else {
		m = models.SmallCNN(10)
	}
	if own {
		return ownLayers(m)
	}
	return m
}

// ownLayers is -own-layers: m with its Linear, ReLU and Flatten stages replaced by the
// types below, written as a user writes a layer of their own (nn.Base, registered
// parameters, a Forward over package torch), which gotrain knows nothing of: the
// Trainer's replayed step is then derived from eager code outside gotrain. The names and
// shapes are the built-ins', so the same initial weights load, and the ATen calls are
// the same, so the losses equal the C++ twin's to the bit.
func ownLayers(m *nn.Sequential) *nn.Sequential {
	out := nn.NewSequential()
	for i := range m.Len() {
		switch l := m.At(i).(type) {
		case *nn.Linear:
			d := &dense{}
			torch.WithScope(func() {
				d.w = d.RegisterParameter("weight", torch.Zeros(l.Weight.Shape(), torch.Float32, torch.CPU))
				d.b = d.RegisterParameter("bias", torch.Zeros(l.Bias.Shape(), torch.Float32, torch.CPU))
			})
			out.Append(d)
			nn.Free(l)
		case *nn.ReLU:
			out.Append(&relu{})
		case *nn.Flatten:
			out.Append(&flatten{})
		default:
			out.Append(l)
		}
	}
	return out
}

type dense struct {
	nn.Base
	w, b *torch.Tensor
}

func (d *dense) Forward(x *torch.Tensor) *torch.Tensor { return torch.Linear(x, d.w, d.b) }

type relu struct{ nn.Base }

func (relu) Forward(x *torch.Tensor) *torch.Tensor { return x.ReLU() }

type flatten struct{ nn.Base }

func (flatten) Forward(x *torch.Tensor) *torch.Tensor { return x.Flatten(1, -1) }

// prepare draws the dataset (standard normal inputs, uniform labels) and the model's
// initial weights from libtorch's generator seeded with seed, and writes them as raw
// little-endian arrays with a text manifest that all three implementations read.
func prepare(dir string, w loopio.Workload, steps int, seed int64) (err error) {
	defer torch.Recover(&err, "prepare")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	scope := torch.NewScope()
	defer scope.Close()
	torch.ManualSeed(seed)
	n := int64(steps * w.Batch)
	x := torch.Randn([]int64{n, 1, 28, 28}, torch.Float32, torch.CPU)
	y := torch.Randint(0, 10, []int64{n}, torch.Int64, torch.CPU)
	if err := writeTensors(filepath.Join(dir, "data"), []string{"x", "y"}, []*torch.Tensor{x, y}); err != nil {
		return err
	}
	m := newModel(w)
	sd := nn.StateDict(m)
	var names []string
	var ts []*torch.Tensor
	for k, v := range sd.All() {
		names = append(names, k.(string))
		ts = append(ts, v.(*torch.Tensor))
	}
	return writeTensors(filepath.Join(dir, "init"), names, ts)
}

func writeTensors(base string, names []string, ts []*torch.Tensor) error {
	var man strings.Builder
	bin, err := os.Create(base + ".bin")
	if err != nil {
		return err
	}
	defer bin.Close()
	for i, t := range ts {
		dt := "f32"
		var raw any
		switch t.DType() {
		case torch.Float32:
			raw = t.Float32s()
		case torch.Int64:
			dt, raw = "i64", t.Int64s()
		default:
			return fmt.Errorf("%s: dtype %v", names[i], t.DType())
		}
		if err := binary.Write(bin, binary.LittleEndian, raw); err != nil {
			return err
		}
		fmt.Fprintf(&man, "%s %s %d", names[i], dt, t.Numel())
		for _, d := range t.Shape() {
			fmt.Fprintf(&man, " %d", d)
		}
		man.WriteString("\n")
	}
	if err := os.WriteFile(base+".txt", []byte(man.String()), 0o644); err != nil {
		return err
	}
	return bin.Close()
}

// pairTurns is stdin with -pair: each epoch waits for a line on it.
var pairTurns *bufio.Reader

// fuseStep is -fusedstep, stepsPerCall -steps-per-call.
var (
	fuseStep     = true
	stepsPerCall = trainer.DefaultStepsPerCall
)

func run(dir string, w loopio.Workload, threads, warmup, reps, check int, seed int64, cpuprofile string, raw, fused bool, device string) (*loopio.Result, error) {
	dev, err := torch.ParseDevice(device)
	if err != nil {
		return nil, err
	}
	d, err := loopio.ReadTensors(filepath.Join(dir, "data"))
	if err != nil {
		return nil, err
	}
	ds, err := data.NewTensorDataset(d[0].F32, []int64{1, 28, 28}, d[1].I64, nil, nil)
	if err != nil {
		return nil, err
	}
	loader, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: w.Batch, Resident: true, Device: dev})
	if err != nil {
		return nil, err
	}
	m := newModel(w)
	init, err := loopio.ReadTensors(filepath.Join(dir, "init"))
	if err != nil {
		return nil, err
	}
	if err := loadInit(m, init); err != nil {
		return nil, err
	}
	opt, err := optim.NewAdam(nn.Parameters(m), optim.AdamOptions{LR: 1e-3, Fused: fused})
	if err != nil {
		return nil, err
	}
	ce := &nn.CrossEntropyLoss{}
	adam := map[bool]string{true: "fused", false: "foreach"}[fused]
	impl := "go"
	if own {
		impl = "go-own"
	}
	res := &loopio.Result{Impl: impl, Adam: adam, Torch: torch.Version(), Workload: w.Name, Steps: loader.Len(), Batch: w.Batch, Warmup: warmup, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	record := &lossRecorder{res: res, check: check}
	precision := amp.Off
	if w.BF16 {
		precision = amp.BF16
	}
	tr, err := trainer.New(m, loader, nil, ce, opt,
		trainer.WithOutput(io.Discard), trainer.WithDevice(device), trainer.WithSeed(seed),
		trainer.WithAMP(precision), trainer.WithCallbacks(record), trainer.WithOneCallStep(fuseStep), trainer.WithStepsPerCall(stepsPerCall),
		trainer.WithThreads(threads))
	if err != nil {
		return nil, err
	}
	res.Threads = torch.NumThreads()
	ctx := context.Background()
	epoch := func(e int) error { return tr.RunTo(ctx, e) }
	if raw {
		res.Impl = "go-raw"
		epoch = rawLoop(tr, ds, w.Batch, res, check)
	}
	var cgo0 int64
	var ms0 runtime.MemStats
	for e := 1; e <= warmup+reps; e++ {
		if e == warmup+1 && os.Getenv("GOLOOP_MEMPROFILE") != "" {
			// Every allocation of the timed epochs, for `go tool pprof -sample_index=alloc_objects`.
			runtime.MemProfileRate = 1
			defer func() {
				runtime.GC() // the profile shows allocations as of the last collection
				f, err := os.Create(os.Getenv("GOLOOP_MEMPROFILE"))
				if err == nil {
					_ = pprof.Lookup("allocs").WriteTo(f, 0)
					f.Close()
				}
			}()
		}
		if e == warmup+1 && cpuprofile != "" {
			f, err := os.Create(cpuprofile)
			if err != nil {
				return nil, err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				return nil, err
			}
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
		if e == warmup+1 {
			cgo0 = runtime.NumCgoCall()
			runtime.ReadMemStats(&ms0)
		}
		if pairTurns != nil {
			if _, err := pairTurns.ReadString('\n'); err != nil {
				return nil, fmt.Errorf("-pair: stdin closed before epoch %d", e)
			}
		}
		t0 := time.Now()
		if err := epoch(e); err != nil {
			return nil, err
		}
		res.EpochS = append(res.EpochS, time.Since(t0).Seconds())
		res.RSSMB = append(res.RSSMB, loopio.RSSMB("VmRSS:"))
		if pairTurns != nil {
			fmt.Printf("epoch %d\n", e)
		}
	}
	if reps > 0 {
		res.CgoCallsPerStep = float64(runtime.NumCgoCall()-cgo0) / float64(reps*res.Steps)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		res.GoAllocBytesPerStep = float64(ms.TotalAlloc-ms0.TotalAlloc) / float64(reps*res.Steps)
		res.GoAllocsPerStep = float64(ms.Mallocs-ms0.Mallocs) / float64(reps*res.Steps)
	}
	res.FusedStep = !raw && tr.OneCallStep()
	if !raw {
		res.StepsPerCall = tr.StepsPerCall()
	}
	res.LoaderS = loaderEpoch(loader)
	res.PeakRSSMB = loopio.RSSMB("VmHWM:")
	res.LiveTensors = torch.LiveTensors()
	return res, nil
}

// lossRecorder keeps the first epoch's first check losses, which the driver compares
// with the C++ loop's. It listens at BatchEnd during that epoch alone (a
// trainer.Subscriber's events are asked at every event and epoch), so that epoch runs
// one step per call and the later, timed ones in runs of steps (trainer.WithStepsPerCall);
// the trainer's tests show that both give the same bits.
type lossRecorder struct {
	res   *loopio.Result
	check int
	done  bool
}

func (r *lossRecorder) Events() trainer.EventSet {
	if r.done {
		return 0
	}
	return trainer.Events(trainer.BatchEnd, trainer.EpochEnd)
}

func (r *lossRecorder) OnEvent(e trainer.Event, t *trainer.Trainer) error {
	switch {
	case e == trainer.EpochEnd:
		r.done = true
	case t.Epoch == 0 && len(r.res.Losses) < r.check:
		r.res.Losses = append(r.res.Losses, t.StepLoss.Item())
	}
	return nil
}

// loaderEpoch times one epoch of the loader alone, each batch's tensors freed as the
// trainer's step scope frees them: the share of gotrain's step that is data loading.
func loaderEpoch(l *data.Loader) float64 {
	t0 := time.Now()
	it := l.Iter(context.Background(), 0, 0)
	defer it.Close()
	for {
		s := torch.NewScope()
		_, ok := it.Next()
		s.Close()
		if !ok {
			break
		}
	}
	return time.Since(t0).Seconds()
}

func loadInit(m nn.Module, init []loopio.Tensor) (err error) {
	defer torch.Recover(&err, "loading the initial weights")
	s := torch.NewScope()
	defer s.Close()
	sd := checkpoint.NewOrderedDict()
	for _, t := range init {
		var v *torch.Tensor
		if t.F32 != nil {
			v = torch.FromSlice(t.F32)
		} else {
			v = torch.FromSlice(t.I64)
		}
		sd.Set(t.Name, v.Reshape(t.Shape...)) // Reshape() is a 0-d tensor (num_batches_tracked)
	}
	return nn.LoadStateDict(m, sd, true)
}

// rawLoop returns an epoch of the seed's loop written directly against package torch,
// with the Trainer's model, optimizer and seeding but over batches sliced from one
// tensor: gotrain's binding without the Trainer's and the Loader's costs.
func rawLoop(tr *trainer.Trainer, ds *data.TensorDataset, batch int, res *loopio.Result, check int) func(int) error {
	x := torch.FromSlice(ds.Inputs, int64(ds.Len()), 1, 28, 28).Escape()
	y := torch.FromSlice(ds.Labels).Escape()
	steps := int64(ds.Len() / batch)
	bf16 := tr.Config().AMP == amp.BF16
	model := tr.Model.(nn.Layer) // the bench's models are Sequentials
	return func(e int) (err error) {
		defer torch.Recover(&err, "raw loop")
		nn.SetTraining(tr.Model, true)
		for s := range steps {
			torch.WithScope(func() {
				xb := x.Narrow(0, s*int64(batch), int64(batch))
				yb := y.Narrow(0, s*int64(batch), int64(batch))
				tr.Optimizer.ZeroGrad(true)
				var loss *torch.Tensor
				fwd := func() { loss = (&nn.CrossEntropyLoss{}).Forward(model.Forward(xb), yb) }
				if bf16 {
					amp.Autocast(torch.CPU, torch.BFloat16, fwd)
				} else {
					fwd()
				}
				loss.Backward()
				if err = tr.Optimizer.Step(); err != nil {
					return
				}
				l := loss.Item()
				if e == 1 && len(res.Losses) < check {
					res.Losses = append(res.Losses, l)
				}
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
}
