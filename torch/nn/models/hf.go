package models

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Hugging Face model directories hold the config and the weights under these names.
const (
	HFConfigFile  = "config.json"
	HFWeightsFile = "model.safetensors"
)

// LoadGPT2Pretrained builds a GPT2LMHeadModel from a Hugging Face model directory
// (config.json and model.safetensors, as save_pretrained writes them, or as the Hub's
// "gpt2" has them: without the "transformer." prefix and with the old attn.bias
// buffers). Every parameter must be in the file, except lm_head.weight when it is tied.
// The model is in evaluation mode, as from_pretrained returns it.
func LoadGPT2Pretrained(dir string) (m *GPT2LMHeadModel, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, HFConfigFile))
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	c := DefaultGPT2Config()
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("models: %s: %w", HFConfigFile, err)
	}
	if c.ModelType != "" && c.ModelType != "gpt2" {
		return nil, fmt.Errorf("models: %s: model_type %q is not gpt2", HFConfigFile, c.ModelType)
	}
	weights, _, err := checkpoint.ReadSafetensors(filepath.Join(dir, HFWeightsFile))
	if err != nil {
		return nil, err
	}
	m, err = NewGPT2LMHeadModel(c)
	if err != nil {
		return nil, err
	}
	sd := checkpoint.NewOrderedDict()
	for k, v := range weights.All() {
		name := k.(string)
		if strings.HasSuffix(name, ".attn.bias") || strings.HasSuffix(name, ".attn.masked_bias") {
			continue // the causal-mask buffers of older transformers versions
		}
		if !strings.HasPrefix(name, "transformer.") && !strings.HasPrefix(name, "lm_head.") {
			name = "transformer." + name
		}
		sd.Set(name, v)
	}
	if _, ok := sd.Get("lm_head.weight"); !ok && c.TieWordEmbeddings {
		if w, ok := sd.Get("transformer.wte.weight"); ok {
			sd.Set("lm_head.weight", w)
		}
	}
	if err := nn.LoadStateDict(m, sd, true); err != nil {
		nn.Free(m)
		return nil, fmt.Errorf("models: %s: %w", dir, err)
	}
	nn.SetTraining(m, false)
	return m, nil
}

// SavePretrained writes m as a Hugging Face model directory that
// GPT2LMHeadModel.from_pretrained(dir) loads: config.json and model.safetensors (float
// tensors as they are; a tied lm_head.weight is left out, as save_pretrained does).
func (m *GPT2LMHeadModel) SavePretrained(dir string) (err error) {
	defer torch.Recover(&err, "save_pretrained")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("models: %w", err)
	}
	c := m.Config
	c.ModelType = "gpt2"
	c.Architectures = []string{"GPT2LMHeadModel"}
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tensors := checkpoint.NewDict()
	var werr error
	torch.WithScope(func() {
		for k, v := range nn.StateDict(m).All() {
			if k == "lm_head.weight" && c.TieWordEmbeddings {
				continue
			}
			ct, err := torch.TensorToCheckpoint(v.(*torch.Tensor).Contiguous().To(torch.CPU, false))
			if err != nil {
				werr = err
				return
			}
			ct.RequiresGrad = false
			tensors.Set(k, ct)
		}
		werr = checkpoint.WriteSafetensors(filepath.Join(dir, HFWeightsFile), tensors, map[string]string{"format": "pt"})
	})
	if werr != nil {
		return werr
	}
	return os.WriteFile(filepath.Join(dir, HFConfigFile), append(raw, '\n'), 0o666)
}
