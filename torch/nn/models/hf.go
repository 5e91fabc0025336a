package models

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// ConfigFile is the name of a Hugging Face model directory's configuration.
const ConfigFile = "config.json"

// maxConfigBytes bounds config.json: real ones are a few kilobytes.
const maxConfigBytes = 4 << 20

// Architecture is one decoder architecture as Hugging Face names it, for LoadPretrained
// and SavePretrained: each architecture's file registers its own from init, as
// transformers' AutoModelForCausalLM maps model_type to a class.
type Architecture struct {
	// ModelType is config.json's model_type ("llama") and Class the class transformers
	// builds for it ("LlamaForCausalLM"), written to config.json's architectures.
	ModelType, Class string
	// New builds a model from config.json's bytes, initialised as transformers
	// initialises it; it returns an error naming the field for a config it cannot build.
	New func(config []byte) (CausalLM, error)
	// Rename maps a tensor name of a checkpoint to the model's state-dict key, for
	// checkpoints written under older names; "" drops the tensor. nil: names as they are.
	Rename func(name string) string
	// LeftOut, when set, says what the directories of this model_type hold that the
	// model built leaves out ("the vision tower ... are left out"); LoadPretrained
	// passes it to LoadOptions.Notice.
	LeftOut string
}

// Pretrained is a CausalLM that can write its config.json: PretrainedConfig returns its
// configuration as config.json holds it, model_type and architectures included.
type Pretrained interface {
	CausalLM
	PretrainedConfig() any
}

var registry struct {
	sync.RWMutex
	byType map[string]Architecture
}

// RegisterArchitecture makes a available to LoadPretrained by its ModelType. It panics
// if the type is registered already or a is incomplete (a programmer's error).
func RegisterArchitecture(a Architecture) {
	if a.ModelType == "" || a.Class == "" || a.New == nil {
		panic("models: RegisterArchitecture: ModelType, Class and New are required")
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.byType == nil {
		registry.byType = map[string]Architecture{}
	}
	if _, dup := registry.byType[a.ModelType]; dup {
		panic("models: RegisterArchitecture: model_type " + a.ModelType + " is registered twice")
	}
	registry.byType[a.ModelType] = a
}

// Architectures returns the registered model types, sorted.
func Architectures() []string {
	registry.RLock()
	defer registry.RUnlock()
	return slices.Sorted(maps.Keys(registry.byType))
}

func architecture(modelType string) (Architecture, error) {
	registry.RLock()
	a, ok := registry.byType[modelType]
	registry.RUnlock()
	if !ok {
		return a, fmt.Errorf("model_type %q is not supported (supported: %s)", modelType, strings.Join(Architectures(), ", "))
	}
	return a, nil
}

// LoadOptions control LoadPretrained.
type LoadOptions struct {
	// DType is the dtype of the model's floating-point weights, whatever the file
	// stores (float32, bfloat16 or float16 are converted on load); 0 means float32.
	DType torch.DType
	// Device is where the model is placed; the zero value is the CPU.
	Device torch.Device
	// Notice, when set, receives what the loader says besides errors: that a part of
	// the directory's model is left out (a multimodal Gemma 3 opened as its text
	// decoder).
	Notice func(msg string)
}

// ReadConfig reads dir's config.json (a regular file of at most 4 MiB, linking only
// inside dir or into the Hugging Face cache's blobs: fsutil.InDir) and returns its
// bytes and model_type.
func ReadConfig(dir string) (raw []byte, modelType string, err error) {
	path := filepath.Join(dir, ConfigFile)
	raw, err = fsutil.ReadFileInDir(dir, ConfigFile, maxConfigBytes)
	if err != nil {
		return nil, "", fmt.Errorf("models: %w", err)
	}
	var head struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, "", fmt.Errorf("models: %s: %w", path, err)
	}
	if head.ModelType == "" {
		return nil, "", fmt.Errorf("models: %s has no model_type (supported: %s)", path, strings.Join(Architectures(), ", "))
	}
	return raw, head.ModelType, nil
}

// LoadPretrained opens the Hugging Face model directory dir as transformers'
// AutoModelForCausalLM.from_pretrained does: config.json's model_type chooses the
// registered architecture, which builds the model, and the weights come from
// model.safetensors or from the shards model.safetensors.index.json lists. Every
// parameter must be in the files, except the second name of tied weights
// (lm_head.weight when the embeddings are tied); a tensor the model does not have, or
// one whose shape differs, is an error naming it. The model is in evaluation mode, as
// from_pretrained returns it.
//
// The weight files are memory-mapped (checkpoint.MapSafetensorsDir), never read into
// Go's heap, and the model is built without random initialisation: loading holds at
// most the weights, their largest tensor and a small fixed overhead
// (docs/llm-finetune.md).
func LoadPretrained(dir string, o LoadOptions) (CausalLM, error) {
	raw, modelType, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	arch, err := architecture(modelType)
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", filepath.Join(dir, ConfigFile), err)
	}
	// The files are mapped, not read: their bytes stay in the page cache, outside Go's
	// heap, and each tensor is copied into its parameter (LoadStateDict frees the copy
	// it makes as it goes), so the peak is the model plus its largest tensor. What the
	// config claims is compared with the tensors' shapes before anything of that size is
	// allocated; weights that cannot be read are reported after the config has been
	// checked on its own.
	weights, _, mapping, mapErr := checkpoint.ReadOptions{}.MapSafetensorsDir(dir, checkpoint.ModelWeights)
	if err := checkClaims(dir, raw, weights, arch.Rename); err != nil {
		mapping.Close()
		return nil, fmt.Errorf("models: %w", err)
	}
	// The config is checked (and the model built) before the weights are read, so a
	// config that cannot be built is reported as such, however the weights are. The
	// parameters are not drawn at random: the weights replace every one of them.
	var built CausalLM
	nn.SkipInit(func() { built, err = arch.New(raw) })
	if err != nil {
		mapping.Close()
		return nil, fmt.Errorf("models: %s: %w", filepath.Join(dir, ConfigFile), err)
	}
	if mapErr != nil {
		nn.Free(built)
		return nil, fmt.Errorf("models: %w", mapErr)
	}
	err = loadWeights(built, weights, arch.Rename, weightsFile(dir))
	mapping.Close()
	if err != nil {
		nn.Free(built)
		return nil, fmt.Errorf("models: %s: %w", dir, err)
	}
	if err := place(built, o); err != nil {
		nn.Free(built)
		return nil, err
	}
	nn.SetTraining(built, false)
	if arch.LeftOut != "" && o.Notice != nil {
		class := strings.TrimPrefix(fmt.Sprintf("%T", built), "*models.")
		o.Notice(fmt.Sprintf("models: %s holds a %s (%s): its text decoder is loaded as %s; %s",
			dir, arch.ModelType, arch.Class, class, arch.LeftOut))
	}
	return built, nil
}

// place converts m to o's dtype and moves it to o's device.
func place(m nn.Module, o LoadOptions) (err error) {
	defer torch.Recover(&err, "placing the model")
	if o.DType != 0 && o.DType != torch.Float32 {
		nn.ToDType(m, o.DType)
	}
	if o.Device != torch.CPU {
		nn.ToDevice(m, o.Device)
	}
	return nil
}

// checkpointLayout is a model whose Hugging Face checkpoints hold some of its tensors
// in another layout than its state dict: a mixture of experts' per-expert weights,
// which its state dict holds fused (moe.go).
type checkpointLayout interface {
	// fromCheckpoint rewrites the checkpoint tensors sd (named as the state dict, after
	// Rename) into the state dict's layout; fileOf names the file of a tensor, for
	// errors.
	fromCheckpoint(sd *checkpoint.Dict, fileOf func(string) string) error
	// hubLayout is the layout transformers' save_pretrained writes the state dict in.
	hubLayout() checkpoint.Layout
}

// HubLayout is how SavePretrained's weights files lay out m's state tensors (nil: as
// they are), for a streamed export of the state (trainer.FullyShardedDataParallel's
// WriteSafetensorsDir) to write the files SavePretrained writes: a mixture of experts'
// fused experts become one tensor per expert and projection.
func HubLayout(m nn.Module) checkpoint.Layout {
	if c, ok := m.(checkpointLayout); ok {
		return c.hubLayout()
	}
	return nil
}

// weightsFile returns, for errors about a tensor of the weights in dir, the file that
// holds it: the shard model.safetensors.index.json maps it to, or model.safetensors.
func weightsFile(dir string) func(string) string {
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if raw, err := fsutil.ReadFile(filepath.Join(dir, checkpoint.ModelWeights+".safetensors.index.json"), maxConfigBytes*16); err == nil {
		_ = json.Unmarshal(raw, &index)
	}
	return func(name string) string {
		if f, ok := index.WeightMap[name]; ok {
			return filepath.Join(dir, f)
		}
		return filepath.Join(dir, checkpoint.ModelWeights+".safetensors")
	}
}

// loadWeights copies the checkpoint's tensors into m by name (after rename and, for a
// checkpointLayout, its conversion), filling the other names of tied tensors from the
// one the file holds; fileOf names a tensor's file in errors.
func loadWeights(m nn.Module, weights *checkpoint.Dict, rename func(string) string, fileOf func(string) string) error {
	sd := checkpoint.NewOrderedDict()
	source := map[string]string{} // state-dict key → the file's name for it
	for k, v := range weights.All() {
		name, _ := k.(string)
		orig := name
		if rename != nil {
			if name = rename(name); name == "" {
				continue
			}
		}
		sd.Set(name, v)
		source[name] = orig
	}
	if c, ok := m.(checkpointLayout); ok {
		if err := c.fromCheckpoint(sd, fileOf); err != nil {
			return err
		}
	}
	// A tied tensor is one *Tensor under several names: the file holds one of them.
	names := map[*torch.Tensor][]string{}
	entries := nn.StateTensors(m)
	for _, e := range entries {
		names[e.Tensor] = append(names[e.Tensor], e.Name)
	}
	for _, e := range entries {
		if _, ok := sd.Get(e.Name); ok {
			continue
		}
		for _, other := range names[e.Tensor] {
			if v, ok := sd.Get(other); ok {
				sd.Set(e.Name, v)
				break
			}
		}
	}
	err := nn.LoadStateDict(m, sd, true)
	var serr *nn.StateDictError
	if errors.As(err, &serr) && len(serr.Mismatched) > 0 {
		// Name the file of each tensor whose size disagrees with the config.
		var files []string
		for _, mm := range serr.Mismatched {
			switch orig, ok := source[mm.Key]; {
			case !ok:
			case orig == mm.Key:
				files = append(files, fmt.Sprintf("%s is in %s", orig, fileOf(orig)))
			default:
				files = append(files, fmt.Sprintf("%s is %s in %s", mm.Key, orig, fileOf(orig)))
			}
		}
		if len(files) > 0 {
			return fmt.Errorf("%w\n\t(%s)", err, strings.Join(files, "; "))
		}
	}
	return err
}

// SaveOptions control SavePretrained.
type SaveOptions struct {
	// MaxShardSize splits the weights into shards of at most this many bytes (a
	// tensor larger than that gets a shard of its own), with
	// model.safetensors.index.json, as save_pretrained(max_shard_size=...); 0 writes one
	// model.safetensors however large.
	MaxShardSize int64
}

// SavePretrained writes m as a Hugging Face model directory that transformers'
// from_pretrained loads: config.json and the weights in safetensors (tensors in their
// own dtype, tied weights once, under their first name), sharded as o says. The files
// are written to temporary names first, so a failed save leaves the previous one; a
// file of dir that is a symlink is replaced by the new file, never written through
// (fsutil.WriteAtomicInDir).
func SavePretrained(dir string, m CausalLM, o SaveOptions) (err error) {
	raw, err := ConfigJSON(m)
	if err != nil {
		return fmt.Errorf("models: SavePretrained: %w", err)
	}
	if o.MaxShardSize < 0 {
		return fmt.Errorf("models: SavePretrained: MaxShardSize %d is negative", o.MaxShardSize)
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("models: %w", err)
	}
	tensors, err := pretrainedTensors(m)
	if err != nil {
		return err
	}
	if l := HubLayout(m); l != nil {
		if tensors, err = l.Apply(tensors); err != nil {
			return fmt.Errorf("models: SavePretrained: %w", err)
		}
	}
	if err := checkpoint.WriteSafetensorsDir(dir, checkpoint.ModelWeights, tensors, map[string]string{"format": "pt"}, o.MaxShardSize); err != nil {
		return fmt.Errorf("models: %w", err)
	}
	return fsutil.WriteFileInDir(dir, ConfigFile, raw)
}

// ConfigJSON is the config.json SavePretrained writes for m: its PretrainedConfig,
// indented, with a final newline.
func ConfigJSON(m CausalLM) ([]byte, error) {
	p, ok := m.(Pretrained)
	if !ok {
		return nil, fmt.Errorf("%T has no PretrainedConfig", m)
	}
	raw, err := json.MarshalIndent(p.PretrainedConfig(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return append(raw, '\n'), nil
}

// pretrainedTensors copies m's state dict to the CPU as checkpoint tensors, each tied
// tensor once under its first name.
func pretrainedTensors(m nn.Module) (out *checkpoint.Dict, err error) {
	defer torch.Recover(&err, "save_pretrained")
	out = checkpoint.NewDict()
	seen := map[*torch.Tensor]bool{}
	torch.WithScope(func() {
		for _, e := range nn.StateTensors(m) {
			if seen[e.Tensor] {
				continue
			}
			seen[e.Tensor] = true
			var ct *checkpoint.Tensor
			if ct, err = torch.TensorToCheckpoint(e.Tensor.Detach().Contiguous().To(torch.CPU, false)); err != nil {
				return
			}
			ct.RequiresGrad = false
			out.Set(e.Name, ct)
		}
	})
	return out, err
}

// TokenIDs is a config's bos_token_id or eos_token_id: one id, a list of ids, or null.
type TokenIDs []int64

// UnmarshalJSON accepts a number, a list of numbers or null.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*t = nil
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var ids []int64
		if err := json.Unmarshal(b, &ids); err != nil {
			return err
		}
		*t = ids
		return nil
	}
	var id int64
	if err := json.Unmarshal(b, &id); err != nil {
		return errors.New("a token id must be an integer or a list of integers")
	}
	*t = TokenIDs{id}
	return nil
}

// MarshalJSON writes one id as a number, several as a list, none as null.
func (t TokenIDs) MarshalJSON() ([]byte, error) {
	switch len(t) {
	case 0:
		return []byte("null"), nil
	case 1:
		return json.Marshal(t[0])
	}
	return json.Marshal([]int64(t))
}

// PyFloat is a config.json number that Python reads as a float: whole values are
// written with a decimal point ("0.0", not "0"), as transformers' configs validate a
// float field's type strictly.
type PyFloat float64

// MarshalJSON writes f as Python's json.dumps writes a float.
func (f PyFloat) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(float64(f))
	if err != nil || bytes.ContainsAny(b, ".eE") {
		return b, err
	}
	return append(b, '.', '0'), nil
}
