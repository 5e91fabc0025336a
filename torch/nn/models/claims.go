package models

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
)

// checkClaims compares what config.json claims of the model's size with the tensors of
// its checkpoint, weights (mapped, not read: only their shapes are looked at), before
// the model is built: the embedding's vocabulary and width, the number of layers, the MLP's
// intermediate size and the queries' heads. A config that claims more than its weights
// hold (6e9 parameters beside a 135M checkpoint) is refused naming the field and the
// tensor, rather than allocated and initialised first and compared after. Keys the
// config does not have, and tensors the checkpoint does not have, are not compared (the
// full comparison of every shape follows the build, in loadWeights; so do the errors
// of weights that are missing or cannot be read, for which weights is nil).
func checkClaims(dir string, raw []byte, weights *checkpoint.Dict, rename func(string) string) error {
	if weights == nil {
		return nil
	}
	shapes := map[string][]int64{}
	for k, v := range weights.All() {
		name, _ := k.(string)
		if rename != nil {
			if name = rename(name); name == "" {
				continue
			}
		}
		if t, ok := v.(*checkpoint.Tensor); ok {
			shapes[name] = t.Shape
		}
	}
	c, err := claimedSizes(raw)
	if err != nil {
		return nil // the architecture's parser reports a malformed config
	}
	cfg := filepath.Join(dir, ConfigFile)
	mismatch := func(fields string, claimed any, tensor string, shape []int64) error {
		return fmt.Errorf("%s: %s %v and the checkpoint's %s of shape %v disagree: the config does not describe these weights",
			cfg, fields, claimed, tensor, shape)
	}
	// The embedding [vocab, hidden].
	for name, shape := range shapes {
		if !strings.HasSuffix(name, "embed_tokens.weight") && !strings.HasSuffix(name, "wte.weight") {
			continue
		}
		if c.vocab > 0 && c.hidden > 0 && (len(shape) != 2 || shape[0] != c.vocab || shape[1] != c.hidden) {
			return mismatch("vocab_size and hidden_size", []int64{c.vocab, c.hidden}, name, shape)
		}
	}
	// The layers: one index per decoder layer in the tensors' names.
	layers := map[int64]bool{}
	for name := range shapes {
		if m := layerIndex.FindStringSubmatch(name); m != nil {
			i, _ := strconv.ParseInt(m[1], 10, 64)
			layers[i] = true
		}
	}
	if c.layers > 0 && len(layers) > 0 && int64(len(layers)) != c.layers {
		return fmt.Errorf("%s: num_hidden_layers %d disagrees with the checkpoint, whose tensors are of %d layers", cfg, c.layers, len(layers))
	}
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		shape := shapes[name]
		switch {
		case c.intermediate > 0 && strings.HasSuffix(name, ".mlp.down_proj.weight") && len(shape) == 2 && shape[1] != c.intermediate:
			return mismatch("intermediate_size", c.intermediate, name, shape)
		case c.heads > 0 && strings.HasSuffix(name, ".self_attn.q_proj.weight") && len(shape) == 2:
			hd := c.headDim
			if hd == 0 && c.hidden > 0 {
				hd = c.hidden / c.heads
			}
			if hd > 0 && shape[0] != c.heads*hd {
				return mismatch("num_attention_heads × head_dim", c.heads*hd, name, shape)
			}
		}
	}
	return nil
}

// layerIndex finds a decoder layer's index in a tensor's name: model.layers.N. or
// transformer.h.N. (GPT-2).
var layerIndex = regexp.MustCompile(`(?:^|\.)(?:layers|h)\.(\d+)\.`)

// claimed are the sizes a config.json states, under the names transformers' decoder
// configs use (GPT-2's included); 0 where absent. A multimodal config's text_config is
// read in its place.
type claimed struct {
	vocab, hidden, layers, intermediate, heads, headDim int64
}

func claimedSizes(raw []byte) (claimed, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return claimed{}, err
	}
	if isJSONObject(top["text_config"]) {
		var text map[string]json.RawMessage
		if err := json.Unmarshal(top["text_config"], &text); err != nil {
			return claimed{}, err
		}
		top = text
	}
	get := func(keys ...string) int64 {
		for _, k := range keys {
			var v int64
			if b, ok := top[k]; ok && json.Unmarshal(b, &v) == nil && v > 0 {
				return v
			}
		}
		return 0
	}
	return claimed{vocab: get("vocab_size"), hidden: get("hidden_size", "n_embd"), layers: get("num_hidden_layers", "n_layer"),
		intermediate: get("intermediate_size"), heads: get("num_attention_heads"), headDim: get("head_dim")}, nil
}
