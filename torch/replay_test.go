package torch_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

// replayNet is a two-layer MLP with Dropout and a layer written here, as a user writes
// one (gate: h * sigmoid(g * h), g a parameter), and an optimizer's state for it.
type replayNet struct {
	w1, b1, g, w2, b2 *torch.Tensor
	state             [][torch.OptimizerStateSlots]*torch.Tensor
}

func newReplayNet(seed int64, out int64) *replayNet {
	torch.ManualSeed(seed)
	leaf := func(shape ...int64) *torch.Tensor {
		return torch.Randn(shape, torch.Float32, torch.CPU).MulScalar(0.3).Escape().SetRequiresGrad(true)
	}
	var n *replayNet
	torch.WithScope(func() { n = &replayNet{w1: leaf(16, 8), b1: leaf(16), g: leaf(16), w2: leaf(out, 16), b2: leaf(out)} })
	n.state = make([][torch.OptimizerStateSlots]*torch.Tensor, 5)
	return n
}

func (n *replayNet) params() []*torch.Tensor { return []*torch.Tensor{n.w1, n.b1, n.g, n.w2, n.b2} }

// gate is the user's layer: nothing about it is known to the recorder but its ops.
func gate(h, g *torch.Tensor) *torch.Tensor { return h.Mul(h.Mul(g).Sigmoid()) }

func (n *replayNet) forward(x *torch.Tensor) *torch.Tensor {
	h := torch.Linear(x, n.w1, n.b1).ReLU()
	h = torch.Dropout(gate(h, n.g), 0.25, true)
	return torch.Linear(h, n.w2, n.b2)
}

// step is one eager training step: zero_grad, forward, loss, the running sum,
// backward, the optimizer step.
func (n *replayNet) step(x, y *torch.Tensor, loss func(out, y *torch.Tensor) *torch.Tensor, sums *torch.Tensor,
	args torch.OptimizerArgs, at int64) *torch.Tensor {
	torch.ZeroGrads(n.params(), true)
	l := loss(n.forward(x), y)
	torch.Accumulate(sums, []*torch.Tensor{l}, float64(x.Size(0)), at, torch.AccumulateTrack)
	l.Backward()
	if err := args.Step(); err != nil {
		panic(err)
	}
	return l
}

func (n *replayNet) values() [][]float32 {
	var out [][]float32
	for i, p := range n.params() {
		out = append(out, p.Float32s())
		for _, s := range n.state[i] {
			if s != nil {
				out = append(out, s.Float32s())
			}
		}
	}
	return out
}

func (n *replayNet) free() {
	for i, p := range n.params() {
		p.Free()
		for _, s := range n.state[i] {
			if s != nil {
				s.Free()
			}
		}
	}
}

// replayOptimizers' hyperparameters are in torch.OptimizerKeys' order.
var replayOptimizers = map[string]func(n *replayNet) torch.OptimizerArgs{
	"sgd": func(n *replayNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs(torch.SGDKernel, hyperGroups([]float64{0.05, 0.9, 0, 1e-3}), []int64{5}, n.params(), n.state)
	},
	"adam-amsgrad": func(n *replayNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs(torch.AdamKernel, hyperGroups([]float64{1e-2, 0.9, 0.999, 1e-8, 0, 1, 0, 0}), []int64{5}, n.params(), n.state)
	},
	"adamw-foreach": func(n *replayNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs(torch.AdamKernel, hyperGroups([]float64{1e-2, 0.9, 0.999, 1e-8, 0.01, 0, 0, 1}), []int64{5}, n.params(), n.state)
	},
	"rmsprop": func(n *replayNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs(torch.RMSpropKernel, hyperGroups([]float64{1e-2, 0.99, 1e-8, 0, 0.5, 1}, []float64{2e-2, 0.9, 1e-8}), []int64{2, 3}, n.params(), n.state)
	},
	"adagrad": func(n *replayNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs(torch.AdagradKernel, hyperGroups([]float64{0.1, 0, 1e-10}), []int64{5}, n.params(), n.state)
	},
}

// hyperGroups pads each group's values to torch.OptimizerHyperLen.
func hyperGroups(gs ...[]float64) []float64 {
	var out []float64
	for _, g := range gs {
		out = append(out, g...)
		out = append(out, make([]float64, torch.OptimizerHyperLen-len(g))...)
	}
	return out
}

// replayLosses are losses with their targets.
var replayLosses = map[string]struct {
	loss   func(out, y *torch.Tensor) *torch.Tensor
	target func() *torch.Tensor
	out    int64
}{
	"cross_entropy": {
		func(out, y *torch.Tensor) *torch.Tensor {
			return torch.CrossEntropy(out, y, torch.CrossEntropyOptions{LabelSmoothing: 0.1})
		},
		func() *torch.Tensor { return torch.Randint(0, 4, []int64{6}, torch.Int64, torch.CPU) }, 4,
	},
	"mse_loss": {
		func(out, y *torch.Tensor) *torch.Tensor { return torch.MSELoss(out, y, torch.ReductionMean) },
		func() *torch.Tensor { return torch.Randn([]int64{6, 3}, torch.Float32, torch.CPU) }, 3,
	},
	"smooth_l1_loss": {
		func(out, y *torch.Tensor) *torch.Tensor { return torch.SmoothL1Loss(out, y, torch.ReductionSum, 0.5) },
		func() *torch.Tensor { return torch.Randn([]int64{6, 3}, torch.Float32, torch.CPU) }, 3,
	},
}

// TestReplayMatchesEager: a step recorded from eager code, with a layer written in the
// test, is replayed from its fourth step on (the first recording makes the optimizer's
// state, the next two agree), and gives the eager step's losses, running sums,
// gradients, parameters and optimizer state to the bit, step after step, for every
// optimizer (two parameter groups for RMSprop) — Dropout drawing the same masks.
func TestReplayMatchesEager(t *testing.T) {
	for lname, l := range replayLosses {
		for oname, mk := range replayOptimizers {
			t.Run(lname+"/"+oname, func(t *testing.T) {
				live := torch.LiveTensors()
				rep, eager := newReplayNet(7, l.out), newReplayNet(7, l.out)
				sumR := torch.FromSlice([]float64{0, 0, 0}).Escape()
				sumE := torch.FromSlice([]float64{0, 0, 0}).Escape()
				var r torch.Replayer
				for i := range 7 {
					torch.WithScope(func() {
						torch.ManualSeed(int64(100 + i))
						x := torch.Randn([]int64{6, 8}, torch.Float32, torch.CPU)
						y := l.target()
						at := int64(i + 1)
						torch.ManualSeed(int64(200 + i))
						args := mk(rep)
						outs, replayed := r.Step([]*torch.Tensor{x, y}, &args, at, func() []*torch.Tensor {
							return []*torch.Tensor{rep.step(x, y, l.loss, sumR, mk(rep), at)}
						})
						assert.Equal(t, i >= 3, replayed, "step %d replayed", i)
						assert.Empty(t, r.Why())

						torch.ManualSeed(int64(200 + i))
						le := eager.step(x, y, l.loss, sumE, mk(eager), at)
						assert.Equal(t, le.Float32s(), outs[0].Float32s(), "step %d: loss", i)
					})
				}
				assert.Equal(t, eager.values(), rep.values(), "parameters and optimizer state")
				assert.Equal(t, sumE.Float64s(), sumR.Float64s(), "running sums")
				for i, p := range rep.params() {
					torch.WithScope(func() {
						assert.Equal(t, eager.params()[i].Grad().Float32s(), p.Grad().Float32s(), "gradient %d", i)
					})
				}
				r.Free()
				rep.free()
				eager.free()
				sumR.Free()
				sumE.Free()
				assert.Equal(t, live, torch.LiveTensors(), "live tensors")
			})
		}
	}
}

// TestReplayRunBatches: once ready, a trace replayed over a run of batches in one call
// (RunBatches) gives the losses, sums, parameters and optimizer state of the eager
// steps over the same batches, to the bit, for consecutive rows (Narrow) and a shuffled
// order (IndexSelect).
func TestReplayRunBatches(t *testing.T) {
	starts := []int64{0, 6, 12, 18, 24, 30, 36}
	for oname, mk := range replayOptimizers {
		for _, shuffled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shuffled=%v", oname, shuffled), func(t *testing.T) {
				rep, eager := newReplayNet(11, 4), newReplayNet(11, 4)
				defer rep.free()
				defer eager.free()
				torch.ManualSeed(5)
				x := torch.Randn([]int64{42, 8}, torch.Float32, torch.CPU).Escape()
				y := torch.Randint(0, 4, []int64{42}, torch.Int64, torch.CPU).Escape()
				defer x.Free()
				defer y.Free()
				var order *torch.Tensor
				if shuffled {
					order = torch.FromSlice(torch.RandpermSeeded(42, 9)).Escape()
					defer order.Free()
				}
				batch := func(i int) (*torch.Tensor, *torch.Tensor) {
					if order != nil {
						idx := order.Narrow(0, starts[i], 6)
						return x.IndexSelect(0, idx), y.IndexSelect(0, idx)
					}
					return x.Narrow(0, starts[i], 6), y.Narrow(0, starts[i], 6)
				}
				loss := replayLosses["cross_entropy"].loss
				sumR := torch.FromSlice([]float64{0, 0, 0}).Escape()
				sumE := torch.FromSlice([]float64{0, 0, 0}).Escape()
				defer sumR.Free()
				defer sumE.Free()
				var r torch.Replayer
				defer r.Free()

				var lastR, lastE []float32
				torch.WithScope(func() {
					torch.ManualSeed(300)
					for i := range 3 {
						xb, yb := batch(i)
						args := mk(rep)
						r.Step([]*torch.Tensor{xb, yb}, &args, int64(i+1), func() []*torch.Tensor {
							return []*torch.Tensor{rep.step(xb, yb, loss, sumR, mk(rep), int64(i+1))}
						})
					}
					require.True(t, r.Ready())
					args := mk(rep)
					b := &torch.BatchRun{Fields: []*torch.Tensor{x, y}, Order: order, Starts: starts[3:], Sizes: []int64{6, 6, 6, 6}}
					lastR = r.RunBatches(b, &args, 4)[0].Float32s()
					assert.Equal(t, 4, b.Done)
				})
				torch.WithScope(func() {
					torch.ManualSeed(300)
					for i := range starts {
						xb, yb := batch(i)
						lastE = eager.step(xb, yb, loss, sumE, mk(eager), int64(i+1)).Float32s()
					}
				})
				assert.Equal(t, lastE, lastR, "last loss")
				assert.Equal(t, eager.values(), rep.values(), "parameters and optimizer state")
				assert.Equal(t, sumE.Float64s(), sumR.Float64s(), "running sums")
			})
		}
	}
}

// TestReplayRefuses: a step that reads a value on the host, recomputes in Go
// (checkpointing) or changes the generator's seed is not recorded, and one that depends
// on a Go value changing from step to step is never replayed; each runs eagerly, with
// the reason.
func TestReplayRefuses(t *testing.T) {
	n := newReplayNet(3, 4)
	defer n.free()
	cases := []struct {
		name string
		step func(x *torch.Tensor, i int) *torch.Tensor
		why  string
	}{
		{"item", func(x *torch.Tensor, _ int) *torch.Tensor {
			out := n.forward(x)
			if out.Sum().Item() > 1e9 {
				return out.Neg()
			}
			return out
		}, "item"},
		{"checkpoint", func(x *torch.Tensor, _ int) *torch.Tensor {
			return torch.Checkpoint(func(in []*torch.Tensor) []*torch.Tensor {
				return []*torch.Tensor{n.forward(in[0])}
			}, []*torch.Tensor{x}, n.params())[0]
		}, "checkpointing"},
		{"seed", func(x *torch.Tensor, i int) *torch.Tensor {
			torch.ManualSeed(int64(i))
			return n.forward(x)
		}, "manual_seed"},
		{"go scalar", func(x *torch.Tensor, i int) *torch.Tensor { return n.forward(x).MulScalar(float64(i)) },
			"different work"},
		{"host tensor", func(x *torch.Tensor, i int) *torch.Tensor {
			return n.forward(x).Mul(torch.FromSlice([]float32{float32(i)}))
		}, "different work"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r torch.Replayer
			defer r.Free()
			for i := range 6 {
				torch.WithScope(func() {
					x := torch.Randn([]int64{2, 8}, torch.Float32, torch.CPU)
					eagerRan := false
					_, replayed := r.Step([]*torch.Tensor{x}, nil, 0, func() []*torch.Tensor {
						eagerRan = true
						out := c.step(x, i).Sum()
						out.Backward()
						return []*torch.Tensor{out}
					})
					assert.False(t, replayed)
					assert.True(t, eagerRan)
				})
			}
			assert.Contains(t, r.Why(), c.why)
		})
	}
}

// TestReplayShapes: a trace holds for the shapes it was recorded with; a batch of
// another shape is recorded apart (a last, shorter batch) while the first shape goes on
// being replayed.
func TestReplayShapes(t *testing.T) {
	n := newReplayNet(3, 4)
	defer n.free()
	var r torch.Replayer
	defer r.Free()
	step := func(rows int64) (replayed bool) {
		torch.WithScope(func() {
			x := torch.Randn([]int64{rows, 8}, torch.Float32, torch.CPU)
			_, replayed = r.Step([]*torch.Tensor{x}, nil, 0, func() []*torch.Tensor {
				out := n.forward(x).Sum()
				out.Backward()
				return []*torch.Tensor{out}
			})
		})
		return replayed
	}
	for i := range 3 {
		assert.Equal(t, i == 2, step(4), "4 rows, step %d", i)
	}
	assert.False(t, step(3))
	assert.True(t, step(4))
	assert.False(t, step(3))
	assert.True(t, step(3))
}

// TestReplayErrorsNameTheOp: a replayed call that fails panics with a *torch.Error whose
// message names the call, as the eager step's would.
func TestReplayErrorsNameTheOp(t *testing.T) {
	n := newReplayNet(5, 4)
	defer n.free()
	var r torch.Replayer
	defer r.Free()
	loss := replayLosses["cross_entropy"].loss
	torch.WithScope(func() {
		run := func(y *torch.Tensor) {
			x := torch.Randn([]int64{3, 8}, torch.Float32, torch.CPU)
			r.Step([]*torch.Tensor{x, y}, nil, 0, func() []*torch.Tensor {
				l := loss(n.forward(x), y)
				l.Backward()
				return []*torch.Tensor{l}
			})
		}
		for range 3 {
			run(torch.Zeros([]int64{3}, torch.Int64, torch.CPU))
		}
		require.True(t, r.Ready())
		err := panicErr(func() { run(torch.FromSlice([]int64{0, 9, 1})) }) // class 9 of 4
		var te *torch.Error
		require.True(t, errors.As(err, &te), "a *torch.Error, got %v", err)
		assert.Contains(t, te.Msg, "cross_entropy: ")
	})
}

func panicErr(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(error)
			if !ok {
				e = fmt.Errorf("%v", r)
			}
			err = e
		}
	}()
	f()
	return nil
}

// slot returns state slot k of n's parameters, made by mk (and kept) where missing.
func (n *replayNet) slot(k int, mk func(p *torch.Tensor) *torch.Tensor) []*torch.Tensor {
	out := make([]*torch.Tensor, len(n.state))
	for i, p := range n.params() {
		if n.state[i][k] == nil {
			n.state[i][k] = mk(p).Escape()
		}
		out[i] = n.state[i][k]
	}
	return out
}

// fusedSteps are optimizer steps over the fused kernels' ops.tab rows, as a fused
// optimizer written in Go (an optim.Algorithm) makes them.
var fusedSteps = map[string]func(n *replayNet, grads []*torch.Tensor){
	"adam": func(n *replayNet, grads []*torch.Tensor) {
		steps := n.slot(0, func(*torch.Tensor) *torch.Tensor { return torch.Zeros(nil, torch.Float32, torch.CPU) })
		avgs, sqs, maxs := n.slot(1, (*torch.Tensor).ZerosLike), n.slot(2, (*torch.Tensor).ZerosLike), n.slot(3, (*torch.Tensor).ZerosLike)
		torch.ForeachAddScalarInPlace(steps, 1)
		torch.FusedAdam(n.params(), grads, avgs, sqs, maxs, steps, 1e-2, 0.9, 0.999, 0.01, 1e-8, true, false, nil, nil)
	},
	"adamw": func(n *replayNet, grads []*torch.Tensor) {
		steps := n.slot(0, func(*torch.Tensor) *torch.Tensor { return torch.Zeros(nil, torch.Float32, torch.CPU) })
		avgs, sqs := n.slot(1, (*torch.Tensor).ZerosLike), n.slot(2, (*torch.Tensor).ZerosLike)
		torch.ForeachAddScalarInPlace(steps, 1)
		torch.FusedAdamW(n.params(), grads, avgs, sqs, nil, steps, 1e-2, 0.9, 0.999, 0.01, 1e-8, false, true, nil, nil)
	},
	"sgd": func(n *replayNet, grads []*torch.Tensor) {
		first := n.state[0][0] == nil
		bufs := n.slot(0, (*torch.Tensor).ZerosLike)
		torch.FusedSGD(n.params(), grads, bufs, 1e-3, 0.9, 0.05, 0.1, false, false, first, nil, nil)
	},
	// The tensor-lr rows read rowLR, which the test changes before every step: a replay
	// reads its current value.
	"adam-tensor-lr": func(n *replayNet, grads []*torch.Tensor) {
		steps := n.slot(0, func(*torch.Tensor) *torch.Tensor { return torch.Zeros(nil, torch.Float32, torch.CPU) })
		avgs, sqs := n.slot(1, (*torch.Tensor).ZerosLike), n.slot(2, (*torch.Tensor).ZerosLike)
		torch.ForeachAddScalarInPlace(steps, 1)
		torch.FusedAdamTensorLR(n.params(), grads, avgs, sqs, nil, steps, rowLR.Tensor(), 0.9, 0.999, 0.01, 1e-8, false, false, nil, nil)
	},
	"adamw-tensor-lr": func(n *replayNet, grads []*torch.Tensor) {
		steps := n.slot(0, func(*torch.Tensor) *torch.Tensor { return torch.Zeros(nil, torch.Float32, torch.CPU) })
		avgs, sqs, maxs := n.slot(1, (*torch.Tensor).ZerosLike), n.slot(2, (*torch.Tensor).ZerosLike), n.slot(3, (*torch.Tensor).ZerosLike)
		torch.ForeachAddScalarInPlace(steps, 1)
		torch.FusedAdamWTensorLR(n.params(), grads, avgs, sqs, maxs, steps, rowLR.Tensor(), 0.9, 0.999, 0.01, 1e-8, true, true, nil, nil)
	},
	"sgd-tensor-lr": func(n *replayNet, grads []*torch.Tensor) {
		first := n.state[0][0] == nil
		bufs := n.slot(0, (*torch.Tensor).ZerosLike)
		torch.FusedSGDTensorLR(n.params(), grads, bufs, 1e-3, 0.9, rowLR.Tensor(), 0.1, false, false, first, nil, nil)
	},
}

// rowLR is the learning rate of fusedSteps' tensor-lr rows.
var rowLR *torch.HostScalar

// TestReplayFusedOptimizerRows: the fused optimizer kernels' rows (_foreach_add_,
// _fused_adam_, _fused_adamw_, _fused_sgd_, with a Go learning rate or a tensor one) are
// recorded and replayed as every op is: a step ending in them, over state the first step
// makes, is replayed from its fourth step on and gives the eager step's losses,
// parameters and state to the bit, a tensor learning rate read at each replay.
func TestReplayFusedOptimizerRows(t *testing.T) {
	rowLR = torch.NewHostScalar(0)
	defer rowLR.Free()
	for name, opt := range fusedSteps {
		t.Run(name, func(t *testing.T) {
			rep, eager := newReplayNet(3, 4), newReplayNet(3, 4)
			defer rep.free()
			defer eager.free()
			step := func(n *replayNet, x, y *torch.Tensor) *torch.Tensor {
				torch.ZeroGrads(n.params(), true)
				l := torch.CrossEntropy(n.forward(x), y, torch.CrossEntropyOptions{})
				l.Backward()
				grads := make([]*torch.Tensor, 0, 5)
				for _, p := range n.params() {
					grads = append(grads, p.Grad())
				}
				torch.NoGrad(func() { opt(n, grads) })
				return l
			}
			var r torch.Replayer
			defer r.Free()
			for i := range 6 {
				torch.WithScope(func() {
					torch.ManualSeed(int64(10 + i))
					x := torch.Randn([]int64{6, 8}, torch.Float32, torch.CPU)
					y := torch.Randint(0, 4, []int64{6}, torch.Int64, torch.CPU)
					torch.ManualSeed(int64(20 + i))
					rowLR.Set(0.05 / float64(i+1))
					outs, replayed := r.Step([]*torch.Tensor{x, y}, nil, int64(i+1), func() []*torch.Tensor {
						return []*torch.Tensor{step(rep, x, y)}
					})
					require.Empty(t, r.Why())
					assert.Equal(t, i >= 3, replayed, "step %d replayed", i)
					torch.ManualSeed(int64(20 + i))
					assert.Equal(t, step(eager, x, y).Float32s(), outs[0].Float32s(), "step %d: loss", i)
				})
			}
			assert.Equal(t, eager.values(), rep.values(), "parameters and optimizer state")
		})
	}
}
