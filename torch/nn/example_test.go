package nn_test

import (
	"fmt"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Classifier is a model written as a Go struct: it embeds nn.Base and registers its
// layers under the names its PyTorch twin would use.
type Classifier struct {
	nn.Base
	fc1, fc2 *nn.Linear
	drop     *nn.Dropout
}

// NewClassifier builds the model; PyTorch's twin would say self.fc1 = nn.Linear(784, 128).
func NewClassifier() *Classifier {
	c := &Classifier{}
	c.fc1 = nn.Register(&c.Base, "fc1", nn.NewLinear(784, 128))
	c.drop = nn.Register(&c.Base, "drop", nn.NewDropout(0.2))
	c.fc2 = nn.Register(&c.Base, "fc2", nn.NewLinear(128, 10))
	return c
}

// Forward maps images [N, 1, 28, 28] to logits [N, 10].
func (c *Classifier) Forward(x *torch.Tensor) *torch.Tensor {
	return c.fc2.Forward(c.drop.Forward(c.fc1.Forward(x.Flatten(1, -1)).ReLU()))
}

// Example_module defines a model, trains one step with plain SGD and lists its state
// dict.
func Example_module() {
	torch.ManualSeed(0)
	model := NewClassifier()
	defer nn.Free(model)
	lossFn := &nn.CrossEntropyLoss{}

	torch.WithScope(func() {
		x := torch.Randn([]int64{8, 1, 28, 28}, torch.Float32, torch.CPU)
		y := torch.Randint(0, 10, []int64{8}, torch.Int64, torch.CPU)
		loss := lossFn.Forward(model.Forward(x), y)
		loss.Backward()
		torch.NoGrad(func() {
			for _, p := range nn.Parameters(model) {
				p.SubInPlace(p.Grad(), 0.1)
			}
		})
		nn.ZeroGrad(model)

		for k, v := range nn.StateDict(model).All() {
			fmt.Println(k, v.(*torch.Tensor).Shape())
		}
	})
	fmt.Println(nn.NumParameters(model), "parameters")
	// Output:
	// fc1.weight [128 784]
	// fc1.bias [128]
	// fc2.weight [10 128]
	// fc2.bias [10]
	// 101770 parameters
}

// ExampleSequential builds nn.Sequential(Conv2d, BatchNorm2d, ReLU, ...): its stages
// are named "0", "1", ..., as in PyTorch.
func ExampleSequential() {
	model := nn.NewSequential(
		nn.NewConv2d(3, 16, 3, nn.Padding(1), nn.NoBias()),
		nn.NewBatchNorm2d(16),
		nn.NewReLU(),
		nn.NewAdaptiveAvgPool2d(1, 1),
		nn.NewFlatten(),
		nn.NewLinear(16, 4),
	)
	defer nn.Free(model)
	for _, b := range nn.NamedBuffers(model) {
		fmt.Println(b.Name)
	}
	torch.WithScope(func() {
		y := model.Forward(torch.Randn([]int64{2, 3, 8, 8}, torch.Float32, torch.CPU))
		fmt.Println(y.Shape())
	})
	// Output:
	// 1.running_mean
	// 1.running_var
	// 1.num_batches_tracked
	// [2 4]
}

// ExampleLoadStateDict copies one model's weights into another, as
// model.load_state_dict(sd, strict=True). To load a file written by torch.save, read it
// with checkpoint.Read and convert it with torch.FromCheckpoint first.
func ExampleLoadStateDict() {
	src := nn.NewLinear(4, 2)
	defer nn.Free(src)
	dst := nn.NewLinear(4, 2)
	defer nn.Free(dst)
	torch.WithScope(func() {
		if err := nn.LoadStateDict(dst, nn.StateDict(src), true); err != nil {
			fmt.Println(err)
		}
		fmt.Println(fmt.Sprint(src.Weight.Float32s()) == fmt.Sprint(dst.Weight.Float32s()))

		sd := checkpoint.NewOrderedDict()
		sd.Set("weight", torch.Zeros([]int64{3, 4}, torch.Float32, torch.CPU))
		fmt.Println(nn.LoadStateDict(dst, sd, true))
	})
	// Output:
	// true
	// nn: error(s) in loading state_dict:
	// 	Missing key(s) in state_dict: "bias".
	// 	size mismatch for weight: copying a param with shape torch.Size([3, 4]) from checkpoint, the shape in current model is torch.Size([2, 4]).
}
