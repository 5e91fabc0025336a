// Command fsdp prints, for N = 1, 2 and 4 Gloo ranks on the CPU, what each rank holds
// between two steps of training a small Llama-shaped decoder (float32, AdamW) under
// data parallelism (trainer.DataParallel), sharded data parallelism
// (trainer.FullyShardedDataParallel, ZeRO-2) and sharded with ReshardAfterForward
// (ZeRO-3): the bytes of parameters, gradients and optimizer state, everything CPU tensors
// hold, the peak of a step, and the step time against DDP at the same N: the table of
// docs/performance.md for issue 44.
//
//	eval "$(make -s print-env)"
//	go run -tags cpu ./bench/fsdp
//
// The program starts itself once per rank (processes, one thread each, on 127.0.0.1),
// as the launcher does. Memory is counted by the counting CPU allocator
// (torch.CountCPUMemory, installed in each rank before the model is built): "held" is
// what CPU tensors hold at the end of a step (after the optimizer step), "peak" the most
// they held from the end of one step to the end of the next. Parameters count the
// model's allocated parameters plus, when sharded, the optimizer's shards; gradients
// those of both; optimizer state AdamW's moments and step counts. The global batch is
// the same at every N (split across the ranks), so the work per step is too.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/bench/internal/lmbench"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

const childEnv = "GOTRAIN_BENCH_FSDP_CHILD"

type options struct {
	lmbench.Shape
	Seq, Batch, Steps int64
}

// result is one rank's figures.
type result struct {
	Rank                 int
	Params, Grads, Optim int64 // bytes held between steps
	Held, Peak           int64 // counting allocator: at a step's end, and the step's peak
	StepSeconds          float64
	NumParams            int64
}

var strategies = []string{"ddp", "fsdp", "fsdp-reshard"}

func main() {
	o := options{Shape: lmbench.Shape{Vocab: 1024, Hidden: 256, Intermediate: 704, Layers: 6, Heads: 8, KVHeads: 4}}
	o.Shape.Flags(flag.CommandLine)
	flag.Int64Var(&o.Seq, "seq", 32, "tokens per sequence")
	flag.Int64Var(&o.Batch, "batch", 8, "global batch (sequences per step, split across the ranks)")
	flag.Int64Var(&o.Steps, "steps", 6, "optimizer steps (the first two are not timed)")
	worlds := flag.String("ranks", "1,2,4", "world sizes")
	flag.Parse()
	if name := os.Getenv(childEnv); name != "" {
		r, err := rank(name, o)
		if err != nil {
			fmt.Fprintf(os.Stderr, "rank %s: %v\n", os.Getenv("RANK"), err)
			os.Exit(1)
		}
		if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
			log.Fatal(err)
		}
		return
	}
	var ns []int
	for _, s := range strings.Split(*worlds, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || o.Batch%int64(n) != 0 {
			log.Fatalf("-ranks: %q is not a world size that divides the batch %d", s, o.Batch)
		}
		ns = append(ns, n)
	}
	fmt.Printf("Llama-shaped decoder: %d layers, hidden %d, intermediate %d, vocabulary %d; global batch %d × %d tokens; AdamW, float32; %d steps\n\n",
		o.Layers, o.Hidden, o.Intermediate, o.Vocab, o.Batch, o.Seq, o.Steps)
	fmt.Println("| N | strategy | parameters, MiB | gradients, MiB | optimizer state, MiB | sum, MiB | sum × N / DDP's | held, MiB | peak of a step, MiB | step, ms | vs DDP |")
	fmt.Println("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, n := range ns {
		var ddp result
		for _, s := range strategies {
			rs, err := launch(s, n, o)
			if err != nil {
				log.Fatalf("%s on %d ranks: %v", s, n, err)
			}
			// The rank with the most held: ranks differ only by shard padding.
			r := slices.MaxFunc(rs, func(a, b result) int { return int(a.Held - b.Held) })
			if s == "ddp" {
				ddp = r
			}
			sum := r.Params + r.Grads + r.Optim
			dsum := ddp.Params + ddp.Grads + ddp.Optim
			fmt.Printf("| %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.2f× |\n", n, s, mib(r.Params), mib(r.Grads), mib(r.Optim),
				mib(sum), float64(sum)*float64(n)/float64(dsum), mib(r.Held), mib(r.Peak), 1e3*r.StepSeconds, r.StepSeconds/ddp.StepSeconds)
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// launch runs strategy s on n ranks, one process each, and returns their results.
func launch(s string, n int, o options) ([]result, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	errs := make([]*bytes.Buffer, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), childEnv+"="+s, fmt.Sprint("RANK=", r), fmt.Sprint("WORLD_SIZE=", n),
			fmt.Sprint("LOCAL_RANK=", r), fmt.Sprint("LOCAL_WORLD_SIZE=", n), "MASTER_ADDR=127.0.0.1",
			fmt.Sprint("MASTER_PORT=", port), "OMP_NUM_THREADS=1")
		outs[r], errs[r] = &bytes.Buffer{}, &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], errs[r]
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds[r] = cmd
	}
	var res []result
	var failed []string
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			failed = append(failed, fmt.Sprintf("rank %d: %v\n%s", r, err, errs[r]))
			continue
		}
		var x result
		if err := json.Unmarshal(outs[r].Bytes(), &x); err != nil {
			return nil, fmt.Errorf("rank %d: %v: %q", r, err, outs[r])
		}
		res = append(res, x)
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(failed, "\n"))
	}
	return res, nil
}

// rank trains as one rank of strategy s and measures.
func rank(s string, o options) (res result, err error) {
	torch.CountCPUMemory()
	torch.SetNumThreads(1)
	do, err := distributed.EnvOptions()
	if err != nil {
		return res, err
	}
	do.Timeout = 5 * time.Minute
	pg, err := distributed.Init(do)
	if err != nil {
		return res, err
	}
	defer pg.Close()
	w, r := int64(pg.WorldSize()), pg.Rank()
	res.Rank = r

	n := o.Batch * o.Steps
	ids := make([]float32, n*o.Seq)
	for i := range ids {
		ids[i] = float32((i*37 + i/int(o.Seq)*11) % o.Vocab)
	}
	ds, err := data.NewTensorDataset(ids, []int64{o.Seq}, nil, ids, []int64{o.Seq})
	if err != nil {
		return res, err
	}
	tr, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: int(o.Batch / w), Rank: r, WorldSize: int(w)})
	if err != nil {
		return res, err
	}
	c := o.Llama(int(o.Seq))
	torch.ManualSeed(1)
	m, err := models.NewLlamaForCausalLM(c)
	if err != nil {
		return res, err
	}
	defer nn.Free(m)
	for _, p := range nn.Parameters(m) {
		res.NumParams += p.Numel()
	}
	opt, err := optim.NewAdamW(nn.TrainableParameters(m), optim.AdamOptions{LR: 1e-3, Betas: [2]float64{0.9, 0.999}, Eps: 1e-8, WeightDecay: 0.01})
	if err != nil {
		return res, err
	}
	step := func(m *models.LlamaForCausalLM, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		ids := b.Get(data.Input).ToDType(torch.Int64)
		return models.CausalLMLoss(m.Forward(models.DecoderInput{InputIDs: ids}), ids), nil
	}
	var fs *trainer.FullyShardedDataParallel
	strategy := trainer.WithDistributed(pg)
	if s != "ddp" {
		fs = &trainer.FullyShardedDataParallel{Group: pg, ReshardAfterForward: s == "fsdp-reshard"}
		strategy = trainer.WithStrategy(fs)
	}
	var times []float64
	last := time.Now()
	probe := trainer.On(func(_ trainer.Event, t *trainer.Trainer) error {
		now := time.Now()
		if t.GlobalStep > 2 {
			times = append(times, now.Sub(last).Seconds())
			res.Peak = max(res.Peak, torch.CPUMemoryStats().PeakAllocated)
		}
		if t.GlobalStep == 2 { // optimizer state exists
			res.Params, res.Grads, res.Optim = held(m, t.Optimizer, fs != nil)
			res.Held = torch.CPUMemoryStats().Allocated
		}
		torch.ResetCPUPeakMemory()
		last = time.Now()
		return nil
	}, trainer.BatchEnd)
	tt, err := trainer.New(m, tr, nil, nil, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard), trainer.WithEpochs(1),
		trainer.WithSeed(1), trainer.WithTrainStep(step), trainer.WithMonitor("train_loss", trainer.Min), strategy,
		trainer.WithCallbacks(probe))
	if err != nil {
		return res, err
	}
	if err := tt.Run(context.Background()); err != nil {
		return res, err
	}
	if len(times) == 0 {
		return res, fmt.Errorf("-steps %d: no timed step", o.Steps)
	}
	sort.Float64s(times)
	res.StepSeconds = times[len(times)/2]
	return res, nil
}

// held returns the bytes of parameters, gradients and optimizer state allocated now:
// the model's parameters (none for a freed, resharded one) and, when sharded, the
// optimizer's shards, their gradients, and the optimizer's state.
func held(m nn.Module, opt optim.Optimizer, sharded bool) (params, grads, state int64) {
	bytes := func(t *torch.Tensor) int64 {
		if t == nil || torch.StorageBytes(t) == 0 {
			return 0
		}
		return t.Numel() * int64(t.DType().Size())
	}
	torch.WithScope(func() {
		ts := nn.Parameters(m)
		if sharded {
			ts = append(ts, opt.Params()...)
		}
		for _, p := range ts {
			params += bytes(p)
			grads += bytes(p.Grad())
		}
		st := opt.(interface {
			State(int) map[string]*torch.Tensor
		})
		for i := range opt.Params() {
			for _, v := range st.State(i) {
				state += bytes(v)
			}
		}
	})
	return params, grads, state
}
