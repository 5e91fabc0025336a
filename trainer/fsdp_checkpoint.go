package trainer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/nn"
)

// A sharded checkpoint (FullyShardedDataParallel) is a directory, named as the single
// file would be (checkpoints/last.pt/), of torch.save files:
//
//   - rank-R-of-W.pt, one per rank: {"model_state_dict": {name: shard},
//     "optimizer_state_dict": {"state": {index: {key: shard}}}, "rank", "world_size"},
//     the rank's shards of the sharded parameters and of their optimizer state (rows
//     [R·s, (R+1)·s), s = rows_per_rank, zero-padded past the last row);
//   - metadata.pt: the format, the world size, for every sharded parameter its full
//     shape, dtype and rows per rank ("sharded"), for every optimizer state index with
//     sharded tensors the parameter they follow and their keys ("optimizer_sharded"),
//     the position in the epoch as a count of samples, the state that is not
//     sharded (the unsharded parameters and buffers under model_state_dict, the
//     optimizer's param_groups and scalar state such as "step" under
//     optimizer_state_dict), and every other key of a single-file checkpoint (progress,
//     scheduler, scaler, RNG, callbacks, config).
//
// The ranks write their files in parallel into a staging directory, .NAME.sharded-staging
// beside the checkpoint; once every rank has written, rank 0 moves the complete
// checkpoint aside (.NAME.sharded-previous), renames the staging directory into place and
// removes the previous one. A crash at any point leaves either NAME complete or, between
// the two renames, no NAME and the previous checkpoint complete as .NAME.sharded-previous,
// which LoadCheckpoint(NAME) then loads; a staging directory never loads.
const (
	shardedFormat   = "gotrain-fsdp-sharded-v1"
	shardedMetadata = "metadata.pt"
	stagingSuffix   = ".sharded-staging"
	previousSuffix  = ".sharded-previous"
)

// shardedRankFile is rank r of w's file.
func shardedRankFile(r, w int) string { return fmt.Sprintf("rank-%d-of-%d.pt", r, w) }

// shardedSiblings are the staging and previous directories of the checkpoint path.
func shardedSiblings(path string) (staging, previous string) {
	dir, base := filepath.Split(filepath.Clean(path))
	return filepath.Join(dir, "."+base+stagingSuffix), filepath.Join(dir, "."+base+previousSuffix)
}

// shardedDir reports whether path names a sharded checkpoint and returns the directory
// that holds it: path itself when it is a directory, or its previous version when a
// crash between the two renames of a publication left only that. A staging directory
// (.NAME.sharded-staging) is refused, even a complete one: it was never published.
func shardedDir(path string) (string, bool, error) {
	if base := filepath.Base(filepath.Clean(path)); len(base) > 1 && base[0] == '.' && strings.HasSuffix(base, stagingSuffix) {
		// A rank stopped (or was killed) before every rank had written its file, or
		// before rank 0 published it.
		name := strings.TrimSuffix(base[1:], stagingSuffix)
		return "", false, fmt.Errorf("%s is the staging directory of an unfinished sharded save, which is never loaded: load %s, the last complete checkpoint, instead", path, filepath.Join(filepath.Dir(path), name))
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		if _, err := os.Stat(filepath.Join(path, shardedMetadata)); err != nil {
			return "", false, fmt.Errorf("%s is a directory without %s: not a sharded checkpoint", path, shardedMetadata)
		}
		return path, true, nil
	case errors.Is(err, fs.ErrNotExist):
		_, prev := shardedSiblings(path)
		if _, err := os.Stat(filepath.Join(prev, shardedMetadata)); err == nil {
			return prev, true, nil
		}
	}
	return "", false, nil
}

// shareRunDir gives every rank rank 0's run directory (an all-reduce of its bytes),
// where every rank writes its shards of the run directory's checkpoints, and the
// checkpoint manager that joins rank 0's saves (addRankCheckpoints). Ranks started
// apart (torchrun) may have named their own run directories (a timestamp apart): rank
// 0's wins, as it is the one that writes the run directory.
func (f *FullyShardedDataParallel) shareRunDir(t *Trainer) error {
	n := 0.0
	if f.Group.IsMain() {
		n = float64(len(f.runDir))
	}
	out, err := f.Group.AllReduceFloat64s([]float64{n}, distributed.Max)
	if err != nil {
		return fmt.Errorf("sharing rank 0's run directory: %w", err)
	}
	b := make([]float64, int(out[0]))
	if len(b) == 0 {
		f.runDir = ""
		return nil
	}
	if f.Group.IsMain() {
		for i, c := range []byte(f.runDir) {
			b[i] = float64(c)
		}
	}
	if b, err = f.Group.AllReduceFloat64s(b, distributed.Sum); err != nil {
		return fmt.Errorf("sharing rank 0's run directory: %w", err)
	}
	dir := make([]byte, len(b))
	for i, c := range b {
		dir[i] = byte(c)
	}
	f.runDir = string(dir)
	return f.addRankCheckpoints(t)
}

// addRankCheckpoints gives a rank other than 0 the run directory's checkpoint manager
// (rank 0 gets it with its run directory, which the others do not write): its saves are
// collectives that every rank joins, at the same events, writing its own shards.
func (f *FullyShardedDataParallel) addRankCheckpoints(t *Trainer) error {
	if f.runDir == "" || f.Group.IsMain() {
		return nil
	}
	ckpt, err := NewModelCheckpoint(filepath.Join(f.runDir, "checkpoints"), t.cfg.Monitor, t.cfg.MonitorMode, 0)
	if err != nil {
		return err
	}
	t.callbacks = append(t.callbacks, ckpt)
	return nil
}

// checkpointsDir is where the run directory's checkpoints go on this process: under
// sharding every rank writes into rank 0's run directory; otherwise only the main
// process does ("" elsewhere).
func (t *Trainer) checkpointsDir() string {
	if f, ok := t.strategy.(*FullyShardedDataParallel); ok && f.runDir != "" {
		return filepath.Join(f.runDir, "checkpoints")
	}
	if t.IsMain() && t.RunDir != "" {
		return filepath.Join(t.RunDir, "checkpoints")
	}
	return ""
}

// asideSharded moves a sharded checkpoint directory at path aside, to its previous
// name, so that a single file can take its place (a sharded run resumed without
// sharding, into the same run directory); done(true) removes it once the file is
// written, done(false) puts it back. Until then a crash leaves the previous checkpoint,
// which LoadCheckpoint(path) loads.
func asideSharded(path string) (done func(ok bool), err error) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		return func(bool) {}, nil
	}
	if _, err := os.Stat(filepath.Join(path, shardedMetadata)); err != nil {
		return nil, fmt.Errorf("%s is a directory, not a checkpoint: move it away", path)
	}
	_, prev := shardedSiblings(path)
	if err := os.RemoveAll(prev); err != nil {
		return nil, err
	}
	if err := os.Rename(path, prev); err != nil {
		return nil, err
	}
	return func(ok bool) {
		if ok {
			os.RemoveAll(prev)
		} else if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			os.Rename(prev, path)
		}
	}, nil
}

// linkCheckpoint makes dst hold the checkpoint src (best_model.pth beside last.pt): a
// hard link for a file; for a sharded directory, a new directory of hard links to its
// files, published as a save is (rank 0 only).
func (t *Trainer) linkCheckpoint(src, dst string) error {
	if _, ok := t.strategy.(*FullyShardedDataParallel); !ok {
		done, err := asideSharded(dst)
		if err != nil {
			return err
		}
		err = fsutil.LinkAtomic(src, dst)
		done(err == nil)
		return err
	}
	if !t.IsMain() {
		return nil
	}
	staging, _ := shardedSiblings(dst)
	if err := os.RemoveAll(staging); err != nil {
		return err
	}
	if err := os.Mkdir(staging, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := fsutil.LinkAtomic(filepath.Join(src, e.Name()), filepath.Join(staging, e.Name())); err != nil {
			return err
		}
	}
	return publishSharded(staging, dst)
}

// publishSharded renames the complete staging directory to path, moving a previous
// checkpoint at path aside first and removing it after (see the format's comment).
func publishSharded(staging, path string) error {
	fsutil.SyncDir(staging)
	_, prev := shardedSiblings(path)
	if _, err := os.Lstat(path); err == nil {
		// path is complete, so a previous version left by a crash is stale.
		if err := os.RemoveAll(prev); err != nil {
			return err
		}
		if err := os.Rename(path, prev); err != nil {
			return err
		}
	}
	if err := os.Rename(staging, path); err != nil {
		return err
	}
	fsutil.SyncDir(filepath.Dir(path))
	return os.RemoveAll(prev)
}

// agree all-reduces this rank's failure so that every rank learns of any rank's: it
// returns err, or an error naming the first rank that failed.
func (f *FullyShardedDataParallel) agree(what string, err error) error {
	flag := 0.0
	if err != nil {
		flag = float64(f.Group.Rank() + 1)
	}
	// Max over the ranks: 0 when none failed, else one failed rank + 1.
	out, rerr := f.Group.AllReduceFloat64s([]float64{flag}, distributed.Max)
	switch {
	case err != nil:
		return err
	case rerr != nil:
		return fmt.Errorf("%s: agreeing across the ranks: %w", what, rerr)
	case out[0] > 0:
		return fmt.Errorf("%s: rank %d failed (its error is in its output)", what, int(out[0])-1)
	}
	return nil
}

// shardInfo is one sharded parameter: its name, this rank's shard and the full shape.
type shardInfo struct {
	name  string
	shard *torch.Tensor
	full  []int64
	rows  int64 // rows per rank
}

// shardInfos lists the sharded parameters in the units' order.
func (f *FullyShardedDataParallel) shardInfos() []shardInfo {
	var out []shardInfo
	for _, u := range f.units {
		for i, n := range u.names {
			out = append(out, shardInfo{name: n, shard: u.shards[i], full: u.full[i].Shape(), rows: u.shards[i].Size(0)})
		}
	}
	return out
}

// saveSharded writes the sharded checkpoint path (a directory): a collective, every
// rank calls it with the same path.
func (t *Trainer) saveSharded(f *FullyShardedDataParallel, path string) (err error) {
	path = filepath.Clean(path)
	what := "saving sharded checkpoint " + path
	scope := torch.NewScope()
	defer scope.Close()
	staging, _ := shardedSiblings(path)
	rank, world := f.Group.Rank(), f.Group.WorldSize()
	var prep error
	if rank == 0 {
		if prep = os.MkdirAll(filepath.Dir(path), 0o755); prep == nil {
			if prep = os.RemoveAll(staging); prep == nil {
				prep = os.Mkdir(staging, 0o755)
			}
		}
	}
	if err := f.agree(what, prep); err != nil {
		return err
	}
	werr := func() (err error) {
		defer torch.Recover(&err, what)
		infos := f.shardInfos()
		byShard := map[*torch.Tensor]int{}
		for i, s := range infos {
			byShard[s.shard] = i
		}
		// The optimizer's state: a tensor of a shard's shape is sharded (exp_avg), the
		// rest ("step") is the same on every rank and goes to the metadata.
		var index []int // optimizer index -> infos index, -1 for none
		for _, g := range t.Optimizer.ParamGroups() {
			for _, p := range g.Params {
				i, ok := byShard[p]
				if !ok {
					i = -1
				}
				index = append(index, i)
			}
		}
		osd := t.Optimizer.StateDict()
		state, _ := checkpoint.GetDict(osd, "state")
		rankState, metaState, optSharded := checkpoint.NewDict(), checkpoint.NewDict(), checkpoint.NewDict()
		for k, v := range state.All() {
			idx, _ := k.(int64)
			st, ok := v.(*checkpoint.Dict)
			if !ok {
				return fmt.Errorf("optimizer state %v is %T, want a dict", k, v)
			}
			rs, ms := checkpoint.NewDict(), checkpoint.NewDict()
			var keys []any
			for sk, sv := range st.All() {
				tv, isT := sv.(*torch.Tensor)
				if isT && int(idx) < len(index) && index[idx] >= 0 && slices.Equal(tv.Shape(), infos[index[idx]].shard.Shape()) {
					rs.Set(sk, tv)
					keys = append(keys, sk)
				} else {
					ms.Set(sk, sv)
				}
			}
			rankState.Set(idx, rs)
			metaState.Set(idx, ms)
			if len(keys) > 0 {
				optSharded.Set(idx, dictOf("param", infos[index[idx]].name, "keys", keys))
			}
		}
		model := checkpoint.NewDict()
		for _, s := range infos {
			model.Set(s.name, s.shard.Detach())
		}
		cv, err := torch.ToCheckpoint(dictOf("format", shardedFormat, "rank", int64(rank), "world_size", int64(world),
			"model_state_dict", model, "optimizer_state_dict", dictOf("state", rankState)))
		if err != nil {
			return err
		}
		if err := checkpoint.WriteInDir(staging, shardedRankFile(rank, world), cv); err != nil {
			return err
		}
		if rank != 0 {
			return nil
		}
		// Rank 0 writes the metadata: everything that is not sharded.
		sharded := checkpoint.NewDict()
		for _, s := range infos {
			shape := make([]any, len(s.full))
			for i, n := range s.full {
				shape[i] = n
			}
			sharded.Set(s.name, dictOf("shape", shape, "dtype", s.shard.DType().String(), "rows_per_rank", s.rows))
		}
		meta := dictOf("format", shardedFormat, "world_size", int64(world), "sharded", sharded, "optimizer_sharded", optSharded,
			"samples_in_epoch", int64(t.BatchInEpoch)*int64(t.Train.BatchSize())*int64(world))
		// The rest of the model is whole on every rank; under ReshardAfterForward the
		// resharded units' parameters are not allocated between steps, and are saved as
		// their shards, so they are not read (nor gathered) here.
		whole := checkpoint.NewDict()
		for k, v := range nn.StateDict(t.Model).All() {
			if _, ok := sharded.Get(k); ok {
				continue
			}
			if x, ok := v.(*torch.Tensor); ok && x.Numel() > 0 && torch.StorageBytes(x) == 0 {
				return fmt.Errorf("model_state_dict: %v is resharded (not allocated) but not sharded under that name (a parameter tied to a resharded one?): train without ReshardAfterForward", k)
			}
			whole.Set(k, v)
		}
		mo := dictOf("state", metaState)
		if g, ok := osd.Get("param_groups"); ok {
			mo.Set("param_groups", g)
		}
		for _, p := range t.parts() {
			switch {
			case p.key == "model_state_dict":
				meta.Set(p.key, whole)
			case p.key == "optimizer_state_dict":
				meta.Set(p.key, mo)
			case p.save != nil:
				v, err := p.save()
				if err != nil {
					return fmt.Errorf("%s: %w", p.key, err)
				}
				meta.Set(p.key, v)
			}
		}
		mv, err := torch.ToCheckpoint(meta)
		if err != nil {
			return err
		}
		return checkpoint.WriteInDir(staging, shardedMetadata, mv)
	}()
	if werr != nil {
		werr = fmt.Errorf("%s: rank %d: %w", what, rank, werr)
	}
	if err := f.agree(what, werr); err != nil {
		if rank == 0 {
			os.RemoveAll(staging)
		}
		return err
	}
	var perr error
	if rank == 0 {
		if perr = publishSharded(staging, path); perr != nil {
			perr = fmt.Errorf("%s: publishing %s: %w", what, staging, perr)
		}
	}
	return f.agree(what, perr)
}

// loadSharded restores the training state from the sharded checkpoint in dir (path as
// the caller named it): on W' ranks of FullyShardedDataParallel each rank reads, from
// the files of the ranks that wrote it, the rows of its own shards; without sharding the
// full tensors are put together. The position in the epoch is carried over as a count of
// samples, read in the new world size's order.
func (t *Trainer) loadSharded(path, dir string) error {
	if dir != path {
		t.printf("%s is missing: a save was interrupted while publishing it; loading the previous checkpoint %s\n", path, dir)
	}
	scope := torch.NewScope()
	defer scope.Close()
	raw, meta, err := t.readDict(filepath.Join(dir, shardedMetadata))
	if err != nil {
		return err
	}
	if format, _ := checkpoint.GetString(meta, "format"); format != shardedFormat {
		return fmt.Errorf("%s: format %q, want %q (written by another gotrain?)", dir, format, shardedFormat)
	}
	oldW, err := checkpoint.GetInt(meta, "world_size")
	if err != nil || oldW < 1 {
		return fmt.Errorf("%s: no valid world_size (%v)", dir, err)
	}
	sharded, err := checkpoint.GetDict(meta, "sharded")
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	optSharded, _ := checkpoint.GetDict(meta, "optimizer_sharded")
	f, _ := t.strategy.(*FullyShardedDataParallel)
	newW, newR := int64(1), int64(0)
	if f != nil {
		newW, newR = int64(f.Group.WorldSize()), int64(f.Group.Rank())
	}
	// The old ranks' files are read as this process needs them (only those that hold
	// rows of its shards), and only the tensors it takes rows of are converted.
	files := map[int64]any{}
	rankFile := func(k int64) (any, error) {
		if d := files[k]; d != nil {
			return d, nil
		}
		d, err := checkpoint.Read(filepath.Join(dir, shardedRankFile(int(k), int(oldW))))
		files[k] = d
		return d, err
	}
	// assemble returns this process's rows of the sharded tensor name (its shard, padded,
	// under sharding; all of it otherwise), reading each old rank's piece at path.
	assemble := func(name string, path ...any) (*torch.Tensor, error) {
		e, err := checkpoint.GetDict(sharded, name)
		if err != nil {
			return nil, fmt.Errorf("%s: sharded %s: %w", dir, name, err)
		}
		shape0, err := checkpoint.GetList(e, "shape")
		if err != nil || len(shape0) == 0 {
			return nil, fmt.Errorf("%s: sharded %s: no shape", dir, name)
		}
		rows, _ := shape0[0].(int64)
		s, _ := checkpoint.GetInt(e, "rows_per_rank")
		if rows < 0 || s < 1 || s*oldW < rows {
			return nil, fmt.Errorf("%s: sharded %s: %d rows per rank of %d ranks do not hold %d rows", dir, name, s, oldW, rows)
		}
		lo, hi, pad := int64(0), rows, rows
		if f != nil {
			ns := (rows + newW - 1) / newW
			lo, pad = min(newR*ns, rows), ns
			hi = min(lo+ns, rows)
		}
		var pieces []*torch.Tensor
		for k := lo / s; k < oldW && k*s < hi; k++ {
			d, err := rankFile(k)
			if err != nil {
				return nil, err
			}
			ct, err := checkpoint.GetTensor(d, path...)
			if err != nil {
				return nil, fmt.Errorf("%s: rank %d: %s: %w", dir, k, name, err)
			}
			if len(ct.Shape) == 0 || ct.Shape[0] != s {
				return nil, fmt.Errorf("%s: rank %d: %s has shape %v, want %d rows", dir, k, name, ct.Shape, s)
			}
			x, err := torch.TensorFromCheckpoint(ct, t.Device)
			if err != nil {
				return nil, fmt.Errorf("%s: rank %d: %s: %w", dir, k, name, err)
			}
			a, b := max(lo, k*s), min(hi, (k+1)*s)
			pieces = append(pieces, x.Narrow(0, a-k*s, b-a))
		}
		if n := pad - (hi - lo); n > 0 {
			var shape []int64
			dt := torch.Float32
			if len(pieces) > 0 {
				shape, dt = pieces[0].Shape(), pieces[0].DType()
			} else { // this rank's shard is all padding: the metadata gives its shape
				for _, x := range shape0 {
					n, _ := x.(int64)
					shape = append(shape, n)
				}
				ds, _ := checkpoint.GetString(e, "dtype")
				if dt, err = torch.ParseDType(ds); err != nil {
					return nil, fmt.Errorf("%s: sharded %s: %w", dir, name, err)
				}
			}
			shape[0] = n
			pieces = append(pieces, torch.Zeros(shape, dt, t.Device))
		}
		return torch.Cat(pieces, 0), nil
	}
	// The model: the unsharded entries and this process's rows of the sharded ones.
	model, err := checkpoint.GetDict(meta, "model_state_dict")
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	shardsOf := map[string]*torch.Tensor{}
	for k := range sharded.All() {
		name, _ := k.(string)
		x, err := assemble(name, "model_state_dict", name)
		if err != nil {
			return err
		}
		shardsOf[name] = x
	}
	// The optimizer: its scalar state from the metadata, its sharded state assembled.
	mopt, err := checkpoint.GetDict(meta, "optimizer_state_dict")
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	mstate, _ := checkpoint.GetDict(mopt, "state")
	state := checkpoint.NewDict()
	for k, sv := range mstate.All() {
		st, _ := sv.(*checkpoint.Dict)
		out := checkpoint.NewDict()
		for sk, x := range st.All() {
			out.Set(sk, x)
		}
		if pe, ok := optSharded.Get(k); ok {
			name, err := checkpoint.GetString(pe, "param")
			keys, err2 := checkpoint.GetList(pe, "keys")
			if err = firstErr(err, err2); err != nil {
				return fmt.Errorf("%s: optimizer_sharded %v: %w", dir, k, err)
			}
			for _, sk := range keys {
				x, err := assemble(name, "optimizer_state_dict", "state", k, sk)
				if err != nil {
					return err
				}
				out.Set(sk, x)
			}
		}
		state.Set(k, out)
	}
	opt := dictOf("state", state)
	if g, ok := mopt.Get("param_groups"); ok {
		opt.Set("param_groups", g)
	}
	top := checkpoint.NewDict()
	for k, x := range meta.All() {
		switch k {
		case "format", "world_size", "sharded", "optimizer_sharded", "samples_in_epoch":
		case "model_state_dict": // without sharding, with the sharded tensors put together
			if f == nil {
				for name, s := range shardsOf {
					model.Set(name, s)
				}
			}
			top.Set(k, model)
		case "optimizer_state_dict":
			top.Set(k, opt)
		default:
			top.Set(k, x)
		}
	}
	var override map[string]func(any) error
	if f != nil {
		override = map[string]func(any) error{"model_state_dict": func(v any) error {
			d, ok := v.(*checkpoint.Dict)
			if !ok {
				return fmt.Errorf("model_state_dict is %T, want a dict", v)
			}
			return f.loadShards(t, d, shardsOf)
		}}
	}
	// The epoch goes on from the same count of samples, in the new world size's order,
	// at an accumulation window's start.
	position := func() {
		if newW == oldW || t.BatchInEpoch == 0 {
			return
		}
		samples, _ := checkpoint.GetInt(meta, "samples_in_epoch")
		per := int64(t.Train.BatchSize()) * newW * int64(t.cfg.Accumulation)
		b := int(samples/per) * t.cfg.Accumulation
		if int64(b)*int64(t.Train.BatchSize())*newW != samples {
			t.printf("resumed on %d ranks from %d: the epoch's %d samples seen are not whole windows of %d; it goes on at batch %d\n", newW, oldW, samples, per, b)
		}
		t.BatchInEpoch = b
	}
	return t.loadTop(path, top, raw, override, position)
}

// loadShards loads a sharded checkpoint's model under sharding: the unsharded entries
// into the model, this rank's rows into its shards, then gathers the full parameters
// (a collective).
func (f *FullyShardedDataParallel) loadShards(t *Trainer, d *checkpoint.Dict, rows map[string]*torch.Tensor) (err error) {
	own := f.Shards()
	for name := range own {
		if _, ok := rows[name]; !ok {
			return fmt.Errorf("model_state_dict: the checkpoint has no shards of %s", name)
		}
	}
	for name, x := range rows {
		s, ok := own[name]
		if !ok {
			return fmt.Errorf("model_state_dict: %s is sharded in the checkpoint but not here (another model, or other frozen parameters)", name)
		}
		if !slices.Equal(s.Shape(), x.Shape()) {
			return fmt.Errorf("model_state_dict: %s: shard shape %v, the checkpoint gives %v (another model?)", name, s.Shape(), x.Shape())
		}
	}
	if err := nn.LoadStateDict(t.Model, d, false); err != nil {
		return err
	}
	torch.NoGrad(func() {
		for name, x := range rows {
			own[name].Detach().CopyFrom(x, false)
		}
	})
	if err := f.gather(); err != nil {
		return err
	}
	return f.Unshard()
}
