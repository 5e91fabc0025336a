package optim_test

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

// Minimise (w - 3)² with AdamW, clipping the gradient norm and annealing the learning
// rate every step.
func Example() {
	w := torch.FromSlice([]float32{0}).SetRequiresGrad(true).Escape()
	opt, err := optim.NewAdamW([]*torch.Tensor{w}, optim.AdamOptions{LR: 0.1})
	if err != nil {
		panic(err)
	}
	sched, err := optim.NewCosineAnnealingLR(opt, 100, 0)
	if err != nil {
		panic(err)
	}
	for range 100 {
		torch.WithScope(func() {
			opt.ZeroGrad(true)
			w.SubScalar(3).Square().Sum().Backward()
			if _, err := optim.ClipGradNorm(opt.Params(), 1, 2, false); err != nil {
				panic(err)
			}
			if err := opt.Step(); err != nil {
				panic(err)
			}
			sched.Step()
		})
	}
	fmt.Printf("w = %.2f, lr = %.3g\n", w.Item(), opt.ParamGroups()[0].LR)
	// Output: w = 2.98, lr = 0
}

// Parameter groups take their own options; the rest come from the optimizer's.
func ExampleNewSGDGroups() {
	backbone := []*torch.Tensor{torch.Zeros([]int64{4}, torch.Float32, torch.CPU).Escape()}
	head := []*torch.Tensor{torch.Zeros([]int64{2}, torch.Float32, torch.CPU).Escape()}
	opt, err := optim.NewSGDGroups([]optim.Group{
		{Params: backbone, Options: map[string]any{"lr": 0.001}},
		{Params: head},
	}, optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	if err != nil {
		panic(err)
	}
	for i, g := range opt.ParamGroups() {
		fmt.Println(i, g.LR, g.Float("momentum", 0))
	}
	// Output:
	// 0 0.001 0.9
	// 1 0.1 0.9
}

func ExampleNewOneCycleLR() {
	p := []*torch.Tensor{torch.Zeros([]int64{1}, torch.Float32, torch.CPU).Escape()}
	opt, _ := optim.NewSGD(p, optim.SGDOptions{LR: 0.1, Momentum: 0.9})
	sched, err := optim.NewOneCycleLR(opt, []float64{1}, 10, optim.OneCycleOptions{})
	if err != nil {
		panic(err)
	}
	for range 5 {
		fmt.Printf("%.3f ", sched.LastLR()[0])
		sched.Step()
	}
	fmt.Println()
	// Output: 0.040 0.520 1.000 0.950 0.812
}
