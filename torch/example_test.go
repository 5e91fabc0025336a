package torch_test

import (
	"errors"
	"fmt"

	"github.com/gotrain/gotrain/torch"
)

// Tensors come from Go slices and go back to them; ops broadcast as in PyTorch.
func Example_tensors() {
	torch.WithScope(func() {
		x := torch.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
		y := x.MulScalar(10).Add(torch.FromSlice([]float32{1, 2, 3}))
		fmt.Println(y.Shape(), y.Float32s())
		fmt.Println(x.SumDims([]int64{1}, false).Float32s(), x.DType(), x.Device())
	})
	// Output:
	// [2 3] [11 22 33 41 52 63]
	// [6 15] float32 cpu
}

// A scope frees every tensor made while it is open, unless Keep moves one out.
func Example_scopes() {
	before := torch.LiveTensors()
	var kept *torch.Tensor
	torch.WithScope(func() {
		s := torch.NewScope()
		a := torch.Ones([]int64{4}, torch.Float32, torch.CPU)
		b := a.AddScalar(1).Exp().Log() // three intermediates
		kept = s.Keep(b)                // into WithScope's scope
		s.Close()
		fmt.Println("alive after the inner scope:", torch.LiveTensors()-before)
		fmt.Println(kept.Float32s())
	})
	fmt.Println("alive after WithScope:", torch.LiveTensors()-before)
	// Output:
	// alive after the inner scope: 1
	// [2 2 2 2]
	// alive after WithScope: 0
}

// Ops panic with a *torch.Error on misuse; Recover turns it into an error at a boundary
// that returns errors, and errors.Is classifies it.
func Example_errorRule() {
	add := func(a, b *torch.Tensor) (sum *torch.Tensor, err error) {
		defer torch.Recover(&err, "adding")
		return a.Add(b), nil
	}
	torch.WithScope(func() {
		_, err := add(torch.Zeros([]int64{2}, torch.Float32, torch.CPU), torch.Zeros([]int64{3}, torch.Float32, torch.CPU))
		var te *torch.Error
		fmt.Println(errors.As(err, &te), te.Op, errors.Is(err, torch.ErrInvalidArgument))
	})
	// Output:
	// true add true
}

// A step written as eager code is recorded, and replayed in one call once two
// recordings agree, with the same results.
func ExampleReplayer() {
	torch.WithScope(func() {
		w := torch.FromSlice([]float32{1, 2, 3, 4}, 2, 2)
		var r torch.Replayer
		defer r.Free()
		for i := range 4 {
			x := torch.FromSlice([]float32{float32(i), 1}, 1, 2)
			outs, replayed := r.Step([]*torch.Tensor{x}, nil, 0, func() []*torch.Tensor {
				return []*torch.Tensor{torch.Linear(x, w, nil).ReLU().Sum()}
			})
			fmt.Println(outs[0].Item(), replayed)
		}
	})
	// Output:
	// 6 false
	// 10 false
	// 14 true
	// 18 true
}
