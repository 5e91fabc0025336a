package torch

import "github.com/gotrain/gotrain/cgotorch"

// JITModule is a TorchScript module (torch::jit::Module) loaded from a file torch.jit.save
// wrote. Package nn's ScriptModule builds a Module on it; most code wants that instead.
type JITModule struct{ h cgotorch.Module }

// JITTensor is one parameter or buffer of a JITModule, by its state-dict name.
type JITTensor struct {
	Name   string
	Tensor *Tensor // owned by the caller, aliasing the module's own tensor
	Buffer bool
}

// LoadJIT loads a module saved by torch.jit.save onto dev.
func LoadJIT(path string, dev Device) (*JITModule, error) {
	h, err := cgotorch.JitLoad(path, int(dev.Type), dev.Index)
	if err != nil {
		return nil, opErr("jit load "+path, err)
	}
	return &JITModule{h: h}, nil
}

func (m *JITModule) handle() cgotorch.Module {
	if m == nil || m.h == nil {
		panic(&Error{Op: "script module", Msg: "used after Free"})
	}
	return m.h
}

// Tensors lists the module's parameters and buffers in state_dict order (each module's
// parameters, then its buffers, then its children, pre-order).
func (m *JITModule) Tensors() ([]JITTensor, error) {
	nts, err := cgotorch.JitNamedTensors(m.handle())
	if err != nil {
		return nil, opErr("jit named tensors", err)
	}
	out := make([]JITTensor, len(nts))
	for i, nt := range nts {
		out[i] = JITTensor{Name: nt.Name, Tensor: owned(nt.T), Buffer: nt.Buffer}
	}
	return out, nil
}

// Forward calls the module's forward with one tensor; it must return a tensor.
func (m *JITModule) Forward(x *Tensor) *Tensor {
	return adopt("script forward", cgotorch.JitForward(m.handle(), x.handle()))
}

// Training reports the module's training flag.
func (m *JITModule) Training() bool { return cgotorch.JitIsTraining(m.handle()) }

// SetTraining sets the training flag of the module and all its submodules.
func (m *JITModule) SetTraining(on bool) { check("train", cgotorch.JitTrain(m.handle(), on)) }

// Save writes the module in torch.jit.save's format.
func (m *JITModule) Save(path string) error {
	return wrapErr("jit save "+path, cgotorch.JitSave(m.handle(), path))
}

// Free releases the module (its tensors live while other handles to them do).
func (m *JITModule) Free() {
	if m != nil && m.h != nil {
		cgotorch.JitFree(m.h)
		m.h = nil
	}
}
