package torch_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

// stepNet is a two-layer MLP with Dropout as raw tensors, and an optimizer's state for
// it: what a TrainStep and the same step called op by op both train.
type stepNet struct {
	w1, b1, w2, b2 *torch.Tensor
	state          [][torch.OptimizerStateSlots]*torch.Tensor
}

func newStepNet(seed int64, out int64) *stepNet {
	torch.ManualSeed(seed)
	leaf := func(shape ...int64) *torch.Tensor {
		return torch.Randn(shape, torch.Float32, torch.CPU).MulScalar(0.3).Escape().SetRequiresGrad(true)
	}
	n := &stepNet{w1: leaf(16, 8), b1: leaf(16), w2: leaf(out, 16), b2: leaf(out)}
	n.state = make([][torch.OptimizerStateSlots]*torch.Tensor, 4)
	return n
}

func (n *stepNet) params() []*torch.Tensor { return []*torch.Tensor{n.w1, n.b1, n.w2, n.b2} }

func (n *stepNet) stages() []torch.Stage {
	return []torch.Stage{torch.LinearStage(n.w1, n.b1), torch.ReLUStage(), torch.DropoutStage(0.25, true),
		torch.LinearStage(n.w2, n.b2)}
}

// values are every parameter's and state tensor's elements, for comparing two nets.
func (n *stepNet) values() [][]float32 {
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

// optimizers are one group's hyperparameters of every algorithm, as OptimizerArgs makers.
var stepOptimizers = map[string]func(n *stepNet) torch.OptimizerArgs{
	"sgd": func(n *stepNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs([]torch.SGDHyper{{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3}}, []int64{4}, n.params(), n.state)
	},
	"adam-fused": func(n *stepNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs([]torch.AdamHyper{{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Fused: true}}, []int64{4}, n.params(), n.state)
	},
	"adamw-foreach": func(n *stepNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs([]torch.AdamHyper{{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, DecoupledWeightDecay: true}}, []int64{4}, n.params(), n.state)
	},
	"rmsprop": func(n *stepNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs([]torch.RMSpropHyper{{LR: 1e-2, Alpha: 0.99, Eps: 1e-8, Momentum: 0.5, Centered: true}}, []int64{4}, n.params(), n.state)
	},
	"adagrad": func(n *stepNet) torch.OptimizerArgs {
		return torch.NewOptimizerArgs([]torch.AdagradHyper{{LR: 0.1, Eps: 1e-10}}, []int64{4}, n.params(), n.state)
	},
}

// TestTrainStepMatchesCalls: a TrainStep and the same step made call by call (ZeroGrads,
// Chain, the loss, Accumulate, Backward, OptimizerStep) give the same losses, sums,
// parameters and optimizer state to the bit, step after step, for every loss kind and
// optimizer algorithm — with Dropout drawing its masks from the same generator.
func TestTrainStepMatchesCalls(t *testing.T) {
	losses := map[string]struct {
		stage  func() torch.LossStage
		call   func(out, y *torch.Tensor) *torch.Tensor
		target func() *torch.Tensor
		out    int64
	}{
		"cross_entropy": {
			func() torch.LossStage { return torch.CrossEntropyStage(torch.CrossEntropyOptions{LabelSmoothing: 0.1}) },
			func(out, y *torch.Tensor) *torch.Tensor {
				return torch.CrossEntropy(out, y, torch.CrossEntropyOptions{LabelSmoothing: 0.1})
			},
			func() *torch.Tensor { return torch.Randint(0, 4, []int64{6}, torch.Int64, torch.CPU) }, 4,
		},
		"nll_loss": {
			func() torch.LossStage {
				return torch.NLLLossStage(torch.CrossEntropyOptions{Reduction: torch.ReductionSum})
			},
			func(out, y *torch.Tensor) *torch.Tensor {
				return torch.NLLLoss(out, y, torch.CrossEntropyOptions{Reduction: torch.ReductionSum})
			},
			func() *torch.Tensor { return torch.Randint(0, 4, []int64{6}, torch.Int64, torch.CPU) }, 4,
		},
		"mse_loss": {
			func() torch.LossStage { return torch.MSELossStage(torch.ReductionMean) },
			func(out, y *torch.Tensor) *torch.Tensor { return torch.MSELoss(out, y, torch.ReductionMean) },
			func() *torch.Tensor { return torch.Randn([]int64{6, 3}, torch.Float32, torch.CPU) }, 3,
		},
		"l1_loss": {
			func() torch.LossStage { return torch.L1LossStage(torch.ReductionSum) },
			func(out, y *torch.Tensor) *torch.Tensor { return torch.L1Loss(out, y, torch.ReductionSum) },
			func() *torch.Tensor { return torch.Randn([]int64{6, 3}, torch.Float32, torch.CPU) }, 3,
		},
		"smooth_l1_loss": {
			func() torch.LossStage { return torch.SmoothL1LossStage(torch.ReductionMean, 0.5) },
			func(out, y *torch.Tensor) *torch.Tensor { return torch.SmoothL1Loss(out, y, torch.ReductionMean, 0.5) },
			func() *torch.Tensor { return torch.Randn([]int64{6, 3}, torch.Float32, torch.CPU) }, 3,
		},
		"binary_cross_entropy_with_logits": {
			func() torch.LossStage {
				return torch.BCEWithLogitsStage(nil, torch.FromSlice([]float32{1, 2, 0.5}), torch.ReductionMean)
			},
			func(out, y *torch.Tensor) *torch.Tensor {
				return torch.BCEWithLogits(out, y, nil, torch.FromSlice([]float32{1, 2, 0.5}), torch.ReductionMean)
			},
			func() *torch.Tensor { return torch.Rand([]int64{6, 3}, torch.Float32, torch.CPU) }, 3,
		},
	}
	for lname, l := range losses {
		for oname, mk := range stepOptimizers {
			t.Run(lname+"/"+oname, func(t *testing.T) {
				fused, calls := newStepNet(7, l.out), newStepNet(7, l.out)
				defer freeAll(fused, calls)
				sumF := torch.FromSlice([]float64{0, 0, 0}).Escape()
				sumC := torch.FromSlice([]float64{0, 0, 0}).Escape()
				defer sumF.Free()
				defer sumC.Free()
				step := &torch.TrainStep{Stages: fused.stages(), Loss: l.stage(), Sums: sumF, SumFlags: torch.AccumulateTrack}
				for i := range 4 {
					torch.WithScope(func() {
						torch.ManualSeed(int64(100 + i))
						x := torch.Randn([]int64{6, 8}, torch.Float32, torch.CPU)
						y := l.target()
						// The fused step and the calls see the same Dropout draws.
						torch.ManualSeed(int64(200 + i))
						args := mk(fused)
						step.Optimizer = &args
						step.SumWeight, step.SumStep = 6, int64(i+1)
						lf := step.Run(x, y)

						torch.ManualSeed(int64(200 + i))
						torch.ZeroGrads(calls.params(), true)
						lc := l.call(torch.Chain(x, calls.stages()), y)
						torch.Accumulate(sumC, []*torch.Tensor{lc}, 6, int64(i+1), torch.AccumulateTrack)
						lc.Backward()
						ca := mk(calls)
						require.NoError(t, ca.Step())

						assert.Equal(t, lc.Float32s(), lf.Float32s(), "step %d: loss", i)
					})
				}
				assert.Equal(t, calls.values(), fused.values(), "parameters and optimizer state")
				assert.Equal(t, sumC.Float64s(), sumF.Float64s(), "running sums")
				for i, p := range fused.params() {
					torch.WithScope(func() {
						assert.Equal(t, calls.params()[i].Grad().Float32s(), p.Grad().Float32s(), "gradient %d", i)
					})
				}
			})
		}
	}
}

func freeAll(ns ...*stepNet) {
	for _, n := range ns {
		for _, p := range n.params() {
			p.Free()
		}
		for _, row := range n.state {
			for _, s := range row {
				if s != nil {
					s.Free()
				}
			}
		}
	}
}

// TestTrainStepWithoutOptimizer: with no Optimizer the step ends with the backward pass:
// gradients accumulate across runs, as loss.Backward() twice does.
func TestTrainStepWithoutOptimizer(t *testing.T) {
	n := newStepNet(3, 4)
	defer freeAll(n)
	step := &torch.TrainStep{Stages: n.stages()[:1], Loss: torch.MSELossStage(torch.ReductionSum)}
	torch.WithScope(func() {
		x := torch.Randn([]int64{2, 8}, torch.Float32, torch.CPU)
		y := torch.Zeros([]int64{2, 16}, torch.Float32, torch.CPU)
		step.Run(x, y)
		once := n.b1.Grad().Float32s()
		step.Run(x, y)
		twice := n.b1.Grad().Float32s()
		for i := range once {
			assert.Equal(t, 2*once[i], twice[i])
		}
	})
}

// TestTrainStepErrorsNameTheOp: a part of a step that fails panics with a *torch.Error
// naming its op, as the function would; the optimizer keeps the state it made.
func TestTrainStepErrorsNameTheOp(t *testing.T) {
	n := newStepNet(5, 4)
	defer freeAll(n)
	cases := []struct {
		name string
		x, y func() *torch.Tensor
		loss torch.LossStage
		op   string
	}{
		{"input width", func() *torch.Tensor { return torch.Randn([]int64{3, 7}, torch.Float32, torch.CPU) },
			func() *torch.Tensor { return torch.Zeros([]int64{3}, torch.Int64, torch.CPU) },
			torch.CrossEntropyStage(torch.CrossEntropyOptions{}), "linear"},
		{"target length", func() *torch.Tensor { return torch.Randn([]int64{3, 8}, torch.Float32, torch.CPU) },
			func() *torch.Tensor { return torch.Zeros([]int64{5}, torch.Int64, torch.CPU) },
			torch.CrossEntropyStage(torch.CrossEntropyOptions{}), "cross_entropy"},
		{"target shape", func() *torch.Tensor { return torch.Randn([]int64{3, 8}, torch.Float32, torch.CPU) },
			func() *torch.Tensor { return torch.Zeros([]int64{3, 2}, torch.Float32, torch.CPU) },
			torch.MSELossStage(torch.ReductionMean), "mse_loss"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			torch.WithScope(func() {
				args := stepOptimizers["adam-fused"](n)
				step := &torch.TrainStep{Stages: n.stages(), Loss: c.loss, Optimizer: &args}
				err := panicErr(func() { step.Run(c.x(), c.y()) })
				var te *torch.Error
				require.True(t, errors.As(err, &te), "a *torch.Error, got %v", err)
				assert.Equal(t, c.op, te.Op, "%v", err)
			})
		})
	}
	err := panicErr(func() { (&torch.TrainStep{}).Run(nil, nil) })
	assert.ErrorContains(t, err, "LossStage")
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

// TestTrainStepRunBatches: a run of batches in one call (RunBatches) gives the losses,
// sums, parameters and optimizer state of slicing each batch and calling Run, to the
// bit, for consecutive rows (Narrow) and for a shuffled order (IndexSelect), with
// Dropout drawing the same masks.
func TestTrainStepRunBatches(t *testing.T) {
	starts, sizes := []int64{0, 6, 12, 18}, []int64{6, 6, 6, 2}
	for oname, mk := range stepOptimizers {
		for _, shuffled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shuffled=%v", oname, shuffled), func(t *testing.T) {
				run, calls := newStepNet(11, 4), newStepNet(11, 4)
				defer freeAll(run, calls)
				torch.ManualSeed(5)
				x := torch.Randn([]int64{20, 8}, torch.Float32, torch.CPU).Escape()
				y := torch.Randint(0, 4, []int64{20}, torch.Int64, torch.CPU).Escape()
				var order *torch.Tensor
				if shuffled {
					order = torch.FromSlice([]int64{3, 17, 0, 9, 12, 5, 19, 1, 8, 14, 2, 11, 16, 4, 7, 13, 6, 18, 10, 15}).Escape()
					defer order.Free()
				}
				defer x.Free()
				defer y.Free()
				sumR := torch.FromSlice([]float64{0, 0, 0}).Escape()
				sumC := torch.FromSlice([]float64{0, 0, 0}).Escape()
				defer sumR.Free()
				defer sumC.Free()

				var lastR, lastC []float32
				torch.WithScope(func() {
					torch.ManualSeed(300)
					args := mk(run)
					step := &torch.TrainStep{Stages: run.stages(), Loss: torch.CrossEntropyStage(torch.CrossEntropyOptions{}),
						Sums: sumR, SumStep: 1, SumFlags: torch.AccumulateTrack, Optimizer: &args}
					b := &torch.Batches{X: x, Y: y, Order: order, Starts: starts, Sizes: sizes}
					lastR = step.RunBatches(b).Float32s()
					assert.Equal(t, 4, b.Done)
				})
				torch.WithScope(func() {
					torch.ManualSeed(300)
					step := &torch.TrainStep{Stages: calls.stages(), Loss: torch.CrossEntropyStage(torch.CrossEntropyOptions{}),
						Sums: sumC, SumFlags: torch.AccumulateTrack}
					for i := range starts {
						xb, yb := x.Narrow(0, starts[i], sizes[i]), y.Narrow(0, starts[i], sizes[i])
						if order != nil {
							idx := order.Narrow(0, starts[i], sizes[i])
							xb, yb = x.IndexSelect(0, idx), y.IndexSelect(0, idx)
						}
						args := mk(calls)
						step.Optimizer = &args
						step.SumWeight, step.SumStep = float64(sizes[i]), int64(i+1)
						lastC = step.Run(xb, yb).Float32s()
					}
				})
				assert.Equal(t, lastC, lastR, "last loss")
				assert.Equal(t, calls.values(), run.values(), "parameters and optimizer state")
				assert.Equal(t, sumC.Float64s(), sumR.Float64s(), "running sums")
			})
		}
	}
}

// TestTrainStepRunBatchesErrors: a batch that cannot be sliced, or a step that fails,
// stops the run with a *torch.Error naming it, and Done counts the steps before it.
func TestTrainStepRunBatchesErrors(t *testing.T) {
	n := newStepNet(5, 4)
	defer freeAll(n)
	torch.WithScope(func() {
		x := torch.Randn([]int64{10, 8}, torch.Float32, torch.CPU)
		y := torch.Randint(0, 4, []int64{10}, torch.Int64, torch.CPU)
		args := stepOptimizers["sgd"](n)
		step := &torch.TrainStep{Stages: n.stages(), Loss: torch.CrossEntropyStage(torch.CrossEntropyOptions{}), Optimizer: &args}
		b := &torch.Batches{X: x, Y: y, Starts: []int64{0, 4, 8}, Sizes: []int64{4, 4, 4}}
		err := panicErr(func() { step.RunBatches(b) })
		var te *torch.Error
		require.True(t, errors.As(err, &te), "a *torch.Error, got %v", err)
		assert.Equal(t, "batch", te.Op, "%v", err)
		assert.Equal(t, 2, b.Done)

		bad := torch.Zeros([]int64{10}, torch.Float32, torch.CPU) // a float target for cross_entropy
		b = &torch.Batches{X: x, Y: bad, Starts: []int64{0}, Sizes: []int64{5}}
		err = panicErr(func() { step.RunBatches(b) })
		require.True(t, errors.As(err, &te), "a *torch.Error, got %v", err)
		assert.Equal(t, "cross_entropy", te.Op, "%v", err)
		assert.Equal(t, 0, b.Done)

		err = panicErr(func() { step.RunBatches(&torch.Batches{X: x, Y: y, Starts: []int64{0}}) })
		assert.ErrorContains(t, err, "1 starts and 0 sizes")
		err = panicErr(func() { step.RunBatches(&torch.Batches{X: x, Starts: []int64{0}, Sizes: []int64{1}}) })
		assert.ErrorContains(t, err, "X and Y")
	})
}
