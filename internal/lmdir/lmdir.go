// Package lmdir holds what the commands that run a Hugging Face model directory
// (cmd/generate, cmd/serve) read from it the same way: the tokens that end a
// generation, a chat template's end-of-turn token, the --dtype and --device flags.
package lmdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/tokenizer/chat"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// GenerationConfigFile holds the defaults of transformers' generate(), among them the
// tokens that end a sequence (a chat model's end-of-turn besides its EOS).
const GenerationConfigFile = "generation_config.json"

// GenerationEOS reads generation_config.json's eos_token_id in the model directory
// dir: nil when the file or the key is absent. A file that is not JSON, and an
// eos_token_id that is not an id or a list of ids, are errors saying which. Commands
// call it before the model loads, so that a mistake in the file is reported at once.
func GenerationEOS(dir string) (models.TokenIDs, error) {
	path := filepath.Join(dir, GenerationConfigFile)
	data, err := fsutil.ReadFileInDir(dir, GenerationConfigFile, 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var gc map[string]json.RawMessage
	if err := json.Unmarshal(data, &gc); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object: %w", path, err)
	}
	raw, ok := gc["eos_token_id"]
	if !ok {
		return nil, nil
	}
	var eos models.TokenIDs
	if err := json.Unmarshal(raw, &eos); err != nil {
		return nil, fmt.Errorf("%s: eos_token_id: %w", path, err)
	}
	return eos, nil
}

// EOSTokens returns the tokens that end the generation, as transformers' generate()
// takes them: generation_config.json's eos_token_id (gen, as GenerationEOS read it),
// else config.json's (dc.EOS), else the tokenizer's EOS. An empty (non-nil) list never
// stops early. An id outside the vocabulary is kept, as transformers keeps it: it never
// stops anything.
func EOSTokens(gen models.TokenIDs, dc models.DecoderConfig, tok *tokenizer.Tokenizer) []int64 {
	switch {
	case len(gen) > 0:
		return gen
	case len(dc.EOS) > 0:
		return dc.EOS
	}
	if eos, ok := tok.EOS(); ok {
		return []int64{eos}
	}
	return []int64{}
}

// TurnEnd returns the template's end-of-turn token: the special token the template
// writes right after an assistant message's content (ChatML's <|im_end|>, Llama 3's
// <|eot_id|>, Gemma's <end_of_turn>, Phi-3's <|end|>; an EOS for templates that end a
// turn with it), found by rendering a probe conversation with o. It is -1 when the
// template writes no special token there or refuses the probe.
func TurnEnd(tmpl *chat.Template, tok *tokenizer.Tokenizer, o chat.Options) int64 {
	// The marker is text no template changes and no tokenizer merges with what follows.
	const marker = "gotrain end-of-turn probe"
	probe := []chat.Message{{"role": "user", "content": "Hi"}, {"role": "assistant", "content": marker}}
	o.AddGenerationPrompt = false
	r, err := tmpl.Render(probe, o)
	if err != nil {
		return -1 // a template that wants, say, a system turn first: the EOS stops
	}
	i := strings.LastIndex(r.Text, marker)
	if i < 0 {
		return -1
	}
	rest := strings.TrimLeft(r.Text[i+len(marker):], " \t\r\n")
	ids, err := tok.TryEncode(rest, false) // a tokenizer over its budget: no turn end
	if err != nil || len(ids) == 0 || !tok.IsSpecial(ids[0]) {
		return -1
	}
	return ids[0]
}

// ParseDType reads --dtype: a floating-point torch dtype by PyTorch's name or the short
// names (bf16, fp16, fp32) the other commands take.
func ParseDType(s string) (torch.DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "bf16":
		return torch.BFloat16, nil
	case "fp16", "f16":
		return torch.Float16, nil
	case "fp32", "f32":
		return torch.Float32, nil
	}
	dt, err := torch.ParseDType(strings.ToLower(strings.TrimSpace(s)))
	if err != nil {
		return 0, fmt.Errorf("unknown dtype %q: want float32, bfloat16 or float16 (fp32, bf16, fp16)", s)
	}
	if dt != torch.Float32 && dt != torch.BFloat16 && dt != torch.Float16 {
		return 0, fmt.Errorf("the weights cannot be %s: want float32, bfloat16 or float16", dt)
	}
	return dt, nil
}

// CheckDevice refuses a CUDA device this machine does not have before anything is
// loaded.
func CheckDevice(d torch.Device) error {
	if !d.IsCUDA() {
		return nil
	}
	if !torch.CUDAIsAvailable() {
		return fmt.Errorf("--device %s: CUDA is not available on this machine (no GPU, or libtorch built without CUDA; cmd/gpucheck says which)", d)
	}
	if n := torch.CUDADeviceCount(); d.Index >= n {
		return fmt.Errorf("--device %s: this machine has %d CUDA device(s), cuda:0 to cuda:%d", d, n, n-1)
	}
	return nil
}
