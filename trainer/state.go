package trainer

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Version is gotrain's version, recorded in checkpoints and config.json.
const Version = "0.1.0"

// part is one stateful piece of the training state, saved under its own checkpoint key.
// The checkpoint is assembled from the parts, and a load hands each part its value;
// keys no part claims are rejected.
type part struct {
	key string
	// save returns the value to store (nil stores None).
	save func() (any, error)
	// load restores from the stored value, when the key is present.
	load func(v any) error
	// raw parts get the value as read, with tensors on the CPU (RNG states).
	raw bool
}

// parts lists the trainer's stateful parts: the seed's keys first, in its order, then
// what an exact resume needs. Loading follows the same order, so the optimizer is
// restored before the scheduler (as PyTorch requires) and the RNG states last.
func (t *Trainer) parts() []part {
	dict := func(key string, sd func() *checkpoint.Dict, load func(*checkpoint.Dict) error) part {
		return part{key: key, save: func() (any, error) { return sd(), nil }, load: func(v any) error {
			d, ok := v.(*checkpoint.Dict)
			if !ok {
				return fmt.Errorf("%s is %T, want a dict", key, v)
			}
			return load(d)
		}}
	}
	value := func(key string, get func() any, set func(v any) error) part {
		return part{key: key, save: func() (any, error) { return get(), nil }, load: set}
	}
	ps := []part{
		dict("model_state_dict", func() *checkpoint.Dict { return nn.StateDict(t.Model) },
			func(d *checkpoint.Dict) error { return nn.LoadStateDict(t.Model, d, true) }),
		dict("optimizer_state_dict", t.Optimizer.StateDict, t.Optimizer.LoadStateDict),
		{key: "scheduler_state_dict", save: func() (any, error) {
			if t.Scheduler == nil {
				return nil, nil
			}
			return t.Scheduler.StateDict(), nil
		}, load: func(v any) error {
			if v == nil || t.Scheduler == nil {
				return nil
			}
			return dict("scheduler_state_dict", nil, t.Scheduler.LoadStateDict).load(v)
		}},
		intPart("epoch", &t.Epoch),
		value("best_metric", func() any { return t.BestMetric }, func(v any) error {
			if f, err := checkpoint.GetFloat(v); err == nil {
				t.BestMetric = f
			}
			return nil
		}),
		value("history", func() any {
			hist := make([]any, len(t.History))
			for i := range t.History {
				hist[i] = fieldsDict(&t.History[i])
			}
			return hist
		}, func(v any) error {
			h, _ := v.([]any)
			t.History = make([]Record, len(h))
			for i, r := range h {
				loadFields(r, &t.History[i], math.NaN())
			}
			return nil
		}),
		value("model_config", func() any { return t.modelConfig }, ignore),
		dict("scaler_state_dict", t.Scaler.StateDict, t.Scaler.LoadStateDict),
		intPart("global_step", &t.GlobalStep),
		intPart("batch_in_epoch", &t.BatchInEpoch),
		dict("epoch_progress", func() *checkpoint.Dict { return fieldsDict(&t.epochStats) }, t.loadProgress),
		dict("callbacks", t.callbackStates, t.loadCallbackStates),
		{key: "config", save: func() (any, error) {
			cfg, err := json.Marshal(t.record())
			return string(cfg), err
		}, load: ignore},
		value("versions", func() any { return dictOf("gotrain", Version, "torch", torch.Version()) }, ignore),
	}
	if len(t.cfg.ClassNames) > 0 {
		ps = append(ps, value("class_names", func() any {
			names := make([]any, len(t.cfg.ClassNames))
			for i, n := range t.cfg.ClassNames {
				names[i] = n
			}
			return names
		}, ignore))
	} else {
		ps = append(ps, part{key: "class_names", load: ignore})
	}
	return append(ps, part{key: "rng_state", save: rngStates, load: loadRNGStates, raw: true})
}

// dictOf is a dict of the key-value pairs kv, in their order.
func dictOf(kv ...any) *checkpoint.Dict {
	d := checkpoint.NewDict()
	for i := 0; i+1 < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return d
}

// intPart is an integer part of the state.
func intPart[T int | int64](key string, p *T) part {
	return part{key: key, save: func() (any, error) { return int64(*p), nil }, load: func(v any) error {
		x, ok := v.(int64)
		if !ok {
			return fmt.Errorf("%s is %T, want an int", key, v)
		}
		*p = T(x)
		return nil
	}}
}

// ignore is the load of a part that is only a record (the config: cmd/train reads it
// before the trainer exists; versions; the model's name).
func ignore(any) error { return nil }

// SaveCheckpoint writes the full training state to path, atomically, as a torch.save
// file. It holds the seed's keys (model_state_dict, optimizer_state_dict,
// scheduler_state_dict, epoch, best_metric, history, model_config) so the seed's Python
// GPUTrainer.load_checkpoint reads it, plus what an exact resume needs: scaler state, RNG
// states, global step, position in the epoch and its running statistics, callback
// states, the config (with the class names, also under class_names) and versions.
//
// Under FullyShardedDataParallel path is a directory of torch.save files, one per rank
// with its shards and metadata.pt with the rest (fsdp_checkpoint.go), published whole:
// a collective that every rank calls with the same path.
func (t *Trainer) SaveCheckpoint(path string) error {
	return t.saveCheckpoint(filepath.Dir(path), path, func(v any) error { return checkpoint.Write(path, v) })
}

// saveCheckpointIn writes the training state as the file name of dir, a directory the
// Trainer fills (the run directory's checkpoints/, a ModelCheckpoint's Dir): a symlink
// there is replaced, not written through, as for every file gotrain names inside an
// output directory (checkpoint.WriteInDir). SaveCheckpoint's path, which the caller
// names, keeps its link.
func (t *Trainer) saveCheckpointIn(dir, name string) error {
	write := func(v any) error { return checkpoint.WriteInDir(dir, name, v) }
	return t.saveCheckpoint(dir, filepath.Join(dir, name), write)
}

// saveCheckpoint creates dir, builds the checkpoint's dict and hands it to write; path
// names it in errors.
func (t *Trainer) saveCheckpoint(dir, path string, write func(any) error) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer torch.Recover(&err, "saving checkpoint "+path)
	if f, ok := t.strategy.(*FullyShardedDataParallel); ok {
		return t.saveSharded(f, path)
	}
	done, err := asideSharded(path) // a sharded checkpoint there: a run resumed without sharding
	if err != nil {
		return err
	}
	defer func() { done(err == nil) }()
	scope := torch.NewScope()
	defer scope.Close()
	d := checkpoint.NewDict()
	for _, p := range t.parts() {
		if p.save == nil {
			continue
		}
		v, err := p.save()
		if err != nil {
			return fmt.Errorf("%s: %w", p.key, err)
		}
		d.Set(p.key, v)
	}
	cv, err := torch.ToCheckpoint(d)
	if err != nil {
		return err
	}
	return write(cv)
}

// loadProgress restores a mid-epoch checkpoint's running statistics. They are the whole
// job's (see interrupted), and the epoch's end adds the processes' sums up again, so
// only the main process keeps the summed counts. The per-step averages (grad norm,
// steps, skipped) and the times are the same on every process and stay.
func (t *Trainer) loadProgress(st *checkpoint.Dict) error {
	t.epochStats = epochStats{}
	loadFields(st, &t.epochStats, 0)
	if !t.IsMain() {
		t.epochStats.Sums, t.epochStats.Batches, t.epochStats.Samples = map[string]float64{}, 0, 0
	}
	t.trainSums.set(t.epochStats.Sums)
	t.normSums.set(map[string]float64{gradNormKey: t.epochStats.GradNormSum})
	return nil
}

func (t *Trainer) callbackStates() *checkpoint.Dict {
	cbs := checkpoint.NewDict()
	for _, cb := range t.callbacks {
		if s, ok := cb.(Stateful); ok {
			cbs.Set(s.StateKey(), s.StateDict())
		}
	}
	return cbs
}

// loadCallbackStates gives each stateful callback its state. A state no callback claims
// (a resume with other callbacks, another monitor) is reported, not an error.
func (t *Trainer) loadCallbackStates(cbs *checkpoint.Dict) error {
	claimed := map[string]bool{}
	for _, cb := range t.callbacks {
		s, ok := cb.(Stateful)
		if !ok {
			continue
		}
		claimed[s.StateKey()] = true
		if d, err := checkpoint.GetDict(cbs, s.StateKey()); err == nil {
			if err := s.LoadStateDict(d); err != nil {
				return fmt.Errorf("callback %s: %w", s.StateKey(), err)
			}
		}
	}
	for k := range cbs.All() {
		if ks, _ := k.(string); !claimed[ks] {
			t.printf("checkpoint: no callback claims the saved state %q; ignored\n", ks)
		}
	}
	return nil
}

func rngStates() (any, error) {
	cpu := torch.RNGState(torch.CPU)
	var cudaStates []any
	for i := 0; i < torch.CUDADeviceCount(); i++ {
		cudaStates = append(cudaStates, torch.RNGState(torch.CUDA(i)))
	}
	return dictOf("cpu", cpu, "cuda", cudaStates), nil
}

func loadRNGStates(v any) error {
	if ct, err := checkpoint.GetTensor(v, "cpu"); err == nil {
		st, err := torch.TensorFromCheckpoint(ct, torch.CPU)
		if err != nil {
			return err
		}
		torch.SetRNGState(torch.CPU, st)
	}
	if cuda, err := checkpoint.GetList(v, "cuda"); err == nil {
		for i, c := range cuda {
			if ct, ok := c.(*checkpoint.Tensor); ok && i < torch.CUDADeviceCount() {
				st, err := torch.TensorFromCheckpoint(ct, torch.CPU)
				if err != nil {
					return err
				}
				torch.SetRNGState(torch.CUDA(i), st)
			}
		}
	}
	return nil
}

// fieldsDict stores the numbers of the struct *v under their JSON names (ints as
// int64), and its map[string]float64 as a dict in key order (left out when empty and
// omitempty).
func fieldsDict(v any) *checkpoint.Dict {
	d := checkpoint.NewDict()
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		key, omit := jsonName(rv.Type().Field(i))
		switch f := rv.Field(i); f.Kind() {
		case reflect.Int, reflect.Int64:
			d.Set(key, f.Int())
		case reflect.Float64:
			d.Set(key, f.Float())
		case reflect.Map:
			m := f.Interface().(map[string]float64)
			if len(m) == 0 && omit {
				continue
			}
			md := checkpoint.NewDict()
			for _, k := range sortedKeys(m) {
				md.Set(k, m[k])
			}
			d.Set(key, md)
		}
	}
	return d
}

// loadFields is fieldsDict's inverse, into the struct *v: an absent or non-numeric
// float is missing, an absent int 0, and an absent map nil.
func loadFields(d any, v any, missing float64) {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		key, _ := jsonName(rv.Type().Field(i))
		switch f := rv.Field(i); f.Kind() {
		case reflect.Int, reflect.Int64:
			x, _ := checkpoint.GetInt(d, key)
			f.SetInt(x)
		case reflect.Float64:
			x, err := checkpoint.GetFloat(d, key)
			if err != nil {
				x = missing
			}
			f.SetFloat(x)
		case reflect.Map:
			if md, err := checkpoint.GetDict(d, key); err == nil {
				m := map[string]float64{}
				for k, x := range md.All() {
					if ks, ok := k.(string); ok {
						m[ks], _ = checkpoint.GetFloat(x)
					}
				}
				f.Set(reflect.ValueOf(m))
			}
		}
	}
}

// jsonName is a field's JSON name and whether it is omitempty.
func jsonName(f reflect.StructField) (string, bool) {
	name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name, opts == "omitempty"
}

// LoadCheckpoint restores the training state from a checkpoint written by SaveCheckpoint
// or by the seed's Python trainer (which has only its seven keys: training then resumes at
// the next epoch boundary with fresh RNG state). Tensors are mapped to the trainer's
// device. A key that no part of the trainer claims is an error naming it, so that state
// is never silently dropped.
//
// A sharded checkpoint (a directory SaveCheckpoint wrote under FullyShardedDataParallel)
// loads on any number of sharded ranks, each reading the rows of its own shards (a
// collective), and without sharding, put together whole; the position in the epoch is
// carried over as a count of samples. Under sharding only a sharded checkpoint loads.
func (t *Trainer) LoadCheckpoint(path string) (err error) {
	defer torch.Recover(&err, "loading checkpoint "+path)
	if dir, ok, err := shardedDir(path); err != nil {
		return err
	} else if ok {
		return t.loadSharded(path, dir)
	}
	if _, ok := t.strategy.(*FullyShardedDataParallel); ok {
		return fmt.Errorf("loading checkpoint %s: sharded training (FullyShardedDataParallel) resumes from a sharded checkpoint directory (with %s), not a single file: train it on one process or with DataParallel", path, shardedMetadata)
	}
	scope := torch.NewScope()
	defer scope.Close()
	raw, top, err := t.readDict(path)
	if err != nil {
		return err
	}
	return t.loadTop(path, top, raw, nil, nil)
}

// readDict reads the torch.save file at path, which must hold a dict, with its tensors
// on the Trainer's device (in the caller's scope); raw is the file's value as read.
func (t *Trainer) readDict(path string) (raw any, d *checkpoint.Dict, err error) {
	if raw, err = checkpoint.Read(path); err != nil {
		return nil, nil, err
	}
	v, err := torch.FromCheckpoint(raw, t.Device)
	if err != nil {
		return nil, nil, err
	}
	d, ok := v.(*checkpoint.Dict)
	if !ok {
		return nil, nil, fmt.Errorf("%s: holds a %T, not a dict", path, v)
	}
	return raw, d, nil
}

// loadTop restores the training state from a checkpoint's top dict (tensors on the
// device; raw as read, for the raw parts). override replaces the load of the parts it
// names (a sharded checkpoint's model under sharding); adjust, when set, runs after the
// parts are loaded and before Resumed fires (a sharded checkpoint's position in the
// epoch on another world size).
func (t *Trainer) loadTop(path string, top *checkpoint.Dict, raw any, override map[string]func(any) error, adjust func()) error {
	parts := t.parts()
	claimed := map[string]bool{}
	for i, p := range parts {
		if o := override[p.key]; o != nil {
			parts[i].load = o
		}
		claimed[p.key] = true
	}
	var unknown []string
	for k := range top.All() {
		if ks, _ := k.(string); !claimed[ks] {
			unknown = append(unknown, fmt.Sprint(k))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("%s: keys no part of the trainer claims: %s (not a gotrain or seed trainer checkpoint?)", path, strings.Join(unknown, ", "))
	}
	for _, key := range []string{"model_state_dict", "optimizer_state_dict", "epoch"} {
		if _, ok := top.Get(key); !ok {
			return fmt.Errorf("%s: no %s", path, key)
		}
	}
	t.GlobalStep, t.BatchInEpoch = -1, 0
	t.epochStats = epochStats{}
	t.trainSums.free()
	t.normSums.free()
	for _, p := range parts {
		var src any = top
		if p.raw {
			src = raw
		}
		pv, err := checkpoint.Get(src, p.key)
		if err != nil {
			continue // absent: the seed's checkpoints have only their seven keys
		}
		if err := p.load(pv); err != nil {
			return fmt.Errorf("%s: %s: %w", path, p.key, err)
		}
	}
	if t.GlobalStep < 0 {
		t.GlobalStep = int64(t.Epoch * ((t.Train.Len() + t.cfg.Accumulation - 1) / t.cfg.Accumulation))
	}
	if adjust != nil {
		adjust()
	}
	t.printf("resumed from %s: epoch %d, batch %d, global step %d, best %s %.4f\n", path, t.Epoch, t.BatchInEpoch, t.GlobalStep, t.cfg.Monitor, t.BestMetric)
	return t.fire(Resumed)
}

// ReadRunConfig reads into v the program's configuration that a checkpoint of a
// Trainer built WithRunConfig records (cmd/train reads its flags back this way to
// resume). It reports false, with no error, when the checkpoint records none.
func ReadRunConfig(path string, v any) (bool, error) {
	file := path
	if dir, ok, err := shardedDir(path); err != nil {
		return false, err
	} else if ok {
		file = filepath.Join(dir, shardedMetadata)
	}
	root, err := checkpoint.Read(file)
	if err != nil {
		return false, err
	}
	s, err := checkpoint.GetString(root, "config")
	if err != nil {
		return false, nil
	}
	var r struct {
		Run json.RawMessage `json:"run"`
	}
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return false, fmt.Errorf("%s: config: %w", path, err)
	}
	if len(r.Run) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(r.Run, v); err != nil {
		return false, fmt.Errorf("%s: the run's config: %w", path, err)
	}
	return true, nil
}
