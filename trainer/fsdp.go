package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
)

// FullyShardedDataParallel is the Strategy of sharded data parallelism over a process
// group, laid out as PyTorch's FSDP2 (fully_shard) lays it out:
//
//   - every trainable parameter is sharded on dim 0 across the ranks: rank r holds rows
//     [r*s, (r+1)*s) of it, s = ceil(rows/WorldSize), zero-padded to s rows, so that the
//     optimizer holds state only for its shards (1/WorldSize of Adam's moments);
//   - the parameters are grouped into units, one flat buffer each for the collectives:
//     the model's choice (a module with a FSDPUnits method, as the decoders' bodies,
//     which name the embeddings and each decoder layer) or Units; what no unit claims
//     (the final norm, the head) forms the root unit, as FSDP2's root fully_shard;
//   - after each micro-batch's backward, each unit's gradients are reduce-scattered
//     (averaged) into its shards' gradients and the full gradients are dropped (NoSync
//     keeps the full gradients over the accumulation window and reduce-scatters once);
//   - unscaling, clipping (by the global norm: the shards' squared norms are summed
//     across the ranks) and the optimizer step run on the shards;
//   - after each optimizer step, each unit's updated shards are all-gathered, one
//     coalesced all-gather per unit, into the model's full parameters;
//   - with ReshardAfterForward (ZeRO-3), the units the model hooks (its layers) are
//     instead gathered before each forward and again before each backward, and freed
//     after each;
//   - with MixedPrecision (FSDP2's MixedPrecisionPolicy), the model's full parameters
//     are bf16, gathered from the shards cast to bf16, and the gradients are cast to
//     fp32 for the reduce-scatter; the shards and the optimizer's state stay fp32.
//
// What differs from FSDP2 (docs/distributed.md): ReshardAfterForward is off by default
// (ZeRO-2's memory: gradients and optimizer state sharded, parameters whole), and frozen
// parameters (a LoRA base) are sharded only in resharded units.
//
// Checkpoints are sharded (trainer/fsdp_checkpoint.go, docs/distributed.md): a directory
// where every rank writes its shards and their optimizer state in parallel and rank 0 the
// rest, published whole by a rename. SaveCheckpoint and LoadCheckpoint are collectives
// (every rank calls them with the same path); a checkpoint loads on another number of
// ranks, each reading the rows of its new shards, and in a single process. Every rank
// writes its shards into rank 0's run directory, which must be on a file system they
// all see; top_k is refused.
//
// The data, devices and ranks are set up as for DataParallel (its Configure, its
// broadcast of rank 0's weights in Start). Build the optimizer over the model's
// parameters as usual: New puts each trainable parameter's shard in its place in the
// optimizer's groups, so the optimizer must not have stepped yet.
type FullyShardedDataParallel struct {
	// Group is the process group, one rank per process.
	Group *distributed.ProcessGroup
	// Units, when set, overrides the model's units: module paths ("model.layers.0"),
	// each the unit of every parameter under it (the longest matching path wins).
	Units []string
	// NoSync keeps each micro-batch's gradients unsharded until the last micro-batch of
	// the accumulation window and reduce-scatters them once (more memory, less traffic),
	// as FSDP2's set_requires_gradient_sync(False) over the window.
	NoSync bool
	// ReshardAfterForward frees the full parameters of each unit the model runs hooks
	// around (nn.UnitHooker: the decoders' layers) after the unit's forward and gathers
	// them again before its backward, as FSDP2's reshard_after_forward (ZeRO-3): at rest
	// such a unit holds only its shards. A unit's backward then also reduce-scatters the
	// gradients of the unit after it, which has finished its own, and frees its
	// parameters. Inside Run, between steps, the parameters of those units are not
	// allocated: an operation on one is an error (naming Unshard), so a callback that
	// reads them calls Unshard (or Unsharded) on every rank first, and every forward of
	// the model (a sample generated at an epoch's end) must run on every rank, since it
	// gathers. New leaves the model whole, and so does Run when it succeeds; outside Run
	// the hooks do nothing (after a failed Run, call Unshard on every rank before using
	// the model).
	ReshardAfterForward bool
	// MixedPrecision, when its ParamDType is set, is FSDP2's MixedPrecisionPolicy: the
	// model's full parameters are ParamDType, the shards (the master weights the
	// optimizer steps and the checkpoints save) stay as they are (fp32).
	MixedPrecision FSDPMixedPrecision

	dp       DataParallel
	runDir   string // rank 0's run directory, where every rank writes its shards
	units    []*fsdpUnit
	counts   FSDPCounts
	backward bool // inside a pre-backward callback
	running  bool // inside Run: the hooks act only then
}

// FSDPMixedPrecision is sharded training's mixed-precision policy, as FSDP2's
// MixedPrecisionPolicy(param_dtype, reduce_dtype). The zero value is off.
//
// With ParamDType set (torch.BFloat16), Start casts the model's sharded parameters to
// it, and they stay so (after Run too): the forward and backward run on ParamDType
// weights and produce ParamDType gradients. Each all-gather sends the fp32 shards cast
// to ParamDType (half the traffic of fp32 for bf16) into the full parameters; each
// reduce-scatter sends the full gradients cast to ReduceDType (torch.Float32 when zero;
// FSDP2 reduces in param_dtype by default) and adds the result, cast to the shards'
// dtype, to the shards' gradients. The shards, their gradients, the optimizer's state,
// the sharded checkpoints and the export (GatherState, GatherUnits gather the fp32
// shards) keep the shards' dtype. Frozen parameters (a LoRA base), and float16 (its
// gradients would need a loss scaler), are refused.
type FSDPMixedPrecision struct {
	// ParamDType is the dtype of the model's full parameters; zero (torch.Uint8) is off.
	ParamDType torch.DType
	// ReduceDType is the dtype the gradients are reduce-scattered in; zero is Float32.
	ReduceDType torch.DType
}

// on reports whether the policy is set.
func (m FSDPMixedPrecision) on() bool { return m.ParamDType != 0 }

// reduce returns the dtype gradients are reduce-scattered in when the policy is on.
func (m FSDPMixedPrecision) reduce() torch.DType {
	if m.ReduceDType == 0 {
		return torch.Float32
	}
	return m.ReduceDType
}

// check refuses a policy that is not floating point, and float16 parameters.
func (m FSDPMixedPrecision) check() error {
	if !m.on() {
		if m.ReduceDType != 0 {
			return fmt.Errorf("trainer: FullyShardedDataParallel: MixedPrecision.ReduceDType %s without a ParamDType: set ParamDType (bfloat16)", m.ReduceDType)
		}
		return nil
	}
	if !m.ParamDType.IsFloatingPoint() {
		return fmt.Errorf("trainer: FullyShardedDataParallel: MixedPrecision.ParamDType %s is not a floating-point dtype: use bfloat16", m.ParamDType)
	}
	if m.ParamDType == torch.Float16 {
		return errors.New("trainer: FullyShardedDataParallel: MixedPrecision.ParamDType float16 makes float16 gradients, which need a loss scaler that sharded training does not support yet: use bfloat16")
	}
	if !m.reduce().IsFloatingPoint() {
		return fmt.Errorf("trainer: FullyShardedDataParallel: MixedPrecision.ReduceDType %s is not a floating-point dtype: use float32", m.reduce())
	}
	return nil
}

// FSDPCounts counts a FullyShardedDataParallel's collectives on the parameters.
type FSDPCounts struct {
	// AllGathers and ReduceScatters count the coalesced collectives, one per unit.
	AllGathers, ReduceScatters int64
	// InBackward counts the reduce-scatters that ran inside the backward pass, as soon as
	// a hooked unit's backward was done.
	InBackward int64
	// AllGatherBytes counts the bytes this rank sent to the parameters' all-gathers (its
	// shards, in the dtype gathered).
	AllGatherBytes int64
}

// Counts returns the collectives run so far.
func (f *FullyShardedDataParallel) Counts() FSDPCounts { return f.counts }

// UnitChooser is a module that names its FSDP units: paths of its submodules relative
// to itself (the decoder bodies return "embed_tokens", "layers.0", "layers.1", ...).
type UnitChooser interface {
	FSDPUnits() []string
}

// fsdpUnit is one unit's parameters: the model's full tensors and this rank's shards,
// which the optimizer updates.
type fsdpUnit struct {
	name   string
	names  []string
	full   []*torch.Tensor
	shards []*torch.Tensor
	frozen []bool // under ReshardAfterForward, the frozen parameters (a LoRA base) are sharded too
	// For a unit the model runs hooks around: hooked is set, order is its place among
	// the units (the forward's order), id its pre-backward registration, pending whether
	// a forward with a backward ran since its gradients were last reduce-scattered;
	// under ReshardAfterForward reshard is set and gathered says whether its full
	// parameters are allocated and filled.
	hooked   bool
	reshard  bool
	order    int
	id       uintptr
	pending  bool
	gathered bool
}

// WithFSDP makes the trainer one rank of fully sharded data parallelism over pg:
// WithStrategy(&FullyShardedDataParallel{Group: pg}).
func WithFSDP(pg *distributed.ProcessGroup) Option {
	return func(t *Trainer) error {
		if pg == nil {
			return errors.New("trainer: WithFSDP: nil process group")
		}
		t.strategy = &FullyShardedDataParallel{Group: pg}
		return nil
	}
}

// Configure checks the loader's split, picks the rank's device and silences the ranks
// other than 0, as DataParallel does; AMP fp16 is refused (its loss scaler would need
// the shards' inf checks agreed across the ranks).
func (f *FullyShardedDataParallel) Configure(t *Trainer) error {
	if f.Group == nil {
		return errors.New("trainer: FullyShardedDataParallel: nil process group")
	}
	if t.cfg.AMP.NeedsScaler() {
		return fmt.Errorf("trainer: rank %d: amp %s needs a loss scaler, which sharded training does not support yet: use bf16", f.Group.Rank(), t.cfg.AMP)
	}
	if err := f.MixedPrecision.check(); err != nil {
		return err
	}
	if t.cfg.TopK > 0 { // on every rank, run directory or not, so that all refuse
		return fmt.Errorf("trainer: rank %d: top_k %d: sharded checkpoints (FullyShardedDataParallel) keep last.pt and best_model.pth only: set top_k 0", f.Group.Rank(), t.cfg.TopK)
	}
	for _, cb := range t.callbacks { // a user's own would fail only at its first replacement
		if mc, ok := cb.(*ModelCheckpoint); ok && mc.TopK > 0 {
			return fmt.Errorf("trainer: rank %d: ModelCheckpoint with TopK %d: sharded checkpoints (FullyShardedDataParallel) keep last.pt and best_model.pth only: set TopK 0", f.Group.Rank(), mc.TopK)
		}
	}
	f.runDir = t.RunDir
	f.dp = DataParallel{Group: f.Group}
	return f.dp.Configure(t)
}

// Start broadcasts rank 0's parameters and buffers, splits the trainable parameters
// into units, cuts this rank's shards and puts them in the optimizer in place of the
// full parameters.
func (f *FullyShardedDataParallel) Start(t *Trainer) (err error) {
	if err := f.dp.Start(t); err != nil {
		return err
	}
	if err := f.shareRunDir(t); err != nil {
		return err
	}
	defer torch.Recover(&err, "sharding the model")
	inOpt := map[*torch.Tensor]bool{}
	for _, p := range t.Optimizer.Params() {
		inOpt[p] = true
	}
	if s, ok := t.Optimizer.(interface {
		State(int) map[string]*torch.Tensor
	}); ok {
		for i := range len(inOpt) {
			if len(s.State(i)) > 0 {
				return errors.New("trainer: FullyShardedDataParallel: the optimizer has state already: build it fresh, New shards its parameters")
			}
		}
	}
	prefixes := f.Units
	if len(prefixes) == 0 {
		prefixes = ModelUnits(t.Model)
	}
	byName := map[string]*fsdpUnit{"": {name: ""}}
	var order []*fsdpUnit
	for _, p := range prefixes {
		if _, dup := byName[p]; !dup {
			u := &fsdpUnit{name: p}
			byName[p] = u
			order = append(order, u)
		}
	}
	order = append(order, byName[""])
	shardOf := map[*torch.Tensor]*torch.Tensor{}
	w, r := int64(f.Group.WorldSize()), int64(f.Group.Rank())
	for _, np := range nn.NamedParameters(t.Model) {
		p := np.Tensor
		frozen := !p.RequiresGrad()
		if frozen && f.MixedPrecision.on() {
			return fmt.Errorf("trainer: FullyShardedDataParallel: MixedPrecision with frozen parameter %s (a LoRA base) is not supported: train without the mixed-precision policy (bf16 autocast works)", np.Name)
		}
		if frozen && !f.ReshardAfterForward {
			continue // never changes: stays whole
		}
		if !frozen && !inOpt[p] {
			return fmt.Errorf("trainer: FullyShardedDataParallel: trainable parameter %s is not in the optimizer: build the optimizer over the trainable parameters", np.Name)
		}
		if p.Dim() == 0 {
			return fmt.Errorf("trainer: FullyShardedDataParallel: parameter %s is a scalar, which has no dim 0 to shard", np.Name)
		}
		u := byName[unitOf(np.Name, prefixes)]
		rows := p.Size(0)
		s := (rows + w - 1) / w
		shape := p.Shape()
		shape[0] = s
		shard := torch.Zeros(shape, p.DType(), p.Device())
		if lo := min(r*s, rows); lo < rows {
			n := min(s, rows-lo)
			torch.NoGrad(func() { shard.Narrow(0, 0, n).CopyFrom(p.Detach().Narrow(0, lo, n), false) })
		}
		shard.Escape()
		u.names = append(u.names, np.Name)
		u.full = append(u.full, p)
		u.shards = append(u.shards, shard)
		u.frozen = append(u.frozen, frozen)
		if !frozen {
			shard.SetRequiresGrad(true)
			shardOf[p] = shard
		}
	}
	for _, g := range t.Optimizer.ParamGroups() {
		for i, p := range g.Params {
			if s, ok := shardOf[p]; ok {
				g.Params[i] = s
			}
		}
	}
	f.units = f.units[:0]
	var shards []*torch.Tensor
	for _, u := range order {
		if len(u.full) > 0 {
			f.units = append(f.units, u)
			for i, s := range u.shards {
				if !u.frozen[i] {
					shards = append(shards, s)
				}
			}
		}
	}
	t.params = shards
	if f.MixedPrecision.on() {
		// The model's full parameters take ParamDType; the shards, cut above, keep the
		// master weights' dtype.
		torch.WithScope(func() {
			torch.NoGrad(func() {
				for _, u := range f.units {
					for _, p := range u.full {
						if p.DType() != f.MixedPrecision.ParamDType {
							p.SetData(p.ToDType(f.MixedPrecision.ParamDType))
						}
					}
				}
			})
		})
	}
	f.installHooks(t)
	// Frozen parameters are sharded only where they are freed: a unit that is not
	// resharded keeps them whole, as they never change.
	kept := f.units[:0]
	for _, u := range f.units {
		if !u.reshard {
			u.dropFrozen()
		}
		if len(u.full) > 0 {
			u.order = len(kept)
			kept = append(kept, u)
		}
	}
	f.units = kept
	return nil
}

// dropFrozen forgets u's frozen parameters' shards.
func (u *fsdpUnit) dropFrozen() {
	k := 0
	for i := range u.full {
		if u.frozen[i] {
			u.shards[i].Free()
			continue
		}
		u.names[k], u.full[k], u.shards[k], u.frozen[k] = u.names[i], u.full[i], u.shards[i], false
		k++
	}
	u.names, u.full, u.shards, u.frozen = u.names[:k], u.full[:k], u.shards[:k], u.frozen[:k]
}

// installHooks runs hooks around the units the model offers to hook (nn.UnitHooker):
// their gradients are reduce-scattered as soon as their backward is done and, under
// ReshardAfterForward, their parameters gathered and freed around their forward and
// backward (whole until the first forward of a run frees them).
func (f *FullyShardedDataParallel) installHooks(t *Trainer) {
	byName := map[string]*fsdpUnit{}
	for i, u := range f.units {
		u.order = i
		byName[u.name] = u
	}
	for _, nm := range nn.NamedModules(t.Model) {
		m, ok := nm.Module.(nn.UnitHooker)
		if !ok {
			continue
		}
		h := &fsdpHooks{f: f}
		paths := m.SetUnitHooks(h)
		h.units = make([]*fsdpUnit, len(paths))
		for i, p := range paths {
			if nm.Name != "" {
				p = nm.Name + "." + p
			}
			u := byName[p]
			if u == nil || u.hooked {
				continue
			}
			u.hooked, u.reshard, u.gathered = true, f.ReshardAfterForward, true
			u.id = torch.RegisterFSDPUnit(func() error { return f.preBackward(u) })
			h.units[i] = u
			if u.reshard {
				torch.OwnStorage(u.full)
			}
		}
	}
}

// fsdpHooks are the hooks the model runs around its units. They act only inside Run:
// outside it the model is whole (New leaves it so, and Run ends with Unshard) and its
// forwards and backwards are this process's alone, with no collective.
type fsdpHooks struct {
	f     *FullyShardedDataParallel
	units []*fsdpUnit // by the model's unit index; nil: not a unit of ours
}

// BeforeUnit gathers a resharded unit's parameters.
func (h *fsdpHooks) BeforeUnit(i int) {
	if !h.f.running || i >= len(h.units) || h.units[i] == nil || !h.units[i].reshard || h.units[i].gathered {
		return
	}
	if err := h.f.gatherUnit(h.units[i]); err != nil {
		panic(&torch.Error{Op: "fsdp", Msg: err.Error()})
	}
}

// AfterUnit frees a resharded unit's parameters and, when the output has a backward,
// puts the unit's pre-backward node on it.
func (h *fsdpHooks) AfterUnit(i int, out *torch.Tensor) *torch.Tensor {
	if !h.f.running || i >= len(h.units) || h.units[i] == nil {
		return out
	}
	u := h.units[i]
	if u.reshard {
		torch.FreeStorage(u.full)
		u.gathered = false
	}
	if out == nil || !torch.GradEnabled() || !out.RequiresGrad() {
		return out
	}
	u.pending = true
	return torch.FSDPPreBackward(u.id, out)[0]
}

// preBackward runs when the backward pass reaches u's output: the hooked units after u
// have finished their backward (their gradients are reduce-scattered, unless NoSync,
// and a resharded unit's parameters freed), and a resharded u's parameters are
// gathered for its own.
func (f *FullyShardedDataParallel) preBackward(u *fsdpUnit) error {
	for _, v := range f.units {
		if !v.hooked || !v.pending || v.order <= u.order {
			continue
		}
		if !f.NoSync {
			f.backward = true
			err := f.reduceScatterUnit(v)
			f.backward = false
			if err != nil {
				return err
			}
		}
		v.free()
		v.pending = false
	}
	if !u.reshard {
		return nil
	}
	return f.gatherUnit(u)
}

// free frees a resharded unit's full parameters when they are allocated.
func (u *fsdpUnit) free() {
	if u.reshard && u.gathered {
		torch.FreeStorage(u.full)
		u.gathered = false
	}
}

// Unsharded gathers the full parameters of every resharded unit (Unshard) and runs fn
// with the unit hooks off, so that fn may read the model or run forwards on this rank
// alone (a sample generated on rank 0). It is a collective: every rank must call it,
// each with its own fn.
func (f *FullyShardedDataParallel) Unsharded(fn func() error) error {
	if err := f.Unshard(); err != nil {
		return err
	}
	was := f.running
	f.running = false
	defer func() { f.running = was }()
	return fn()
}

// Unshard gathers the full parameters of every unit that ReshardAfterForward freed, for
// a caller that reads the model between steps (Run does it when it ends); the next
// forward frees them again. It is a collective: every rank must call it.
func (f *FullyShardedDataParallel) Unshard() (err error) {
	defer torch.Recover(&err, "all-gathering the parameters")
	for _, u := range f.units {
		if u.reshard && !u.gathered {
			if err := f.gatherUnit(u); err != nil {
				return err
			}
		}
	}
	return nil
}

// ModelUnits returns the FSDP units m's modules choose (UnitChooser), as paths from m.
func ModelUnits(m nn.Module) []string {
	var out []string
	for _, nm := range nn.NamedModules(m) {
		c, ok := nm.Module.(UnitChooser)
		if !ok {
			continue
		}
		for _, u := range c.FSDPUnits() {
			if nm.Name != "" {
				u = nm.Name + "." + u
			}
			out = append(out, u)
		}
	}
	return out
}

// unitOf returns the longest of prefixes that name is under, "" when none.
func unitOf(name string, prefixes []string) string {
	best := ""
	for _, p := range prefixes {
		if (name == p || strings.HasPrefix(name, p+".")) && len(p) > len(best) {
			best = p
		}
	}
	return best
}

// UnitNames returns the units' module paths in order ("" is the root unit) and their
// parameters' names.
func (f *FullyShardedDataParallel) UnitNames() (units []string, params [][]string) {
	for _, u := range f.units {
		units = append(units, u.name)
		params = append(params, slices.Clone(u.names))
	}
	return units, params
}

// Shards returns this rank's shards of the sharded parameters by name: rows
// [Rank·s, (Rank+1)·s) of each, s = ceil(rows/WorldSize), zero-padded past the last row.
// They are the optimizer's own tensors (the trainable ones) or the frozen ones that
// ReshardAfterForward shards; read them, do not keep them past the next step.
func (f *FullyShardedDataParallel) Shards() map[string]*torch.Tensor {
	out := map[string]*torch.Tensor{}
	for _, u := range f.units {
		for i, n := range u.names {
			out[n] = u.shards[i]
		}
	}
	return out
}

// afterBackward reduce-scatters the micro-batch's gradients that the backward pass has
// not (those of the units without hooks, and of the first hooked one), unless NoSync
// defers it to the window's end, and frees the resharded units' parameters.
func (f *FullyShardedDataParallel) afterBackward() (err error) {
	if !f.NoSync {
		err = f.reduceScatter()
	}
	for _, u := range f.units {
		u.free()
		u.pending = false
	}
	return err
}

// ReduceGradients reduce-scatters the gradients that are still full (all of them under
// NoSync, none otherwise) into the shards' gradients.
func (f *FullyShardedDataParallel) ReduceGradients([]*torch.Tensor) error { return f.reduceScatter() }

func (f *FullyShardedDataParallel) reduceScatter() (err error) {
	defer torch.Recover(&err, "reduce-scattering the gradients")
	for _, u := range f.units {
		if err := f.reduceScatterUnit(u); err != nil {
			return err
		}
	}
	return nil
}

// reduceScatterUnit reduce-scatters u's full gradients, adds them to its shards'
// gradients and drops them.
func (f *FullyShardedDataParallel) reduceScatterUnit(u *fsdpUnit) error {
	w := int64(f.Group.WorldSize())
	var ins, outs, grads, shards []*torch.Tensor
	for i, p := range u.full {
		g := p.Grad()
		if g == nil {
			continue
		}
		s := u.shards[i]
		in := g
		if f.MixedPrecision.on() && g.DType() != f.MixedPrecision.reduce() {
			in = g.ToDType(f.MixedPrecision.reduce())
		}
		if pad := s.Size(0)*w - g.Size(0); pad > 0 {
			shape := g.Shape()
			shape[0] = pad
			in = torch.Cat([]*torch.Tensor{in, torch.Zeros(shape, in.DType(), in.Device())}, 0)
		}
		ins = append(ins, in)
		outs = append(outs, torch.Empty(s.Shape(), in.DType(), in.Device()))
		grads = append(grads, p)
		shards = append(shards, s)
	}
	if len(ins) == 0 {
		return nil
	}
	if err := f.Group.ReduceScatterCoalesced(outs, ins, distributed.Avg); err != nil {
		return fmt.Errorf("unit %q: %w", u.label(), err)
	}
	f.counts.ReduceScatters++
	if f.backward {
		f.counts.InBackward++
	}
	for i, s := range shards {
		if outs[i].DType() != s.DType() {
			outs[i] = outs[i].ToDType(s.DType())
		}
		if sg := s.Grad(); sg != nil {
			sg.AddInPlace(outs[i], 1)
		} else {
			s.SetGrad(outs[i])
		}
		grads[i].SetGrad(nil)
	}
	return nil
}

func (u *fsdpUnit) label() string {
	if u.name == "" {
		return "root"
	}
	return u.name
}

// clipGradNorm scales the shards' gradients so that their global norm (over every
// rank's shards) is at most maxNorm, as torch.nn.utils.clip_grad_norm_ on the full
// gradients would, and returns the global norm before clipping.
func (f *FullyShardedDataParallel) clipGradNorm(params []*torch.Tensor, maxNorm float64, dev torch.Device) (_ *torch.Tensor, err error) {
	defer torch.Recover(&err, "clipping the gradients")
	var grads, norms []*torch.Tensor
	for _, p := range params {
		if g := p.Grad(); g != nil {
			grads = append(grads, g)
			norms = append(norms, g.Norm(2).ToDType(torch.Float32))
		}
	}
	sq := torch.Zeros(nil, torch.Float32, dev)
	if len(norms) > 0 {
		n := torch.Stack(norms, 0).Norm(2)
		sq = n.Mul(n)
	}
	if err := f.Group.AllReduce([]*torch.Tensor{sq}, distributed.Sum); err != nil {
		return nil, fmt.Errorf("summing the squared gradient norms: %w", err)
	}
	total := sq.Sqrt()
	coef := total.AddScalar(1e-6).Reciprocal().MulScalar(maxNorm).Clamp(0, 1)
	for _, g := range grads {
		g.MulInPlace(coef.ToDType(g.DType()))
	}
	return total, nil
}

// gather all-gathers the shards of every unit that stays whole between steps into the
// model's full parameters (the resharded units gather before their forward).
func (f *FullyShardedDataParallel) gather() (err error) {
	defer torch.Recover(&err, "all-gathering the parameters")
	for _, u := range f.units {
		switch {
		case !u.reshard:
			if err := f.gatherUnit(u); err != nil {
				return err
			}
		case u.gathered: // gathered by Unshard before the step: stale now
			u.free()
		}
	}
	return nil
}

// gatherUnit all-gathers u's shards into its full parameters, in one coalesced
// collective; a resharded unit's freed storage is allocated again.
func (f *FullyShardedDataParallel) gatherUnit(u *fsdpUnit) error {
	w := int64(f.Group.WorldSize())
	outs := make([]*torch.Tensor, len(u.full))
	ins := make([]*torch.Tensor, len(u.full))
	var direct []*torch.Tensor // where the gather can write straight into the parameter
	if u.reshard {
		direct = torch.AllocStorage(u.full)
	} else {
		direct = make([]*torch.Tensor, len(u.full))
		for i, p := range u.full {
			direct[i] = p.Detach()
		}
	}
	var padded, gathered []*torch.Tensor // the padded ones: their parameters and gathers
	for i, p := range u.full {
		s := u.shards[i].Detach()
		if s.DType() != p.DType() { // the mixed-precision policy: gathered in ParamDType
			s = s.ToDType(p.DType())
		}
		ins[i] = s
		f.counts.AllGatherBytes += s.Numel() * int64(s.DType().Size())
		if s.Size(0)*w == p.Size(0) {
			outs[i] = direct[i]
		} else {
			shape := s.Shape()
			shape[0] *= w
			outs[i] = torch.Empty(shape, s.DType(), s.Device())
			padded, gathered = append(padded, p), append(gathered, outs[i])
		}
	}
	if err := f.Group.AllGatherCoalesced(outs, ins); err != nil {
		return fmt.Errorf("unit %q: %w", u.label(), err)
	}
	f.counts.AllGathers++
	if u.reshard {
		u.gathered = true
		torch.FillStorage(padded, gathered)
		return nil
	}
	torch.NoGrad(func() {
		for i, p := range padded {
			p.Detach().CopyFrom(gathered[i].Narrow(0, 0, p.Size(0)), false)
		}
	})
	return nil
}

// gatherMaster all-gathers u's shards in their own dtype (the fp32 master weights under
// the mixed-precision policy) into new full tensors, in one coalesced collective.
func (f *FullyShardedDataParallel) gatherMaster(u *fsdpUnit) ([]*torch.Tensor, error) {
	w := int64(f.Group.WorldSize())
	outs := make([]*torch.Tensor, len(u.full))
	ins := make([]*torch.Tensor, len(u.full))
	for i, sh := range u.shards {
		s := sh.Detach()
		shape := s.Shape()
		shape[0] *= w
		ins[i], outs[i] = s, torch.Empty(shape, s.DType(), s.Device())
	}
	if err := f.Group.AllGatherCoalesced(outs, ins); err != nil {
		return nil, fmt.Errorf("unit %q: %w", u.label(), err)
	}
	for i, p := range u.full {
		outs[i] = outs[i].Narrow(0, 0, p.Size(0))
	}
	return outs, nil
}

// SumTensors sums ts over the ranks in place.
func (f *FullyShardedDataParallel) SumTensors(ts []*torch.Tensor) error { return f.dp.SumTensors(ts) }

// AllReduce reduces vs over the ranks.
func (f *FullyShardedDataParallel) AllReduce(vs []float64, op distributed.ReduceOp) ([]float64, error) {
	return f.dp.AllReduce(vs, op)
}

// Interrupted agrees on a stop across the ranks, as DataParallel does.
func (f *FullyShardedDataParallel) Interrupted(ctx context.Context) (error, error) {
	return f.dp.Interrupted(ctx)
}

// IsMain reports whether this is rank 0.
func (f *FullyShardedDataParallel) IsMain() bool { return f.Group.IsMain() }

// WorldSize is the number of ranks.
func (f *FullyShardedDataParallel) WorldSize() int { return f.Group.WorldSize() }
