package trainer

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/optim"
)

// WithCUDAGraphs says whether the training step runs as a CUDA graph (default off): the
// step's tensor work — zero_grad, forward, loss, metric sums, backward, clipping and the
// optimizer step — runs eagerly for graphWarmup steps on a side stream, is then captured
// once (torch.CUDAGraph) and replayed for each following batch of the same shapes, whose
// fields the Trainer copies into the graph's static input buffers. The optimizer runs in
// its capturable form: its learning rate is a device tensor the Trainer sets before each
// step, so a scheduler changes it without a new capture. A batch of other shapes (the
// last, smaller one; padded language-model batches) gets a graph of its own after
// graphWarmup eager steps of that shape in an epoch, and runs eagerly until then; graphs
// are captured afresh each epoch. Everything else — GlobalStep, the scheduler, the
// events, logging points, checkpoints — runs in Go at every step as in eager mode, and
// the events come in the same order.
//
// A graph replays fixed work, so New refuses, naming the reason, what cannot be
// captured: a device that is not CUDA, several processes, an optimizer that is not
// Adam(fused=True), AdamW(fused=True) or SGD (the others read their step counts on the
// host; an optim.Algorithm's hyperparameters are Go values), fp16's GradScaler (its
// skipped steps are decided on the host), gradient accumulation, and a callback acting
// at BeforeBackward or BeforeOptimizerStep (inside the captured step). A step that reads
// a value on the host (Tensor.Item) or uses activation checkpointing (its backward calls
// Go) is an error at the first step of the epoch, which is recorded (torch.Record) to
// find them before anything is captured.
func WithCUDAGraphs(on bool) Option {
	return func(t *Trainer) error { t.cfg.CUDAGraphs = on; return nil }
}

// graphWarmup is the number of eager steps of each shape before its capture, as
// torch.cuda.make_graphed_callables' default (cuDNN's benchmark and the allocator
// settle; the optimizer makes its state).
const graphWarmup = 3

// checkGraphs returns why WithCUDAGraphs cannot apply to t's configuration, or nil.
func (t *Trainer) checkGraphs() error {
	if !t.cfg.CUDAGraphs {
		return nil
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("trainer: WithCUDAGraphs: "+format, args...)
	}
	if _, ok := t.strategy.(SingleProcess); !ok {
		backend := "the strategy"
		if pg := t.Distributed(); pg != nil {
			backend = pg.Backend()
			if pg.Backend() == distributed.Gloo {
				return refuse("Gloo's collectives run on the host and cannot be captured; train one process, or without graphs")
			}
		}
		return refuse("%s's gradient reduction across processes is not captured yet; train one process, or without graphs", backend)
	}
	if err := capturable(t.Optimizer); err != nil {
		return refuse("%v", err)
	}
	if t.cfg.AMP.NeedsScaler() {
		return refuse("fp16's GradScaler decides on the host whether a step is skipped; use --amp bf16, or no graphs")
	}
	if t.cfg.Accumulation > 1 {
		return refuse("gradient accumulation (%d micro-batches a step) is not captured; use a larger batch, or no graphs", t.cfg.Accumulation)
	}
	for _, cb := range t.callbacks {
		if ev := eventsOf(cb); ev.Has(BeforeBackward) || ev.Has(BeforeOptimizerStep) {
			return refuse("callback %T acts at BeforeBackward or BeforeOptimizerStep, inside the captured step, which replays without Go (a Subscriber that leaves them out can run)", cb)
		}
	}
	if !t.Device.IsCUDA() {
		return refuse("CUDA graphs need a CUDA device, and the device is %s", t.Device)
	}
	return nil
}

// CapturedGraphs reports how many CUDA graphs (WithCUDAGraphs) the current epoch (or,
// between epochs, the last one) has captured: one per batch shape seen often enough.
func (t *Trainer) CapturedGraphs() int {
	n := 0
	if t.graphs != nil {
		for _, sg := range t.graphs.shapes {
			if sg.loss != nil {
				n++
			}
		}
	}
	return n
}

// capturable returns why o's step cannot be captured, or nil.
func capturable(o optim.Optimizer) error {
	c, ok := o.(optim.Capturable)
	if !ok {
		return fmt.Errorf("optimizer %T is not one of torch/optim's built-in ones, whose learning rate a graph can read from the device", o)
	}
	return c.Capturable()
}

// graphSteps is the state of an epoch whose training steps run as CUDA graphs: the
// learning rates on the device, and a graph per batch shape.
type graphSteps struct {
	lrs     []*torch.Tensor
	shapes  map[string]*shapeGraph
	checked bool // the epoch's first step was recorded (torch.Record) for what a capture cannot hold
}

// shapeGraph is one batch shape's graph: its static inputs, the steps it has run
// eagerly, and once captured, the graph and the loss tensor each replay rewrites.
type shapeGraph struct {
	inputs data.Batch
	warm   int
	g      *torch.CUDAGraph
	loss   *torch.Tensor
}

// planGraphs returns the epoch's graphs (nil without WithCUDAGraphs), dropping the last
// epoch's: the epoch starts new metric sums, which a graph writes in place.
func (t *Trainer) planGraphs() *graphSteps {
	t.graphs.free()
	if !t.cfg.CUDAGraphs {
		return nil
	}
	f := &graphSteps{shapes: map[string]*shapeGraph{}}
	torch.WithScope(func() {
		for range t.Optimizer.ParamGroups() {
			f.lrs = append(f.lrs, torch.Zeros(nil, torch.Float32, t.Device).Escape())
		}
	})
	return f
}

// free releases the graphs, their pools and static inputs.
func (f *graphSteps) free() {
	if f == nil {
		return
	}
	for _, sg := range f.shapes {
		sg.g.Free()
		sg.loss.Free()
		for _, x := range sg.inputs.Fields {
			x.Free()
		}
	}
	for _, lr := range f.lrs {
		lr.Free()
	}
	*f = graphSteps{}
}

// step trains the next batch: its fields copied into its shape's static inputs, then
// the graph replayed, or until the shape has one, the same code as an eager step on a
// side stream — warm-up, then the capture. It returns how many batches it trained.
func (f *graphSteps) step(t *Trainer, it *data.Iter) (done int, err error) {
	b, ok := it.Next()
	if !ok {
		return 0, nil
	}
	defer stepError(&err, func() string { return fmt.Sprintf("epoch %d batch %d", t.Epoch+1, t.BatchInEpoch+1) }, b.Size)
	on := batchOn(t.Train, b, t.Device)
	sg := f.shape(on)
	for name, x := range on.Fields {
		sg.inputs.Fields[name].CopyFrom(x, true)
	}
	cur := on // the batch as the step sees it: its index and size, the static fields
	cur.Fields = sg.inputs.Fields
	for i, g := range t.Optimizer.ParamGroups() {
		f.lrs[i].Fill(g.LR)
	}
	if sg.g != nil && sg.loss != nil {
		if err := sg.g.Replay(); err != nil {
			return 0, err
		}
		t.Batch, t.StepLoss = cur, sg.loss
		t.epochStats.Batches++
		t.epochStats.Samples += int64(b.Size)
		return 1, nil
	}
	return 1, f.eager(t, sg, cur)
}

// shape returns the graph of b's shapes, with static inputs made for it.
func (f *graphSteps) shape(b data.Batch) *shapeGraph {
	names := slices.Sorted(maps.Keys(b.Fields))
	var key strings.Builder
	for _, n := range names {
		x := b.Fields[n]
		fmt.Fprintf(&key, "%s%v%v;", n, x.Shape(), x.DType())
	}
	sg, ok := f.shapes[key.String()]
	if ok {
		return sg
	}
	sg = &shapeGraph{inputs: b}
	sg.inputs.Fields = make(map[string]*torch.Tensor, len(names))
	torch.WithScope(func() {
		for _, n := range names {
			sg.inputs.Fields[n] = b.Fields[n].Clone().Escape()
		}
	})
	f.shapes[key.String()] = sg
	return sg
}

// eager runs the step's tensor work on sg's static inputs — the code of every eager
// step (zero_grad, forwardBackward, applyGradients) — on a side stream, and after
// graphWarmup such steps, captures it and replays the capture, which is this step.
func (f *graphSteps) eager(t *Trainer, sg *shapeGraph, b data.Batch) (err error) {
	if sg.g == nil {
		if sg.g, err = torch.NewCUDAGraph(t.Device); err != nil {
			return err
		}
	}
	opt := t.Optimizer.(optim.Capturable) // checkGraphs made sure
	if err := opt.CaptureLR(f.lrs); err != nil {
		return err
	}
	defer func() {
		if e := opt.CaptureLR(nil); err == nil {
			err = e
		}
	}()
	run := t.singleStep(b, &err)
	if sg.warm < graphWarmup {
		sg.warm++
		var why string
		if e := sg.g.Warmup(func() {
			if f.checked {
				run()
				return
			}
			f.checked = true
			// The epoch's first step is recorded, as a replayed step is, to find what
			// a capture cannot hold before capturing.
			_, tr, w := torch.Record(slices.Collect(maps.Values(sg.inputs.Fields)), t.GlobalStep+1, run)
			if tr != nil {
				tr.Free()
			}
			why = w
		}); e != nil && err == nil {
			err = e
		}
		if err == nil && uncapturable(why) {
			return fmt.Errorf("trainer: WithCUDAGraphs: the training step cannot be captured as a CUDA graph: %s", why)
		}
		return err
	}
	if e := sg.g.Capture(func() { run() }); err == nil {
		err = e
	}
	if err != nil {
		sg.g.Free()
		sg.g = nil
		return fmt.Errorf("trainer: WithCUDAGraphs: capturing the training step (a step that reads a value on the host cannot be captured): %w", err)
	}
	sg.loss = t.StepLoss.Escape()
	if err := sg.g.Replay(); err != nil {
		return err
	}
	t.Batch = b
	return nil
}

// uncapturable reports whether the recorder's reason for not replaying a step (torch.Record)
// also rules out a capture: a read of device memory on the host, or Go code in backward.
// Other reasons (autocast's thread state, a kernel chosen on the host) do not.
func uncapturable(why string) bool {
	switch {
	case why == "", strings.HasPrefix(why, "_fused_sdp_choice"):
		return false
	case strings.Contains(why, "on the host"), strings.Contains(why, "checkpointing"), strings.Contains(why, "data_ptr"):
		return true
	}
	return false
}
