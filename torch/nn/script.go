package nn

import (
	"fmt"
	"strings"

	"github.com/gotrain/gotrain/cgotorch"
	"github.com/gotrain/gotrain/torch"
)

// ScriptModule is a TorchScript module saved by Python's torch.jit.save, loaded with
// LoadScript. Its parameters and buffers are registered under the script module's own
// names (in a tree of submodules mirroring it), so NamedParameters, StateDict,
// LoadStateDict, ToDevice and optimizers work on it as on any Module; the tensors are
// the script module's own, so training them trains it. SetTraining reaches the script
// module at its next Forward or Save.
type ScriptModule struct {
	Base
	h cgotorch.Module
}

// scriptChild is a submodule of a ScriptModule: a holder of names, never run on its own.
type scriptChild struct{ Base }

// Forward panics: the script module runs its submodules itself.
func (*scriptChild) Forward(*torch.Tensor) *torch.Tensor {
	panic("nn: a submodule of a ScriptModule cannot run on its own; call the ScriptModule's Forward")
}

// LoadScript loads a module written by torch.jit.save (or ScriptModule.Save) onto dev.
// Free releases it.
func LoadScript(path string, dev torch.Device) (*ScriptModule, error) {
	h, err := cgotorch.JitLoad(path, int(dev.Type), dev.Index)
	if err != nil {
		return nil, fmt.Errorf("nn: load TorchScript %s: %w", path, err)
	}
	nts, err := cgotorch.JitNamedTensors(h)
	if err != nil {
		cgotorch.JitFree(h)
		return nil, fmt.Errorf("nn: load TorchScript %s: %w", path, err)
	}
	s := &ScriptModule{h: h}
	s.eval = !cgotorch.JitIsTraining(h)
	for _, nt := range nts {
		t := torch.FromHandle(nt.T).Escape()
		parts := strings.Split(nt.Name, ".")
		b := &s.Base
		for _, p := range parts[:len(parts)-1] {
			c := b.Child(p)
			if c == nil {
				c = b.RegisterModule(p, &scriptChild{Base{eval: s.eval}})
			}
			b = c.ModuleBase()
		}
		if nt.Buffer {
			b.buffers = append(b.buffers, NamedTensor{parts[len(parts)-1], t})
		} else {
			b.params = append(b.params, NamedTensor{parts[len(parts)-1], t})
		}
	}
	return s, nil
}

// sync passes the Go-side training flag to the script module.
func (s *ScriptModule) sync() {
	if on := s.Training(); cgotorch.JitIsTraining(s.handle()) != on {
		if err := cgotorch.JitTrain(s.h, on); err != nil {
			panic(&torch.Error{Op: "train", Msg: err.Error()})
		}
	}
}

func (s *ScriptModule) handle() cgotorch.Module {
	if s.h == nil {
		panic(&torch.Error{Op: "script module", Msg: "used after Free"})
	}
	return s.h
}

// Forward runs the script module's forward on x; it must return one tensor.
func (s *ScriptModule) Forward(x *torch.Tensor) *torch.Tensor {
	s.sync()
	h, err := cgotorch.JitForward(s.h, x.Handle())
	if err != nil {
		panic(&torch.Error{Op: "script forward", Msg: err.Error()})
	}
	return torch.FromHandle(h)
}

// Save writes the module, with its current parameters and training flag, in
// torch.jit.save's format: Python's torch.jit.load reads it.
func (s *ScriptModule) Save(path string) (err error) {
	defer torch.Recover(&err, "nn: save TorchScript")
	s.sync()
	if err := cgotorch.JitSave(s.h, path); err != nil {
		return fmt.Errorf("nn: save TorchScript %s: %w", path, err)
	}
	return nil
}

func (s *ScriptModule) free() {
	if s.h != nil {
		cgotorch.JitFree(s.h)
		s.h = nil
	}
}
