package models_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// gemma3MultimodalPy builds a tiny Gemma3ForConditionalGeneration (a SigLIP tower, the
// projector and a two-layer text decoder with a sliding layer), saves it as
// save_pretrained does (DIR/v5: the Hub's tensor names, language_model.model.*) and a
// copy in the other naming with the config in transformers 4's form (DIR/v4:
// model.language_model.* names, the text decoder's rope as rope_theta,
// rope_local_base_freq and rope_scaling, sliding_window_pattern, the EOS at the top
// level only), and writes DIR/ref.pt: text-only logits and greedy tokens of the
// multimodal model.
const gemma3MultimodalPy = `
import json, os, sys, torch, transformers
from safetensors.torch import load_file, save_file
from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig, Gemma3ForConditionalGeneration
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(1)
d = sys.argv[1]
text = Gemma3TextConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, max_position_embeddings=64,
                        bos_token_id=1, eos_token_id=96, pad_token_id=0, sliding_window=4,
                        layer_types=["sliding_attention", "full_attention"],
                        rope_parameters={"full_attention": dict(rope_type="linear", rope_theta=1000000.0, factor=2.0),
                                         "sliding_attention": dict(rope_type="default", rope_theta=10000.0)})
vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                            image_size=28, patch_size=14)
cfg = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, boi_token_index=93,
                   eoi_token_index=94, image_token_index=95, eos_token_id=96)
torch.manual_seed(0)
m = Gemma3ForConditionalGeneration(cfg)
torch.manual_seed(1)
with torch.no_grad():
    for n, p in m.named_parameters():
        p.normal_(1, 0.2) if "norm" in n else p.normal_(0, 0.3)
m.eval()
v5 = os.path.join(d, "v5")
m.save_pretrained(v5)
ids = torch.randint(0, 90, (2, 11), generator=torch.Generator().manual_seed(2))
with torch.no_grad():
    logits = m(input_ids=ids).logits
prompt = ids[:1, :6]
new = m.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0)[0, 6:]
torch.save({"ids": ids, "logits": logits, "prompt": prompt[0], "greedy": new}, os.path.join(d, "ref.pt"))

v4 = os.path.join(d, "v4")
os.makedirs(v4)
renamed = {}
for k, v in load_file(os.path.join(v5, "model.safetensors")).items():
    for old, new_ in [("language_model.model.", "model.language_model."), ("vision_tower.", "model.vision_tower."),
                      ("multi_modal_projector.", "model.multi_modal_projector.")]:
        if k.startswith(old):
            k = new_ + k[len(old):]
            break
    renamed[k] = v
save_file(renamed, os.path.join(v4, "model.safetensors"), metadata={"format": "pt"})
c = json.load(open(os.path.join(v5, "config.json")))
t = c["text_config"]
rope = t.pop("rope_parameters")
t.pop("layer_types"), t.pop("eos_token_id"), t.pop("model_type")
t["rope_theta"] = rope["full_attention"]["rope_theta"]
t["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
t["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
t["sliding_window_pattern"] = 2
c["torch_dtype"] = c.pop("dtype")
json.dump(c, open(os.path.join(v4, "config.json"), "w"), indent=2)
print("ok")
`

// TestGemma3MultimodalOpensAsText is issue 41's multimodal Gemma 3: a gemma3 directory
// (Gemma3ForConditionalGeneration, as Gemma 3 4B–27B ship) opens through LoadPretrained
// as its text decoder, in both tensor namings and both config forms, saying that the
// vision tower is left out; its text-only logits and greedy tokens are the multimodal
// model's in transformers.
func TestGemma3MultimodalOpensAsText(t *testing.T) {
	dir := t.TempDir()
	testpy.Run(t, gemma3MultimodalPy, []string{"torch", "transformers", "safetensors"}, dir)
	ref := readRef(t, filepath.Join(dir, "ref.pt"))
	for _, sub := range []string{"v5", "v4"} {
		t.Run(sub, func(t *testing.T) {
			defer torch.NewScope().Close()
			var notices []string
			m, err := models.LoadPretrained(filepath.Join(dir, sub), models.LoadOptions{Notice: func(s string) { notices = append(notices, s) }})
			require.NoError(t, err)
			defer nn.Free(m)
			require.IsType(t, &models.Gemma3ForCausalLM{}, m)
			require.Len(t, notices, 1)
			assert.Contains(t, notices[0], "vision tower")
			assert.Contains(t, notices[0], "Gemma3ForCausalLM")
			assert.Equal(t, []int64{96}, m.DecoderConfig().EOS, "the EOS of the top level where text_config has none")
			torch.NoGrad(func() {
				got := m.Forward(models.DecoderInput{InputIDs: refTensor(t, ref, "ids")})
				requireClose(t, "logits", refTensor(t, ref, "logits"), got, 1e-5)
			})
			gen, err := generate1(m, refTensor(t, ref, "prompt").Int64s(), models.GenerateOptions{MaxNewTokens: 20, IgnoreEOS: true})
			require.NoError(t, err)
			want := refTensor(t, ref, "greedy").Int64s()
			assert.Equal(t, want, gen[:len(want)], "transformers' greedy tokens")
		})
	}
	// A text_config that is not an object names the field.
	_, err := models.ParseGemma3Config([]byte(`{"model_type": "gemma3", "text_config": 3}`))
	assert.ErrorContains(t, err, "text_config")
}
