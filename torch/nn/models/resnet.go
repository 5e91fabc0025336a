package models

// ResNet-18 (He et al., 2015) built from gotrain's torch/nn layers with torchvision's
// structure and parameter names: its state dict has exactly the keys and shapes of
// torchvision.models.resnet18(), so torchvision's weights load into it.

import (
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// BasicBlock is torchvision's BasicBlock: two 3×3 convolutions with batch norm and a
// residual connection, projected by Downsample when the shape changes.
type BasicBlock struct {
	nn.Base
	Conv1, Conv2 *nn.Conv2d
	BN1, BN2     *nn.BatchNorm
	Downsample   *nn.Sequential // nil when the input is added unchanged
}

// NewBasicBlock returns a block from in to out channels whose first convolution has the
// given stride.
func NewBasicBlock(in, out, stride int64) *BasicBlock {
	b := &BasicBlock{}
	b.Conv1 = nn.Register(&b.Base, "conv1", resnetConv(in, out, 3, stride, 1))
	b.BN1 = nn.Register(&b.Base, "bn1", nn.NewBatchNorm2d(out))
	nn.Register(&b.Base, "relu", nn.NewReLU())
	b.Conv2 = nn.Register(&b.Base, "conv2", resnetConv(out, out, 3, 1, 1))
	b.BN2 = nn.Register(&b.Base, "bn2", nn.NewBatchNorm2d(out))
	if stride != 1 || in != out {
		b.Downsample = nn.Register(&b.Base, "downsample", nn.NewSequential(resnetConv(in, out, 1, stride, 0), nn.NewBatchNorm2d(out)))
	}
	return b
}

// Forward returns relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
//
// It keeps what torchvision's block keeps: the batch norms' outputs, which autograd does
// not save, are freed as soon as the ReLU has read them (torchvision's ReLU(inplace=True)
// overwrites them), the residual is added in place as torchvision's `out += identity`, and
// the rest of the block's temporaries go when it returns (torch.Local).
func (b *BasicBlock) Forward(x *torch.Tensor) *torch.Tensor {
	return torch.Local(func() *torch.Tensor {
		bn := b.BN1.Forward(b.Conv1.Forward(x))
		out := bn.ReLU()
		bn.Free()
		out = b.BN2.Forward(b.Conv2.Forward(out))
		identity := x
		if b.Downsample != nil {
			identity = b.Downsample.Forward(x)
		}
		out.AddInPlace(identity, 1)
		return out.ReLU()
	})
}

// conv is a bias-free convolution; New re-initialises its weight.
func resnetConv(in, out, k, stride, pad int64) *nn.Conv2d {
	return nn.NewConv2d(in, out, k, nn.Stride(stride), nn.Padding(pad), nn.NoBias())
}

// ResNet is torchvision's ResNet with BasicBlocks, for 3-channel images.
type ResNet struct {
	nn.Base
	Conv1                          *nn.Conv2d
	BN1                            *nn.BatchNorm
	MaxPool                        *nn.MaxPool2d
	Layer1, Layer2, Layer3, Layer4 *nn.Sequential
	AvgPool                        *nn.AdaptiveAvgPool2d
	FC                             *nn.Linear
}

// ResNet18 returns torchvision.models.resnet18(num_classes=numClasses), initialised as
// torchvision does, drawing from torch's default generator in the same order: after the
// same torch.ManualSeed it starts with torchvision's weights.
func ResNet18(numClasses int64) *ResNet { return NewResNet([4]int{2, 2, 2, 2}, numClasses) }

// NewResNet returns a ResNet with the given number of BasicBlocks in each of its four stages
// ({2, 2, 2, 2} is ResNet-18, {3, 4, 6, 3} ResNet-34).
func NewResNet(blocks [4]int, numClasses int64) *ResNet {
	r := &ResNet{}
	r.Conv1 = nn.Register(&r.Base, "conv1", resnetConv(3, 64, 7, 2, 3))
	r.BN1 = nn.Register(&r.Base, "bn1", nn.NewBatchNorm2d(64))
	nn.Register(&r.Base, "relu", nn.NewReLU())
	r.MaxPool = nn.Register(&r.Base, "maxpool", nn.NewMaxPool2d(3, nn.Stride(2), nn.Padding(1)))
	in := int64(64)
	layer := func(out int64, n int, stride int64) *nn.Sequential {
		s := nn.NewSequential(NewBasicBlock(in, out, stride))
		for range n - 1 {
			s.Append(NewBasicBlock(out, out, 1))
		}
		in = out
		return s
	}
	r.Layer1 = nn.Register(&r.Base, "layer1", layer(64, blocks[0], 1))
	r.Layer2 = nn.Register(&r.Base, "layer2", layer(128, blocks[1], 2))
	r.Layer3 = nn.Register(&r.Base, "layer3", layer(256, blocks[2], 2))
	r.Layer4 = nn.Register(&r.Base, "layer4", layer(512, blocks[3], 2))
	r.AvgPool = nn.Register(&r.Base, "avgpool", nn.NewAdaptiveAvgPool2d(1, 1))
	r.FC = nn.Register(&r.Base, "fc", nn.NewLinear(512, numClasses))
	// torchvision re-initialises every convolution after building the network, in
	// module order: kaiming_normal_(mode="fan_out", nonlinearity="relu").
	for _, m := range nn.NamedModules(r) {
		if c, ok := m.Module.(*nn.Conv2d); ok {
			nn.InitKaimingNormal(c.Weight, true)
		}
	}
	return r
}

// Forward maps images [N, 3, H, W] to logits [N, numClasses].
func (r *ResNet) Forward(x *torch.Tensor) *torch.Tensor {
	// The stem's batch norm output goes once ReLU and max pooling have read it.
	x = torch.Local(func() *torch.Tensor { return r.MaxPool.Forward(r.BN1.Forward(r.Conv1.Forward(x)).ReLU()) })
	x = r.Layer4.Forward(r.Layer3.Forward(r.Layer2.Forward(r.Layer1.Forward(x))))
	return r.FC.Forward(r.AvgPool.Forward(x).Flatten(1, -1))
}
