package lora

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// filePrefix comes before a module's path in PEFT's adapter files: the PeftModel's
// base_model (the LoraModel) and its model.
const filePrefix = "base_model.model."

// maxConfigSize bounds adapter_config.json (PEFT's are a few KiB).
const maxConfigSize = 1 << 20

// fileKey is the name of a layer's A ("A") or B ("B") weight in adapter_model.safetensors.
func fileKey(path, ab string) string { return filePrefix + path + ".lora_" + ab + ".weight" }

// StateDict returns the adapter's weights as adapter_model.safetensors holds them
// (PEFT's get_peft_model_state_dict): "base_model.model.<path>.lora_A.weight" and
// "...lora_B.weight" for each layer, in module order, as CPU copies in
// *checkpoint.Tensor form.
func (a *Adapter) StateDict() (sd *checkpoint.Dict, err error) { return a.stateDict(nil) }

// stateDict is StateDict with the parameters' values taken from values where it is not
// nil (SaveValues).
func (a *Adapter) stateDict(values map[*torch.Tensor]*checkpoint.Tensor) (sd *checkpoint.Dict, err error) {
	if a.empty() {
		return nil, errEmpty
	}
	defer torch.Recover(&err, "lora: state dict")
	sd = checkpoint.NewDict()
	torch.WithScope(func() {
		for _, w := range a.lowRanks() {
			ct, given := values[w.t]
			switch {
			case values == nil:
				if ct, err = torch.TensorCopyToCheckpoint(w.t.Detach().Contiguous()); err != nil {
					return
				}
				ct.RequiresGrad = false
			case !given || !slices.Equal(ct.Shape, w.t.Shape()):
				err = fmt.Errorf("lora: the value of %s is missing or not of shape %v", fileKey(w.path, w.ab), w.t.Shape())
				return
			}
			sd.Set(fileKey(w.path, w.ab), ct)
		}
	})
	if err != nil {
		return nil, err
	}
	return sd, nil
}

// LoadStateDict copies an adapter file's tensors (PEFT's keys; values *checkpoint.Tensor
// or *torch.Tensor) into the layers' A and B, converting dtype and device. Every A and
// B must be there with its shape, and nothing else: otherwise the error, an
// *nn.StateDictError, names every key missing, unexpected or of another shape, and
// nothing is copied.
func (a *Adapter) LoadStateDict(sd *checkpoint.Dict) (err error) {
	if a.empty() {
		return errEmpty
	}
	defer torch.Recover(&err, "lora: load")
	type pending struct {
		dst *torch.Tensor
		src any
	}
	var copies []pending
	serr := &nn.StateDictError{}
	known := map[string]bool{}
	for _, w := range a.lowRanks() {
		key := fileKey(w.path, w.ab)
		known[key] = true
		v, ok := sd.Get(key)
		if !ok {
			serr.Missing = append(serr.Missing, key)
			continue
		}
		var shape []int64
		switch x := v.(type) {
		case *checkpoint.Tensor:
			shape = x.Shape
		case *torch.Tensor:
			shape = x.Shape()
		default:
			serr.Mismatched = append(serr.Mismatched, nn.ShapeMismatch{Key: key, Description: fmt.Sprintf("expected a tensor, got %T", v)})
			continue
		}
		if want := w.t.Shape(); !slices.Equal(want, shape) {
			serr.Mismatched = append(serr.Mismatched, nn.ShapeMismatch{Key: key, Checkpoint: shape, Model: want})
			continue
		}
		copies = append(copies, pending{w.t, v})
	}
	for k := range sd.All() {
		if s, ok := k.(string); !ok || !known[s] {
			serr.Unexpected = append(serr.Unexpected, fmt.Sprint(k))
		}
	}
	if len(serr.Missing)+len(serr.Unexpected)+len(serr.Mismatched) > 0 {
		return serr
	}
	torch.WithScope(func() {
		torch.NoGrad(func() {
			for _, c := range copies {
				var src *torch.Tensor
				if src, err = fileTensor(c.src); err != nil {
					return
				}
				c.dst.CopyFrom(src, false)
			}
		})
	})
	return err
}

// Save writes the adapter to dir as PEFT's save_pretrained does:
// adapter_model.safetensors (StateDict, with the metadata {"format": "pt"}) and
// adapter_config.json (PEFT's keys; AllLinear expanded into the adapted modules'
// names, as PEFT writes it), which peft.PeftModel.from_pretrained(base, dir) loads.
// dir is created if needed. Both files are written to synced temporary files first;
// the weights replace the previous ones and then the config does, so a failed save
// leaves the previous adapter (or none) and no temporary file. A file of dir that is a
// symlink is replaced by the new file, never written through (fsutil.StageInDir).
func (a *Adapter) Save(dir string) error { return a.save(dir, nil) }

// SaveValues is Save with the values of the adapter's parameters (Parameters) given, as
// CPU copies, by values instead of read from them: sharded training gathers them a unit
// at a time (trainer.FullyShardedDataParallel.GatherState) where the parameters
// themselves are not all allocated at once.
func (a *Adapter) SaveValues(dir string, values map[*torch.Tensor]*checkpoint.Tensor) error {
	if values == nil {
		values = map[*torch.Tensor]*checkpoint.Tensor{}
	}
	return a.save(dir, values)
}

func (a *Adapter) save(dir string, values map[*torch.Tensor]*checkpoint.Tensor) error {
	if a.empty() {
		return errEmpty
	}
	targets := a.Config.TargetModules
	if strings.EqualFold(targets.Pattern, AllLinear) {
		var names []string
		for _, l := range a.layers {
			names = append(names, l.Path)
		}
		slices.Sort(names)
		targets = Targets{Names: names}
	}
	raw, err := a.Config.marshal(targets)
	if err != nil {
		return fmt.Errorf("lora: %s: %w", ConfigFile, err)
	}
	sd, err := a.stateDict(values)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	cfg, err := fsutil.StageInDir(dir, ConfigFile, func(w io.Writer) error {
		_, err := w.Write(raw)
		return err
	})
	if err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	if err := checkpoint.WriteSafetensorsDir(dir, checkpoint.AdapterWeights, sd, map[string]string{"format": "pt"}, 0); err != nil {
		cfg.Abort()
		return fmt.Errorf("lora: %w", err)
	}
	if err := cfg.Commit(); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	return nil
}

// ReadConfig reads dir's adapter_config.json. Errors name the file and the field.
func ReadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, ConfigFile)
	raw, err := fsutil.ReadFileInDir(dir, ConfigFile, maxConfigSize)
	if err != nil {
		return Config{}, fmt.Errorf("lora: %w", err)
	}
	c, err := ParseConfig(raw)
	if err == nil {
		err = c.validate(false)
	}
	if err != nil {
		return Config{}, fmt.Errorf("lora: %s: %w", path, err)
	}
	return c, nil
}

// LoadOptions control Load.
type LoadOptions struct {
	// Trainable keeps the adapter's weights trainable, to train it further (PEFT's
	// is_trainable=True); by default they are frozen too, for inference, as
	// PeftModel.from_pretrained loads them.
	Trainable bool
}

// Load adds the adapter saved in dir (by Save or by PEFT's save_pretrained:
// adapter_config.json and adapter_model.safetensors) to m, as
// peft.PeftModel.from_pretrained(m, dir) does: the base is frozen, the targeted layers
// wrapped and their A and B read from the file, which must hold exactly those. Reading
// does not draw random numbers. An error leaves m as it was.
func Load(m nn.Module, dir string, o LoadOptions) (*Adapter, error) {
	c, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	// Mapped, as a model's weights are (models.LoadPretrained): the file's bytes never
	// sit in Go's heap, and the map goes once they are copied.
	sd, _, mapping, err := checkpoint.ReadOptions{}.MapSafetensorsDir(dir, checkpoint.AdapterWeights)
	if err != nil {
		return nil, fmt.Errorf("lora: %w", err)
	}
	defer mapping.Close()
	a, err := inject(m, c, false)
	if err != nil {
		return nil, fmt.Errorf("lora: %s: %w", filepath.Join(dir, ConfigFile), err)
	}
	torch.WithScope(func() {
		if lt, ok := m.(LegacyTargets); ok {
			// An adapter trained on transformers 4's per-expert modules.
			if sd, err = a.convertLegacyWeights(sd, lt); err != nil {
				return
			}
		}
		err = a.LoadStateDict(sd)
	})
	if err != nil {
		a.unwrap()
		return nil, fmt.Errorf("lora: %s: %w", dir, err)
	}
	if !o.Trainable {
		for _, p := range a.Parameters() {
			p.SetRequiresGrad(false)
		}
	}
	return a, nil
}
