package trainer

import (
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// The export of a sharded model, a unit at a time: under ReshardAfterForward the full
// parameters of the hooked units are freed between steps, and gathering them all
// (Unshard) to write the model would hold the whole model on every rank at once, and
// from a GPU a second time in rank 0's host memory. GatherUnits and GatherState gather
// one such unit, hand its tensors to the caller and free it before the next, so that
// the export holds one unit beyond the shards and the units that stay whole.

// Resharded reports whether some units' full parameters are freed between steps
// (ReshardAfterForward on units the model runs hooks around): then reading the model
// inside Run needs Unshard, or GatherUnits or GatherState a unit at a time.
func (f *FullyShardedDataParallel) Resharded() bool {
	return slices.ContainsFunc(f.units, func(u *fsdpUnit) bool { return u.reshard })
}

// Hooked reports whether the model runs hooks around some units (nn.UnitHooker: the
// Llama-family decoders, whose state dict is their Hugging Face layout), as
// ReshardAfterForward needs.
func (f *FullyShardedDataParallel) Hooked() bool {
	return slices.ContainsFunc(f.units, func(u *fsdpUnit) bool { return u.hooked })
}

// GatherUnits calls fn with each unit's name ("" for the root unit), its parameters'
// names and their full tensors, in the units' order. A unit that ReshardAfterForward
// freed is all-gathered just before fn and freed again after it, so that at most one
// such unit is allocated at a time; the others are whole already and left as they are.
// fn must not keep the tensors past its return.
//
// It is a collective: every rank must call it, each with its own fn (rank 0 writes,
// the others may do nothing). An error of fn ends the calls of fn on this rank, not the
// gathers, so that the ranks stay in step; it is returned at the end.
func (f *FullyShardedDataParallel) GatherUnits(fn func(unit string, names []string, full []*torch.Tensor) error) (err error) {
	defer torch.Recover(&err, "all-gathering the parameters unit by unit")
	var fnErr error
	for _, u := range f.units {
		if err := f.withUnit(u, func(full []*torch.Tensor) {
			if fnErr == nil {
				fnErr = fn(u.name, u.names, full)
			}
		}); err != nil {
			return err
		}
	}
	return fnErr
}

// withUnit runs fn with u's full parameters allocated: gathered first, and freed after,
// when ReshardAfterForward freed them; the gather's temporaries are freed when fn ends.
// Under the mixed-precision policy fn gets instead the full master weights, all-gathered
// from the shards in their own dtype (fp32) into temporaries, and u is left as it is.
func (f *FullyShardedDataParallel) withUnit(u *fsdpUnit, fn func(full []*torch.Tensor)) (err error) {
	if f.MixedPrecision.on() {
		torch.WithScope(func() {
			var full []*torch.Tensor
			if full, err = f.gatherMaster(u); err == nil {
				fn(full)
			}
		})
		return err
	}
	ours := u.reshard && !u.gathered
	torch.WithScope(func() {
		if ours {
			if err = f.gatherUnit(u); err != nil {
				return
			}
		}
		fn(u.full)
	})
	if ours {
		u.free()
	}
	return err
}

// GatherState calls fn with each of m's state tensors (nn.StateTensors: parameters and
// persistent buffers, by name, in PyTorch's order; a tensor under several names, tied,
// once under its first), m being the model the Trainer shards. The parameters of a unit
// that ReshardAfterForward freed are all-gathered when the first of them comes, and the
// unit freed when a tensor of another such unit comes (so that at most one is
// allocated at a time; the order of a decoder's state puts each unit's tensors
// together, so each is gathered once) and at the end. fn must not keep a tensor past
// its return.
//
// It is a collective, as GatherUnits: every rank calls it with the same model, and an
// error of fn ends the calls of fn, not the gathers.
func (f *FullyShardedDataParallel) GatherState(m nn.Module, fn func(name string, t *torch.Tensor) error) (err error) {
	defer torch.Recover(&err, "all-gathering the parameters unit by unit")
	unitOf := map[*torch.Tensor]*fsdpUnit{}
	index := map[*torch.Tensor]int{}
	for _, u := range f.units {
		if u.reshard || f.MixedPrecision.on() {
			for i, p := range u.full {
				unitOf[p], index[p] = u, i
			}
		}
	}
	entries := stateOnce(m)
	var fnErr error
	for i := 0; i < len(entries); {
		u := unitOf[entries[i].Tensor]
		// The run of entries from i that are whole or in u: written with u gathered.
		j := i + 1
		for j < len(entries) {
			if v := unitOf[entries[j].Tensor]; v != nil && v != u {
				if u != nil {
					break
				}
				u = v
			}
			j++
		}
		run := entries[i:j]
		write := func(full []*torch.Tensor) {
			for _, e := range run {
				t := e.Tensor
				if unitOf[t] == u && full != nil {
					t = full[index[t]] // the gathered master weights under the policy
				}
				if fnErr == nil {
					fnErr = fn(e.Name, t)
				}
			}
		}
		if u == nil {
			write(nil)
		} else if err := f.withUnit(u, write); err != nil {
			return err
		}
		i = j
	}
	return fnErr
}

// WriteSafetensorsDir writes m's state (GatherState) on rank 0 to dir as
// checkpoint.WriteSafetensorsDir writes it (the weights named name, ModelWeights when
// empty, sharded at maxShardSize bytes, with metadata), each state tensor as layout
// lays it out (nil: as it is; models.HubLayout(m) gives models.SavePretrained's files,
// a mixture of experts' fused experts one expert at a time): the same files as writing
// the whole model's state dict, but a unit and a tensor at a time, each tensor copied
// to host memory (when on a GPU) only while it is written. It is a collective: every
// rank calls it, and only rank 0 writes (and returns the write's errors).
func (f *FullyShardedDataParallel) WriteSafetensorsDir(dir, name string, m nn.Module, layout checkpoint.Layout, metadata map[string]string, maxShardSize int64) (err error) {
	var w *checkpoint.SafetensorsDirWriter
	var werr error // rank 0's error before the gathers: returned after them, to keep the ranks in step
	if f.Group.IsMain() {
		w, werr = newStateWriter(dir, name, m, layout, f.masterDTypes(), metadata, maxShardSize)
	}
	err = f.GatherState(m, func(name string, t *torch.Tensor) (err error) {
		if w == nil {
			return nil
		}
		torch.WithScope(func() {
			defer torch.Recover(&err, "copying "+name+" to host memory")
			var ct *checkpoint.Tensor
			if ct, err = torch.TensorToCheckpoint(t.Detach().Contiguous().To(torch.CPU, false)); err != nil {
				return
			}
			err = layout.Split(name, ct, w.Write)
		})
		return err
	})
	if w == nil {
		return firstErr(err, werr)
	}
	if err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}

// masterDTypes maps the model's full parameters to their shards' dtype where they differ
// (under the mixed-precision policy): GatherState gives those in the shards' dtype.
func (f *FullyShardedDataParallel) masterDTypes() map[*torch.Tensor]torch.DType {
	out := map[*torch.Tensor]torch.DType{}
	if !f.MixedPrecision.on() {
		return out
	}
	for _, u := range f.units {
		for i, p := range u.full {
			out[p] = u.shards[i].DType()
		}
	}
	return out
}

// newStateWriter starts the streamed write of m's state (each tensor once, as
// GatherState gives them: in master's dtype where master names one), laid out by layout.
func newStateWriter(dir, name string, m nn.Module, layout checkpoint.Layout, master map[*torch.Tensor]torch.DType, metadata map[string]string, maxShardSize int64) (*checkpoint.SafetensorsDirWriter, error) {
	var specs []checkpoint.TensorSpec
	for _, e := range stateOnce(m) {
		tdt := e.Tensor.DType()
		if d, ok := master[e.Tensor]; ok {
			tdt = d
		}
		dt, err := checkpoint.ParseDType(tdt.String())
		if err != nil {
			return nil, fmt.Errorf("trainer: %s: %w", e.Name, err)
		}
		specs = append(specs, checkpoint.TensorSpec{Name: e.Name, DType: dt, Shape: e.Tensor.Shape()})
	}
	return checkpoint.NewSafetensorsDirWriter(dir, name, layout.Specs(specs), metadata, maxShardSize)
}

// stateOnce is m's state tensors (nn.StateTensors) with each tensor once, under its
// first name: the tensors a weights file holds, in its order.
func stateOnce(m nn.Module) []nn.NamedTensor {
	var out []nn.NamedTensor
	seen := map[*torch.Tensor]bool{}
	for _, e := range nn.StateTensors(m) {
		if !seen[e.Tensor] {
			seen[e.Tensor] = true
			out = append(out, e)
		}
	}
	return out
}
