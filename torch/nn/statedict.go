package nn

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
)

// stateEntries lists the state dict's entries in PyTorch's order: for each module,
// pre-order, its parameters and then its persistent buffers.
func stateEntries(m Module) []NamedTensor {
	var out []NamedTensor
	walk(m, "", func(prefix string, m Module) {
		b := m.ModuleBase()
		// Only buffers are non-persistent; a parameter cannot share a buffer's name.
		for _, p := range slices.Concat(b.params, b.buffers) {
			if !b.nonPersistent[p.Name] {
				out = append(out, NamedTensor{prefix + p.Name, p.Tensor})
			}
		}
	})
	return out
}

// StateTensors returns the state dict's entries as m's own tensors, in PyTorch's order:
// a parameter registered under two names (tied weights) is listed under each, as the
// same *torch.Tensor, so a caller can tell ties apart (save_pretrained writes one of
// them).
func StateTensors(m Module) []NamedTensor { return stateEntries(m) }

// StateDict returns m.state_dict(): an OrderedDict from dotted name to a detached alias
// of each parameter and persistent buffer (sharing storage, owned by the current scope),
// in PyTorch's order. Pass it through torch.ToCheckpoint to write it with checkpoint.Write.
func StateDict(m Module) *checkpoint.Dict {
	sd := checkpoint.NewOrderedDict()
	for _, e := range stateEntries(m) {
		sd.Set(e.Name, e.Tensor.Detach())
	}
	return sd
}

// ShapeMismatch is a state-dict entry whose shape differs from the model's.
type ShapeMismatch struct {
	Key         string
	Checkpoint  []int64
	Model       []int64
	Description string // set instead of the shapes when the value is not a tensor
}

// StateDictError reports what LoadStateDict could not match, by key.
type StateDictError struct {
	Missing    []string // in the model, not in the state dict
	Unexpected []string // in the state dict, not in the model
	Mismatched []ShapeMismatch
}

func quoteAll(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, ", ")
}

func shapeStr(s []int64) string {
	return "torch.Size(" + strings.ReplaceAll(fmt.Sprint(s), " ", ", ") + ")"
}

// Error formats the problems as PyTorch's load_state_dict does.
func (e *StateDictError) Error() string {
	var sb strings.Builder
	sb.WriteString("nn: error(s) in loading state_dict:")
	if len(e.Missing) > 0 {
		sb.WriteString("\n\tMissing key(s) in state_dict: " + quoteAll(e.Missing) + ".")
	}
	if len(e.Unexpected) > 0 {
		sb.WriteString("\n\tUnexpected key(s) in state_dict: " + quoteAll(e.Unexpected) + ".")
	}
	for _, m := range e.Mismatched {
		if m.Description != "" {
			fmt.Fprintf(&sb, "\n\twhile copying the parameter named %q: %s.", m.Key, m.Description)
			continue
		}
		fmt.Fprintf(&sb, "\n\tsize mismatch for %s: copying a param with shape %s from checkpoint, the shape in current model is %s.",
			m.Key, shapeStr(m.Checkpoint), shapeStr(m.Model))
	}
	return sb.String()
}

// LoadStateDict copies the tensors of sd (as model.load_state_dict(sd, strict)) into m's
// parameters and buffers in place, without recording gradients, converting dtype and
// device as needed. Values are *torch.Tensor (from torch.FromCheckpoint) or
// *checkpoint.Tensor. Keys in sd that are not strings count as unexpected.
//
// Entries whose shape does not match are never copied and always reported, as in
// PyTorch. With strict, missing and unexpected keys are errors too; without it, every
// entry that matches is loaded and only shape mismatches make an error. The error is a
// *StateDictError naming every key involved.
func LoadStateDict(m Module, sd *checkpoint.Dict, strict bool) (err error) {
	defer torch.Recover(&err, "load_state_dict")
	serr := &StateDictError{}
	entries := stateEntries(m)
	known := make(map[string]bool, len(entries))
	torch.WithScope(func() {
		torch.NoGrad(func() {
			for _, e := range entries {
				known[e.Name] = true
				v, ok := sd.Get(e.Name)
				if !ok {
					serr.Missing = append(serr.Missing, e.Name)
					continue
				}
				src, made, err := loadValue(v)
				if err != nil {
					serr.Mismatched = append(serr.Mismatched, ShapeMismatch{Key: e.Name, Description: err.Error()})
					continue
				}
				if want, got := e.Tensor.Shape(), src.Shape(); !slices.Equal(want, got) {
					serr.Mismatched = append(serr.Mismatched, ShapeMismatch{Key: e.Name, Checkpoint: got, Model: want})
				} else {
					e.Tensor.CopyFrom(src, false)
				}
				if made {
					// A tensor made from the checkpoint's bytes goes as soon as it is
					// copied: loading holds the model and one tensor more, not two models.
					src.Free()
				}
			}
		})
	})
	for k := range sd.All() {
		if s, ok := k.(string); !ok || !known[s] {
			serr.Unexpected = append(serr.Unexpected, fmt.Sprint(k))
		}
	}
	if len(serr.Mismatched) > 0 || (strict && (len(serr.Missing) > 0 || len(serr.Unexpected) > 0)) {
		return serr
	}
	return nil
}

// loadValue is v as a tensor, and whether it was made here (from a checkpoint
// tensor's bytes) rather than given.
func loadValue(v any) (*torch.Tensor, bool, error) {
	switch x := v.(type) {
	case *torch.Tensor:
		return x, false, nil
	case *checkpoint.Tensor:
		t, err := torch.TensorFromCheckpoint(x, torch.CPU)
		return t, err == nil, err
	}
	return nil, false, fmt.Errorf("expected a tensor, got %T", v)
}
