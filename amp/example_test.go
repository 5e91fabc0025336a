package amp_test

import (
	"fmt"

	"github.com/gotrain/gotrain/amp"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

// One mixed-precision training step in PyTorch's order. The injected inf gradient makes
// the scaler skip the optimizer step and halve the scale.
func ExampleGradScaler() {
	w := torch.FromSlice([]float32{1, 2}).SetRequiresGrad(true).Escape()
	opt, _ := optim.NewSGD([]*torch.Tensor{w}, optim.SGDOptions{LR: 0.1})
	scaler, err := amp.NewGradScaler(amp.ScalerOptions{Enabled: true})
	if err != nil {
		panic(err)
	}
	for _, x := range [][]float32{{1, 1}, {float32(1e38), 1}} {
		torch.WithScope(func() {
			opt.ZeroGrad(true)
			var loss *torch.Tensor
			amp.Autocast(torch.CPU, torch.BFloat16, func() {
				loss = w.Mul(torch.FromSlice(x)).Sum()
			})
			scaler.ScaleLoss(loss).Backward()
			if err := scaler.Unscale(opt); err != nil {
				panic(err)
			}
			if _, err := optim.ClipGradNorm(opt.Params(), 1, 2, false); err != nil {
				panic(err)
			}
			stepped, err := scaler.Step(opt)
			if err != nil {
				panic(err)
			}
			if err := scaler.Update(); err != nil {
				panic(err)
			}
			fmt.Println("stepped:", stepped, "scale:", scaler.ScaleValue())
		})
	}
	// Output:
	// stepped: true scale: 65536
	// stepped: false scale: 32768
}

func ExampleAutocast() {
	x := torch.Ones([]int64{2, 3}, torch.Float32, torch.CPU)
	w := torch.Ones([]int64{4, 3}, torch.Float32, torch.CPU)
	amp.Autocast(torch.CPU, torch.BFloat16, func() {
		fmt.Println(torch.Linear(x, w, nil).DType())
	})
	fmt.Println(torch.Linear(x, w, nil).DType())
	// Output:
	// bfloat16
	// float32
}
