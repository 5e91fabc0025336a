package nn

import (
	"fmt"
	"strings"

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
	m *torch.JITModule
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
	m, err := torch.LoadJIT(path, dev)
	if err != nil {
		return nil, fmt.Errorf("nn: load TorchScript %s: %w", path, err)
	}
	nts, err := m.Tensors()
	if err != nil {
		m.Free()
		return nil, fmt.Errorf("nn: load TorchScript %s: %w", path, err)
	}
	s := &ScriptModule{m: m}
	s.eval = !m.Training()
	for _, nt := range nts {
		t := nt.Tensor
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
	if on := s.Training(); s.m.Training() != on {
		s.m.SetTraining(on)
	}
}

// Forward runs the script module's forward on x; it must return one tensor.
func (s *ScriptModule) Forward(x *torch.Tensor) *torch.Tensor {
	s.sync()
	return s.m.Forward(x)
}

// Save writes the module, with its current parameters and training flag, in
// torch.jit.save's format: Python's torch.jit.load reads it.
func (s *ScriptModule) Save(path string) (err error) {
	defer torch.Recover(&err, "nn: save TorchScript")
	s.sync()
	if err := s.m.Save(path); err != nil {
		return fmt.Errorf("nn: save TorchScript %s: %w", path, err)
	}
	return nil
}

func (s *ScriptModule) free() {
	s.m.Free()
}
