package trainer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

const seed = 5

func loaders(t *testing.T, n int) (*data.Loader, *data.Loader) { return noisyLoaders(t, n, 1) }

// noisyLoaders splits one synthetic data set; a larger noise makes it harder to learn.
func noisyLoaders(t *testing.T, n int, noise float32) (*data.Loader, *data.Loader) {
	all, err := data.Synthetic(n+n/4, 10, []int64{1, 28, 28}, seed)
	require.NoError(t, err)
	all.Noise = noise
	parts, err := data.RandomSplit(all, []int{n, all.Len() - n}, seed)
	require.NoError(t, err)
	tr, err := data.NewLoader(parts[0], data.LoaderOptions{BatchSize: 64, Shuffle: true, Workers: 2, Seed: seed})
	require.NoError(t, err)
	va, err := data.NewLoader(parts[1], data.LoaderOptions{BatchSize: 128, Workers: 2})
	require.NoError(t, err)
	return tr, va
}

// newCNN builds the default CNN (batch norm, dropout) with Adam and a per-epoch StepLR:
// everything whose state an exact resume must restore.
func newCNN(t *testing.T, runDir string, opts ...trainer.Option) *trainer.Trainer {
	tr, va := loaders(t, 512)
	torch.ManualSeed(seed)
	m := models.SmallCNN(10)
	opt, err := optim.NewAdam(nn.Parameters(m), optim.AdamOptions{LR: 2e-3})
	require.NoError(t, err)
	sched, err := optim.NewStepLR(opt, 1, 0.5)
	require.NoError(t, err)
	all := append([]trainer.Option{trainer.WithEpochs(3), trainer.WithSeed(seed), trainer.WithDeterministic(true),
		trainer.WithDevice("cpu"), trainer.WithRunDir(runDir), trainer.WithOutput(io.Discard),
		trainer.WithScheduler(sched, trainer.PerEpoch)}, opts...)
	tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, all...)
	require.NoError(t, err)
	return tt
}

// flat turns a state tree into comparable Go values: tensors become their dtype, shape and
// raw float64 bit patterns, so equality is bitwise.
func flat(t *testing.T, v any) any {
	switch x := v.(type) {
	case *torch.Tensor:
		vals := x.Float64s()
		bits := make([]uint64, len(vals))
		for i, f := range vals {
			bits[i] = math.Float64bits(f)
		}
		return map[string]any{"dtype": x.DType().String(), "shape": x.Shape(), "bits": bits}
	case *checkpoint.Dict:
		out := map[string]any{}
		for k, e := range x.All() {
			kb, _ := json.Marshal(k)
			out[string(kb)] = flat(t, e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = flat(t, e)
		}
		return out
	case checkpoint.Tuple:
		return flat(t, []any(x))
	}
	return v
}

type snapshot struct{ model, optimizer, scheduler any }

func snap(t *testing.T, tt *trainer.Trainer) snapshot {
	var s snapshot
	torch.WithScope(func() {
		s = snapshot{flat(t, nn.StateDict(tt.Model)), flat(t, tt.Optimizer.StateDict()), flat(t, tt.Scheduler.StateDict())}
	})
	return s
}

// TestExactResume stops a run at an epoch boundary and in the middle of an epoch, resumes
// it from last.pt, and compares the result with an uninterrupted run bit for bit. The
// uninterrupted run takes the one-call step (no callback stops it at every event); the
// interrupted runs take it or not, as their stopper asks: so this also shows that the
// fused step and the step made call by call train the same bits, across resumes.
func TestExactResume(t *testing.T) {
	ref := newCNN(t, t.TempDir())
	require.NoError(t, ref.Run(context.Background()))
	require.True(t, ref.OneCallStep(), "the CNN's default step runs fused")
	want := snap(t, ref)
	require.Len(t, ref.History, 3)

	cases := []struct {
		name string
		stop func(e trainer.Event, tt *trainer.Trainer) bool
		at   int // BatchInEpoch in the checkpoint
	}{
		{"epoch boundary", func(e trainer.Event, tt *trainer.Trainer) bool { return e == trainer.EpochEnd && tt.Epoch == 1 }, 0},
		{"mid-epoch", func(e trainer.Event, tt *trainer.Trainer) bool {
			return e == trainer.BatchEnd && tt.Epoch == 1 && tt.BatchInEpoch == 3
		}, 3},
	}
	for _, c := range cases {
		for _, fused := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fused=%v", c.name, fused), func(t *testing.T) {
				dir := t.TempDir()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				stop := func(e trainer.Event, tt *trainer.Trainer) error {
					if c.stop(e, tt) {
						cancel()
					}
					return nil
				}
				// A CallbackFunc is called at every event, so the Trainer steps call by call;
				// one made with On names its events and lets it fuse.
				var stopper trainer.Callback = trainer.CallbackFunc(stop)
				if fused {
					stopper = trainer.On(stop, trainer.BatchEnd, trainer.EpochEnd)
				}
				first := newCNN(t, dir, trainer.WithCallbacks(stopper))
				err := first.Run(ctx)
				assert.Equal(t, fused, first.OneCallStep())
				var ie *trainer.InterruptedError
				require.True(t, errors.As(err, &ie), "got %v", err)
				require.True(t, errors.Is(err, context.Canceled))
				assert.Contains(t, err.Error(), ie.Checkpoint, "the error names the checkpoint to resume from")

				resumed := newCNN(t, dir)
				require.NoError(t, resumed.LoadCheckpoint(ie.Checkpoint))
				assert.Equal(t, 1, resumed.Epoch)
				assert.Equal(t, c.at, resumed.BatchInEpoch)
				require.NoError(t, resumed.Run(context.Background()))
				got := snap(t, resumed)
				assert.Equal(t, want.model, got.model, "model state")
				assert.Equal(t, want.optimizer, got.optimizer, "optimizer state")
				assert.Equal(t, want.scheduler, got.scheduler, "scheduler state")
				assert.Equal(t, ref.GlobalStep, resumed.GlobalStep)
				require.Len(t, resumed.History, 3)
				assert.Equal(t, ref.History[2].TrainLoss, resumed.History[2].TrainLoss)
				assert.Equal(t, ref.History[1].TrainLoss, resumed.History[1].TrainLoss, "the resumed epoch reports the same average")
			})
		}
	}
}

func TestRunDirectoryAndTensorBoard(t *testing.T) {
	dir := t.TempDir()
	tt := newCNN(t, dir, trainer.WithEpochs(2), trainer.WithSeed(seed), trainer.WithDevice("cpu"), trainer.WithTopK(1))
	require.NoError(t, tt.Run(context.Background()))

	for _, f := range []string{"config.json", "history.jsonl", "curves.png", "checkpoints/last.pt", "checkpoints/best_model.pth"} {
		_, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
	}
	// config.json records what the Trainer was given: its config, the model, the
	// optimizer with its param_groups and the scheduler; and so does every checkpoint.
	var rec struct {
		Epochs    int    `json:"epochs"`
		Model     string `json:"model"`
		Optimizer struct {
			Class       string           `json:"class"`
			ParamGroups []map[string]any `json:"param_groups"`
		} `json:"optimizer"`
		Scheduler string `json:"scheduler"`
		LR        *float64
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &rec))
	assert.Equal(t, 2, rec.Epochs)
	assert.Equal(t, "nn.Sequential", rec.Model)
	assert.Equal(t, "Adam", rec.Optimizer.Class)
	require.Len(t, rec.Optimizer.ParamGroups, 1)
	assert.Equal(t, 2e-3, rec.Optimizer.ParamGroups[0]["initial_lr"])
	assert.Equal(t, "StepLR", rec.Scheduler)
	assert.NotContains(t, string(raw), `"lr": 0.001`, "no learning rate the Trainer was not given")
	v, err := checkpoint.Read(filepath.Join(dir, "checkpoints", "last.pt"))
	require.NoError(t, err)
	saved, err := checkpoint.GetString(v, "config")
	require.NoError(t, err)
	assert.Contains(t, saved, `"scheduler":"StepLR"`)
	assert.Contains(t, saved, `"class":"Adam"`)

	pf, err := os.Open(filepath.Join(dir, "curves.png"))
	require.NoError(t, err)
	img, err := png.Decode(pf)
	pf.Close()
	require.NoError(t, err, "curves.png is a valid PNG")
	assert.Greater(t, img.Bounds().Dx(), 100)
	topk, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "epoch=*"))
	assert.Len(t, topk, 1, "top-1 keeps one epoch file")

	events, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	require.Len(t, events, 1)
	out := testpy.Run(t, `
import sys, json
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
ea.Reload()
out = {tag: [[e.step, e.value] for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}
out["_text"] = ea.Tags()["tensors"]
print(json.dumps(out))
`, []string{"tensorboard"}, events[0])
	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	for tag, field := range map[string]func(r trainer.Record) float64{
		"train/loss": func(r trainer.Record) float64 { return r.TrainLoss },
		"val/loss":   func(r trainer.Record) float64 { return r.ValLoss },
		"val/acc":    func(r trainer.Record) float64 { return r.ValAcc },
		"lr":         func(r trainer.Record) float64 { return r.LR },
		"throughput": func(r trainer.Record) float64 { return r.SamplesPerSec },
		"loss_scale": func(r trainer.Record) float64 { return r.LossScale },
	} {
		series, ok := got[tag].([]any)
		require.True(t, ok, "tag %s in %v", tag, got)
		require.Len(t, series, 2, tag)
		for i, p := range series {
			pair := p.([]any)
			assert.Equal(t, float64(i+1), pair[0], "%s step", tag)
			assert.InDelta(t, field(tt.History[i]), pair[1], 1e-6*math.Max(1, math.Abs(field(tt.History[i]))), "%s value", tag)
		}
	}
	assert.Contains(t, got["_text"], "config", "the run config is logged as text")
}

// seedTrainer is the seed's Python GPUTrainer (its loop, save_checkpoint and
// load_checkpoint, unchanged in substance), made runnable on the CPU with tensors as data.
const seedTrainer = `
import sys, time, torch, torch.nn as nn
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import models

class GPUTrainer:
    def __init__(self, model, train_loader, val_loader, criterion, optimizer, device=None,
                 epochs=10, use_amp=False, grad_clip=None, save_dir="checkpoints", scheduler=None, callbacks=None):
        self.model, self.train_loader, self.val_loader = model, train_loader, val_loader
        self.criterion, self.optimizer, self.scheduler = criterion, optimizer, scheduler
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.epochs, self.use_amp, self.grad_clip = epochs, use_amp, grad_clip
        self.callbacks = callbacks or []
        self.current_epoch, self.best_metric, self.history = 0, float("-inf"), []
        self.save_dir = Path(save_dir); self.save_dir.mkdir(parents=True, exist_ok=True)
        self.model = self.model.to(self.device)

    def _train_epoch(self):
        self.model.train(); total = 0; n = 0
        for data, target in self.train_loader:
            data, target = data.to(self.device), target.to(self.device)
            self.optimizer.zero_grad()
            loss = self.criterion(self.model(data), target)
            loss.backward()
            if self.grad_clip is not None:
                nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.optimizer.step()
            total += loss.item(); n += 1
        if self.scheduler is not None:
            self.scheduler.step()
        return total / n

    def _validate(self):
        self.model.eval(); vl = 0; correct = 0; total = 0
        with torch.no_grad():
            for data, target in self.val_loader:
                out = self.model(data); vl += self.criterion(out, target).item()
                correct += out.argmax(dim=1).eq(target).sum().item(); total += target.size(0)
        return vl / len(self.val_loader), correct / total

    def __call__(self, trained_epochs=None):
        target = trained_epochs or self.epochs
        for epoch in range(self.current_epoch, target):
            self.current_epoch = epoch + 1; start = time.time()
            tl = self._train_epoch(); vl, va = self._validate()
            self.history.append({"epoch": self.current_epoch, "train_loss": tl, "val_loss": vl, "val_acc": va, "elapsed_sec": time.time() - start})
            if va > self.best_metric:
                self.best_metric = va; self.save_checkpoint("best_model.pth")
        return self.best_metric

    def save_checkpoint(self, filename):
        torch.save({
            "model_state_dict": self.model.state_dict(),
            "optimizer_state_dict": self.optimizer.state_dict(),
            "scheduler_state_dict": self.scheduler.state_dict() if self.scheduler else None,
            "epoch": self.current_epoch, "best_metric": self.best_metric, "history": self.history,
            "model_config": self.model.__class__.__name__}, self.save_dir / filename)

    def load_checkpoint(self, path):
        checkpoint = torch.load(path, map_location=self.device)
        self.model.load_state_dict(checkpoint["model_state_dict"])
        self.optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
        if self.scheduler and checkpoint["scheduler_state_dict"]:
            self.scheduler.load_state_dict(checkpoint["scheduler_state_dict"])
        self.current_epoch = checkpoint["epoch"]
        self.best_metric = checkpoint["best_metric"]
        self.history = checkpoint["history"]

torch.manual_seed(0)
x = torch.randn(256, 1, 28, 28); y = torch.randint(0, 10, (256,))
batches = [(x[i:i+64], y[i:i+64]) for i in range(0, 256, 64)]
model = models.mlp(784, 32, 10)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)
tr = GPUTrainer(model, batches, batches, nn.CrossEntropyLoss(), opt, device="cpu", epochs=2, save_dir=sys.argv[3], scheduler=sched)
if sys.argv[2] == "resume":
    tr.load_checkpoint(sys.argv[4])
    before = tr.current_epoch
    tr(before + 1)
    assert tr.current_epoch == before + 1 and len(tr.history) == before + 1, (tr.current_epoch, len(tr.history))
    assert opt.param_groups[0]["lr"] == 1e-3 * 0.5 ** (before + 1), opt.param_groups[0]["lr"]
    print("resumed", before, "->", tr.current_epoch)
else:
    tr(1)
    print("wrote", tr.save_dir / "best_model.pth")
`

func newMLP(t *testing.T, runDir string) *trainer.Trainer {
	tr, va := loaders(t, 256)
	torch.ManualSeed(seed)
	m := models.MLP(784, 32, 10)
	opt, err := optim.NewAdam(nn.Parameters(m), optim.AdamOptions{LR: 1e-3})
	require.NoError(t, err)
	sched, err := optim.NewStepLR(opt, 1, 0.5)
	require.NoError(t, err)
	tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt,
		trainer.WithEpochs(3), trainer.WithDevice("cpu"), trainer.WithRunDir(runDir), trainer.WithOutput(io.Discard),
		trainer.WithScheduler(sched, trainer.PerEpoch))
	require.NoError(t, err)
	return tt
}

func TestSeedPythonTrainerInterop(t *testing.T) {
	modelsDir := filepath.Join(testpy.Root(), "torch", "nn", "models", "testdata")

	// gotrain → the seed's Python trainer: it loads our checkpoint and trains on.
	dir := t.TempDir()
	g := newMLP(t, dir)
	require.NoError(t, g.RunTo(context.Background(), 1))
	out := testpy.Run(t, seedTrainer, []string{"torch"}, modelsDir, "resume", t.TempDir(), filepath.Join(dir, "checkpoints", "last.pt"))
	assert.Contains(t, string(out), "resumed 1 -> 2")

	// The seed's Python trainer → gotrain: resume from its best_model.pth.
	pyDir := t.TempDir()
	testpy.Run(t, seedTrainer, []string{"torch"}, modelsDir, "train", pyDir)
	r := newMLP(t, t.TempDir())
	require.NoError(t, r.LoadCheckpoint(filepath.Join(pyDir, "best_model.pth")))
	assert.Equal(t, 1, r.Epoch)
	require.Len(t, r.History, 1)
	assert.InDelta(t, 1e-3*0.5, r.LR(), 1e-15, "the scheduler's LR came across")
	require.NoError(t, r.Run(context.Background()))
	assert.Equal(t, 3, r.Epoch)
	assert.Len(t, r.History, 3)
}

func TestRunToAndRunForAreTheSeedsCalls(t *testing.T) {
	tt := newMLP(t, "")
	require.NoError(t, tt.RunTo(context.Background(), 1)) // trainer(1)
	assert.Equal(t, 1, tt.Epoch)
	require.NoError(t, tt.RunTo(context.Background(), 1), "already there: trains nothing, no error")
	assert.Equal(t, 1, tt.Epoch)
	require.NoError(t, tt.RunFor(context.Background(), 1))
	assert.Equal(t, 2, tt.Epoch)
	require.NoError(t, tt.Run(context.Background())) // trainer(): to the configured 3
	assert.Equal(t, 3, tt.Epoch)
	assert.Equal(t, int64(3*4), tt.GlobalStep, "global_step counts optimizer steps")
}

func TestNaNLossStopsWithTheStep(t *testing.T) {
	tr, va := loaders(t, 256)
	m := models.MLP(784, 8, 10)
	opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	bad := func(out, target *torch.Tensor) *torch.Tensor {
		l := (&nn.CrossEntropyLoss{}).Forward(out, target)
		return l.MulScalar(math.NaN())
	}
	tt, err := trainer.New(m, tr, va, trainer.LossFunc(bad), opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard))
	require.NoError(t, err)
	err = tt.Run(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "global step 1")
	assert.Contains(t, err.Error(), "TerminateOnNaN")

	// Switched off, the run goes on to its last step and records the NaN.
	tr, va = loaders(t, 256)
	opt, err = optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.1})
	require.NoError(t, err)
	tt, err = trainer.New(m, tr, va, trainer.LossFunc(bad), opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard),
		trainer.WithEpochs(2), trainer.WithTerminateOnNaN(false))
	require.NoError(t, err)
	require.NoError(t, tt.Run(context.Background()))
	assert.Equal(t, int64(2*4), tt.GlobalStep)
	require.Len(t, tt.History, 2)
	assert.True(t, math.IsNaN(tt.History[1].TrainLoss))
}

// TestEvalStep: WithEvalStep's step, not the training step, makes the validation
// metrics, under NoGrad and on the validation batches alone.
func TestEvalStep(t *testing.T) {
	var trainCalls, evalCalls int
	var evalGrad bool
	train := func(m *nn.Sequential, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		trainCalls++
		return (&nn.CrossEntropyLoss{}).Forward(m.Forward(b.Get(data.Input)), b.Get(data.Label)), nil
	}
	eval := func(m *nn.Sequential, b data.Batch) (*torch.Tensor, trainer.Metrics) {
		evalCalls++
		logits := m.Forward(b.Get(data.Input))
		evalGrad = evalGrad || logits.RequiresGrad()
		top1 := logits.Argmax(1, false).Eq(b.Get(data.Label)).ToDType(torch.Float32).Mean()
		return (&nn.CrossEntropyLoss{}).Forward(logits, b.Get(data.Label)), trainer.Metrics{"top1": top1}
	}
	tt := mlpTrainer(t, true, trainer.WithTrainStep(train), trainer.WithEvalStep(eval), trainer.WithOneCallStep(false))
	require.NoError(t, tt.Run(context.Background()))
	assert.Equal(t, 4, trainCalls, "256 samples in batches of 64")
	assert.Equal(t, 1, evalCalls, "64 validation samples in one batch of 128")
	assert.False(t, evalGrad, "the evaluation step runs under NoGrad")
	require.Len(t, tt.History, 1)
	top1, ok := tt.History[0].Metrics["val_top1"]
	assert.True(t, ok, "the evaluation step's metric is recorded")
	assert.InDelta(t, 0.5, top1, 0.5)
	_, ok = tt.History[0].Metrics["train_top1"]
	assert.False(t, ok, "the training step has no top1")

	// A step for another model type is refused when the option is applied.
	_, err := trainer.New(models.MLP(784, 4, 10), nil, nil, &nn.CrossEntropyLoss{}, nil,
		trainer.WithEvalStep(func(m *nn.Linear, b data.Batch) (*torch.Tensor, trainer.Metrics) { return nil, nil }))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the evaluation step takes a *nn.Linear")
}

func TestAccumulationAndClipping(t *testing.T) {
	tr, va := loaders(t, 256)
	torch.ManualSeed(seed)
	m := models.MLP(784, 16, 10)
	opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.05})
	require.NoError(t, err)
	tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, trainer.WithDevice("cpu"), trainer.WithOutput(io.Discard),
		trainer.WithEpochs(1), trainer.WithAccumulation(3), trainer.WithGradClip(0.5))
	require.NoError(t, err)
	require.NoError(t, tt.Run(context.Background()))
	assert.Equal(t, int64(2), tt.GlobalStep, "4 batches with k=3 make 2 optimizer steps (the last one partial)")
	assert.False(t, math.IsNaN(tt.History[0].GradNorm))
}

func TestModelCheckpointTopKAcrossResume(t *testing.T) {
	dir := t.TempDir()
	ckdir := filepath.Join(dir, "checkpoints")
	opts := []trainer.Option{trainer.WithEpochs(4), trainer.WithDevice("cpu"), trainer.WithTopK(2), trainer.WithSeed(seed),
		trainer.WithRunDir(dir), trainer.WithOutput(io.Discard)}
	mk := func() *trainer.Trainer {
		// Noise 6 makes val_acc move up and down, so the top-2 table changes after the resume.
		tr, va := noisyLoaders(t, 256, 6)
		torch.ManualSeed(seed)
		m := models.MLP(784, 16, 10)
		opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.3})
		require.NoError(t, err)
		tt, err := trainer.New(m, tr, va, &nn.CrossEntropyLoss{}, opt, opts...)
		require.NoError(t, err)
		return tt
	}
	first := mk()
	require.NoError(t, first.RunTo(context.Background(), 2))
	// Files the trainer did not write must survive, even ones that look like its own.
	foreign := []string{filepath.Join(ckdir, "notes.txt"), filepath.Join(ckdir, "epoch=999-val_acc=0.0000.pt")}
	for _, f := range foreign {
		require.NoError(t, os.WriteFile(f, []byte("mine"), 0o644))
	}
	second := mk()
	require.NoError(t, second.LoadCheckpoint(filepath.Join(ckdir, "last.pt")))
	require.NoError(t, second.Run(context.Background()))
	require.Len(t, second.History, 4)

	for _, f := range foreign {
		_, err := os.Stat(f)
		require.NoError(t, err, "%s was deleted", f)
	}
	// The two best epochs by val_acc (ties: the earlier one stays) are the kept files.
	type ep struct {
		epoch int
		acc   float64
	}
	var eps []ep
	for _, r := range second.History {
		eps = append(eps, ep{r.Epoch, r.ValAcc})
	}
	kept := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(ckdir, "epoch=*.pt"))
	for _, f := range files {
		kept[filepath.Base(f)] = true
	}
	delete(kept, "epoch=999-val_acc=0.0000.pt")
	t.Logf("history %v, kept %v", eps, kept)
	require.Len(t, kept, 2, "top-2 across the resume: %v", kept)
	best := 0
	for i, e := range eps {
		if e.acc > eps[best].acc {
			best = i
		}
	}
	for name := range kept {
		var e int
		var acc float64
		_, err := fmt.Sscanf(name, "epoch=%03d-val_acc=%f.pt", &e, &acc)
		require.NoError(t, err)
		for _, other := range eps {
			if other.epoch != e && !kept[fmt.Sprintf("epoch=%03d-val_acc=%.4f.pt", other.epoch, other.acc)] {
				assert.GreaterOrEqual(t, acc, math.Round(other.acc*1e4)/1e4, "kept epoch %d but dropped better epoch %d", e, other.epoch)
			}
		}
	}
	v, err := checkpoint.Read(filepath.Join(ckdir, "best_model.pth"))
	require.NoError(t, err)
	e, err := checkpoint.GetInt(v, "epoch")
	require.NoError(t, err)
	assert.Equal(t, int64(eps[best].epoch), e, "best_model.pth is the best epoch")
}

// TestAccumulationEqualsLargerBatch: k micro-batches of B per step give the same weights
// as one batch of k*B (the loss is a mean, the data order the same).
func TestAccumulationEqualsLargerBatch(t *testing.T) {
	all, err := data.Synthetic(256, 10, []int64{1, 28, 28}, seed)
	require.NoError(t, err)
	weights := func(batch, k int) []float32 {
		tr, err := data.NewLoader(all, data.LoaderOptions{BatchSize: batch, Shuffle: true, Seed: seed})
		require.NoError(t, err)
		torch.ManualSeed(seed)
		m := models.MLP(784, 16, 10)
		opt, err := optim.NewSGD(nn.Parameters(m), optim.SGDOptions{LR: 0.1, Momentum: 0.9})
		require.NoError(t, err)
		tt, err := trainer.New(m, tr, nil, &nn.CrossEntropyLoss{}, opt, trainer.WithDevice("cpu"),
			trainer.WithOutput(io.Discard), trainer.WithEpochs(2), trainer.WithAccumulation(k), trainer.WithSeed(seed))
		require.NoError(t, err)
		require.NoError(t, tt.Run(context.Background()))
		var w []float32
		torch.WithScope(func() {
			for _, p := range nn.Parameters(m) {
				w = append(w, p.Float32s()...)
			}
		})
		return w
	}
	big := weights(64, 1)
	acc := weights(32, 2)
	require.Len(t, acc, len(big))
	for i := range big {
		require.InDelta(t, big[i], acc[i], 1e-5, "weight %d", i)
	}
}

// TestRunDirectoryReplacesLinks: a file the Trainer names inside its run directory
// (config.json, history.jsonl, curves.png, checkpoints/last.pt and best_model.pth) that
// is a symlink is replaced by the new file, never written through; what the link
// pointed to is left as it was (issue 42: outputs written through links). A path the
// caller names (SaveCheckpoint's) keeps its link, as DESIGN.md says.
func TestRunDirectoryReplacesLinks(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "checkpoints"), 0o755))
	names := []string{"config.json", "history.jsonl", "curves.png", "checkpoints/last.pt", "checkpoints/best_model.pth"}
	for i, f := range names {
		target := filepath.Join(outside, fmt.Sprintf("victim%d", i))
		require.NoError(t, os.WriteFile(target, []byte("keep me"), 0o644))
		require.NoError(t, os.Symlink(target, filepath.Join(dir, f)))
	}
	tt := newCNN(t, dir, trainer.WithEpochs(1), trainer.WithSeed(seed), trainer.WithDevice("cpu"))
	require.NoError(t, tt.Run(context.Background()))
	for i, f := range names {
		b, err := os.ReadFile(filepath.Join(outside, fmt.Sprintf("victim%d", i)))
		require.NoError(t, err)
		assert.Equal(t, "keep me", string(b), "the file %s pointed to", f)
		fi, err := os.Lstat(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.True(t, fi.Mode().IsRegular(), "%s is a regular file now", f)
	}
	_, err := checkpoint.Read(filepath.Join(dir, "checkpoints", "last.pt"))
	require.NoError(t, err)

	named := filepath.Join(outside, "named.pt")
	require.NoError(t, os.Symlink(filepath.Join(outside, "victim0"), named))
	require.NoError(t, tt.SaveCheckpoint(named))
	fi, err := os.Lstat(named)
	require.NoError(t, err)
	assert.True(t, fi.Mode()&os.ModeSymlink != 0, "a named path keeps its link")
	_, err = checkpoint.Read(filepath.Join(outside, "victim0"))
	require.NoError(t, err, "and the checkpoint is written where it points")
}
