package models_test

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

func ExampleResNet18() {
	model := models.ResNet18(1000)
	defer nn.Free(model)
	nn.SetTraining(model, false)
	fmt.Println(nn.NumParameters(model), "parameters")
	torch.WithScope(func() {
		torch.NoGrad(func() {
			y := model.Forward(torch.Randn([]int64{1, 3, 64, 64}, torch.Float32, torch.CPU))
			fmt.Println(y.Shape())
		})
	})
	// Output:
	// 11689512 parameters
	// [1 1000]
}
