package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
)

// The batches are drawn from a pool this big and cycled: enough that no step sees the
// previous step's batch, small enough that ViT's images fit in host memory at once.
const batchPool = 4

// gptSetup returns the GPT-2 benchmarked and its batch: GPT-2 small (124M parameters)
// on 8 × 1024 tokens, without dropout so that both sides compute the same losses; on 4 ×
// 128 tokens for the CPU memory benchmark.
func gptSetup(sz size) (c models.GPT2Config, batch, seq int64) {
	c = models.DefaultGPT2Config()
	c.ResidPdrop, c.EmbdPdrop, c.AttnPdrop = 0, 0, 0
	switch sz {
	case sizeSmoke:
		c.VocabSize, c.NPositions, c.NEmbd, c.NLayer, c.NHead = 256, 64, 64, 2, 2
		c.BOSTokenID, c.EOSTokenID = nil, nil // GPT-2's 50256 is outside a 256-token vocabulary
		return c, 2, 32
	case sizeMem:
		return c, 4, 128 // activations above the gradients', as at 8 × 1024
	}
	return c, 8, 1024
}

// vitSetup returns the ViT benchmarked and its batch: torchvision's vit_b_16 (86M
// parameters, 224² images, 197 tokens) on 64 images; on 4 for the CPU memory benchmark.
func vitSetup(sz size) (c models.ViTConfig, batch int64) {
	c = models.ViTConfig{ImageSize: 224, PatchSize: 16, NumLayers: 12, NumHeads: 12, HiddenDim: 768, MLPDim: 3072, NumClasses: 1000}
	switch sz {
	case sizeSmoke:
		return models.ViTConfig{ImageSize: 32, PatchSize: 8, NumLayers: 2, NumHeads: 2, HiddenDim: 32, MLPDim: 64, NumClasses: 10}, 4
	case sizeMem:
		return c, 4 // activations above the gradients', as at 64
	}
	return c, 64
}

// resnetSetup returns ResNet-18's classes, image side and batch: torchvision's
// resnet18() on 64 images of 224² (8 for the CPU memory benchmark, 2 of 64² smoking).
func resnetSetup(sz size) (classes, side, batch int64) {
	switch sz {
	case sizeSmoke:
		return 10, 64, 2
	case sizeMem:
		return 1000, 224, 8
	}
	return 1000, 224, 64
}

// cnnSetup returns the default CNN's batch (models.SmallCNN on 1×28×28 images, 10
// classes): the seed's 128, in every size but smoke.
func cnnSetup(sz size) (batch int64) {
	if sz == sizeSmoke {
		return 8
	}
	return 128
}

// spec is DIR/spec.json: everything bench.py needs to build the same model, load the same
// weights, draw the same batches and time the same step.
type spec struct {
	Model     string            `json:"model"`
	Precision string            `json:"precision"`
	Device    string            `json:"device"`
	Batch     int64             `json:"batch"`
	Seq       int64             `json:"seq,omitempty"`
	ViT       *models.ViTConfig `json:"vit,omitempty"`
	Classes   int64             `json:"classes,omitempty"` // resnet18, cnn
	Side      int64             `json:"side,omitempty"`    // resnet18's image side
	Weights   string            `json:"weights"`           // a Hugging Face directory (gpt) or a torch.save state dict
	Pool      int               `json:"pool"`
	Warmup    int               `json:"warmup"`
	Steps     int               `json:"steps"`
	// KeepForward: gotrain's step keeps every tensor of the forward until the step's
	// scope closes, as it did before issue 35 (-keep-forward; for before/after figures).
	KeepForward bool    `json:"keep_forward,omitempty"`
	LR          float64 `json:"lr"`
	WD          float64 `json:"weight_decay"`
}

// trainResult is one side's numbers; bench.py prints the same fields.
type trainResult struct {
	Impl          string    `json:"impl"`
	Model         string    `json:"model"`
	Precision     string    `json:"precision"`
	MedianStepS   float64   `json:"median_step_s"`
	StepS         []float64 `json:"step_s"`
	ItemsPerS     float64   `json:"items_per_s"` // tokens/s (gpt) or samples/s (vit)
	Unit          string    `json:"unit"`
	PeakMemoryMiB float64   `json:"peak_memory_mib"` // CUDA only
	// The memory of the first timed step (after warm-up, so the optimizer's state exists):
	// the bytes allocated after its zero_grad and their peak until the timed steps end,
	// from the CUDA caching allocator or, on the CPU, from the counting allocator when it
	// is on (0 otherwise).
	BaselineBytes int64   `json:"baseline_bytes"`
	PeakBytes     int64   `json:"peak_bytes"`
	FirstLoss     float64 `json:"first_loss"`
	LastLoss      float64 `json:"last_loss"`
}

// benchModel is a model built for the benchmark with what the step needs.
type benchModel struct {
	module  nn.Module
	loss    func(batch []*torch.Tensor) *torch.Tensor
	batches func() [][]*torch.Tensor // on the CPU, drawn as bench.py draws them
	items   int64                    // tokens or samples per step
	unit    string
	free    func()
}

func runTrain(o options) (any, bool, error) {
	if o.dir == "" {
		return nil, false, fmt.Errorf("train: -dir is required")
	}
	m, s, err := prepare(o)
	if err != nil {
		return nil, false, fmt.Errorf("train: %w", err)
	}
	defer m.free()
	r, err := timeSteps(m, s, o.device)
	return r, err == nil, err
}

// prepare is what train and profile do before their steps: it checks o.precision, makes
// o.dir, builds o.model from seed 0 (buildModel, which writes its weights there) and
// writes the spec bench.py reads to o.dir/spec.json. The caller frees the model.
func prepare(o options) (*benchModel, spec, error) {
	s := spec{Model: o.model, Precision: o.precision, Device: o.device.String(), Pool: batchPool,
		Warmup: o.warmup, Steps: o.steps, LR: 1e-4, WD: 0.01, KeepForward: o.keepForward}
	if s.Precision != "fp32" && s.Precision != "bf16" {
		return nil, s, fmt.Errorf("-precision %q is not fp32 or bf16", s.Precision)
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, s, err
	}
	torch.ManualSeed(0)
	m, err := buildModel(o, &s)
	if err != nil {
		return nil, s, err
	}
	raw, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(filepath.Join(o.dir, "spec.json"), append(raw, '\n'), 0o644); err != nil {
		m.free()
		return nil, s, err
	}
	return m, s, nil
}

// buildModel draws the model's weights, writes them where bench.py reads them, and
// records the shapes in s.
func buildModel(o options, s *spec) (*benchModel, error) {
	switch o.model {
	case "gpt":
		c, batch, seq := gptSetup(o.size())
		g, err := models.NewGPT2LMHeadModel(c)
		if err != nil {
			return nil, err
		}
		s.Batch, s.Seq, s.Weights = batch, seq, "gpt2"
		if err := g.SavePretrained(filepath.Join(o.dir, s.Weights)); err != nil {
			return nil, err
		}
		return &benchModel{
			module: g,
			// The whole logits, as transformers computes them: the same work on both sides.
			loss: func(b []*torch.Tensor) *torch.Tensor {
				return models.LMLoss(g, models.DecoderInput{InputIDs: b[0]}, b[0], models.LossFull)
			},
			batches: func() [][]*torch.Tensor {
				return drawBatches(func() []*torch.Tensor {
					return []*torch.Tensor{torch.Randint(0, c.VocabSize, []int64{batch, seq}, torch.Int64, torch.CPU)}
				})
			},
			items: batch * seq, unit: "tokens/s",
			free: func() { nn.Free(g) },
		}, nil
	case "vit":
		c, batch := vitSetup(o.size())
		v, err := models.NewVisionTransformer(c)
		if err != nil {
			return nil, err
		}
		// torchvision's zero head would make every first loss ln(classes), whatever the
		// other weights and the images; a random one makes it a check of both.
		nn.InitNormal(v.Head.Weight, 0, 0.02)
		s.Batch, s.ViT, s.Weights = batch, &v.Config, "vit.pt"
		return classifier(o, s, v, []int64{batch, 3, c.ImageSize, c.ImageSize}, c.NumClasses)
	case "resnet18":
		classes, side, batch := resnetSetup(o.size())
		r := models.ResNet18(classes)
		s.Batch, s.Classes, s.Side, s.Weights = batch, classes, side, "resnet18.pt"
		return classifier(o, s, r, []int64{batch, 3, side, side}, classes)
	case "cnn":
		batch := cnnSetup(o.size())
		s.Batch, s.Classes, s.Weights = batch, 10, "cnn.pt"
		return classifier(o, s, models.SmallCNN(10), []int64{batch, 1, 28, 28}, 10)
	}
	return nil, fmt.Errorf("-model %q is not gpt, vit, resnet18 or cnn", o.model)
}

// classifier writes m's state dict where bench.py reads it and returns the benchmark of
// an image classifier on random images of the given shape and labels below classes.
func classifier(o options, s *spec, m nn.Layer, image []int64, classes int64) (*benchModel, error) {
	sd, err := nn.CheckpointStateDict(m)
	if err != nil {
		return nil, err
	}
	if err := checkpoint.Write(filepath.Join(o.dir, s.Weights), sd); err != nil {
		return nil, err
	}
	return &benchModel{
		module: m,
		loss: func(b []*torch.Tensor) *torch.Tensor {
			return torch.CrossEntropy(m.Forward(b[0]), b[1], torch.CrossEntropyOptions{})
		},
		batches: func() [][]*torch.Tensor {
			return drawBatches(func() []*torch.Tensor {
				return []*torch.Tensor{
					torch.Randn(image, torch.Float32, torch.CPU),
					torch.Randint(0, classes, image[:1], torch.Int64, torch.CPU),
				}
			})
		},
		items: image[0], unit: "samples/s",
		free: func() { nn.Free(m) },
	}, nil
}

// drawBatches seeds the generator with 1 and draws batchPool batches in order, as
// bench.py does, so that both sides train on the same values.
func drawBatches(draw func() []*torch.Tensor) [][]*torch.Tensor {
	torch.ManualSeed(1)
	out := make([][]*torch.Tensor, batchPool)
	for i := range out {
		out[i] = draw()
	}
	return out
}

// session is a benchmark model ready to train on a device: the module there in training
// mode, its batches there and its fused AdamW, in a scope of their own, for the step
// train times and profile profiles.
type session struct {
	scope       *torch.Scope
	m           *benchModel
	dev         torch.Device
	bf16        bool // the forward and loss under bf16 autocast
	keepForward bool // spec.KeepForward
	batches     [][]*torch.Tensor
	opt         *optim.Adam
	// zeroed, when set, runs in step i after zero_grad, before the forward.
	zeroed func(i int)
}

// newSession opens a scope, moves m to dev, sets it training, moves its batches to dev
// and makes the optimizer of s's learning rate and weight decay. Close the session after
// the steps, on the same goroutine.
func newSession(m *benchModel, s spec, dev torch.Device) (_ *session, err error) {
	t := &session{scope: torch.NewScope(), m: m, dev: dev, bf16: s.Precision == "bf16", keepForward: s.KeepForward}
	ok := false
	defer func() {
		if !ok { // an error, or a panic the caller recovers: close the scope all the same
			t.scope.Close()
		}
	}()
	nn.ToDevice(m.module, dev)
	nn.SetTraining(m.module, true)
	for _, b := range m.batches() {
		var moved []*torch.Tensor
		for _, x := range b {
			moved = append(moved, x.To(dev, false))
		}
		t.batches = append(t.batches, moved)
	}
	if t.opt, err = optim.NewAdamW(nn.Parameters(m.module), optim.AdamOptions{LR: s.LR, WeightDecay: s.WD, Fused: true}); err != nil {
		return nil, err
	}
	ok = true
	return t, nil
}

// close frees the optimizer, whose state would count in the next model's measurement,
// and closes the session's scope.
func (t *session) close() {
	t.opt.Free()
	t.scope.Close()
}

// step runs training step i as the Trainer runs a step and returns its loss: zero_grad,
// forward and loss (under autocast in bf16), backward, the optimizer step. The forward
// runs in its own scope, as the Trainer runs it: when it returns, only the loss and what
// autograd saved remain, and backward frees the latter as it goes (unless keepForward).
func (t *session) step(i int) (loss *torch.Tensor) {
	t.opt.ZeroGrad(true)
	if t.zeroed != nil {
		t.zeroed(i)
	}
	batch := t.batches[i%len(t.batches)]
	fwd := func() { loss = torch.Local(func() *torch.Tensor { return t.m.loss(batch) }) }
	if t.keepForward {
		fwd = func() { loss = t.m.loss(batch) }
	}
	if t.bf16 {
		amp.Autocast(t.dev, torch.BFloat16, fwd)
	} else {
		fwd()
	}
	loss.Backward()
	if err := t.opt.Step(); err != nil {
		panic(err)
	}
	return loss
}

// timeSteps runs warm-up steps, then times each step between two synchronizations: the
// step the Trainer runs (zero_grad, forward and loss under autocast, backward, fused
// AdamW) over batches already on the device, without reading the loss.
func timeSteps(m *benchModel, s spec, dev torch.Device) (r *trainResult, err error) {
	defer torch.Recover(&err, "train "+s.Model)
	r = &trainResult{Impl: "gotrain", Model: s.Model, Precision: s.Precision, Unit: m.unit}
	t, err := newSession(m, s, dev)
	if err != nil {
		return nil, err
	}
	defer t.close()
	t.zeroed = func(i int) {
		if i == s.Warmup {
			// The memory of the first timed step, from here: the weights, the optimizer's
			// state and the batches are the baseline; the peak is what forward, backward
			// and the optimizer step add at most (the freed gradients no longer hide it).
			var err error
			if r.BaselineBytes, err = resetPeakMemory(dev); err != nil {
				panic(err)
			}
		}
	}
	for i := 0; i < s.Warmup+s.Steps; i++ {
		torch.WithScope(func() {
			synchronize(dev)
			t0 := time.Now()
			loss := t.step(i)
			synchronize(dev)
			if i >= s.Warmup {
				r.StepS = append(r.StepS, time.Since(t0).Seconds())
			}
			// Read outside the timed interval: the first loss compares the two sides'
			// models and batches, the last their optimizers.
			if i == 0 {
				r.FirstLoss = loss.Item()
			}
			if i == s.Warmup+s.Steps-1 {
				r.LastLoss = loss.Item()
			}
		})
	}
	r.MedianStepS = median(r.StepS)
	r.ItemsPerS = float64(m.items) / r.MedianStepS
	if r.PeakBytes, err = peakMemory(dev); err != nil {
		return nil, err
	}
	if dev.IsCUDA() {
		r.PeakMemoryMiB = float64(r.PeakBytes) / (1 << 20)
	}
	return r, nil
}

// resetPeakMemory starts a peak measurement on dev and returns the bytes allocated now:
// the CUDA caching allocator's figures, or the counting CPU allocator's (0 when it is
// off). Python's side measures with torch.cuda's same statistics or the same allocator.
func resetPeakMemory(dev torch.Device) (int64, error) {
	if dev.IsCUDA() {
		if err := torch.CUDAResetPeakMemory(dev.Index); err != nil {
			return 0, err
		}
		mem, err := torch.CUDAMemoryStats(dev.Index)
		return mem.Allocated, err
	}
	torch.ResetCPUPeakMemory()
	return torch.CPUMemoryStats().Allocated, nil
}

// peakMemory returns the peak bytes allocated on dev since resetPeakMemory.
func peakMemory(dev torch.Device) (int64, error) {
	if dev.IsCUDA() {
		mem, err := torch.CUDAMemoryStats(dev.Index)
		return mem.PeakAllocated, err
	}
	return torch.CPUMemoryStats().PeakAllocated, nil
}
