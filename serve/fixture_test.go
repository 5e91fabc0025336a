package serve

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
)

// fixturePy builds a tiny chat model directory as transformers saves one (byte-level
// BPE with ChatML's special tokens, a ChatML template, EOS <|endoftext|>, random Qwen2
// weights wide enough that greedy choices are not near-ties, a context of 96
// positions) and two PEFT adapters on it (different target modules), and answers with
// transformers (and PEFT) greedily: each completion prompt with the base and each
// adapter, stopping at the EOS, and each chat with the base, stopping at the EOS or
// <|im_end|>. Argument: a JSON file {"dir", "corpus", "template", "prompts", "chats",
// "max_new"}.
const fixturePy = `
import copy, json, os, sys, torch, transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from peft import LoraConfig, get_peft_model

transformers.logging.set_verbosity_error()
args = json.load(open(sys.argv[1], encoding="utf-8"))
d = os.path.join(args["dir"], "base")
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
tok = Tokenizer(models.BPE())
tok.normalizer = normalizers.NFC()
tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
                                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(args["corpus"] * 3, trainers.BpeTrainer(
    vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
tok.post_processor = processors.ByteLevel(trim_offsets=False)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
fast.chat_template = args["template"]
fast.save_pretrained(d)
eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
cfg = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96,
                  tie_word_embeddings=False, bos_token_id=None, eos_token_id=eot)
torch.manual_seed(0)
m = Qwen2ForCausalLM(cfg)
with torch.no_grad():
    for n, p in m.named_parameters():
        if "norm" in n:
            p.normal_(1, 0.2)
        else:
            p.normal_(0, 0.3)
m.eval()
m.save_pretrained(d)
hf = AutoTokenizer.from_pretrained(d)

lms = {"base": m}
for name, targets, seed in [("alpha", ["q_proj", "v_proj"], 1), ("beta", ["o_proj", "up_proj", "down_proj"], 2)]:
    pm = get_peft_model(copy.deepcopy(m), LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.normal_(0, 0.5)
    pm.eval()
    pm.save_pretrained(os.path.join(args["dir"], name))
    lms[name] = pm

def greedy(lm, ids, eos):
    x = torch.tensor([ids])
    with torch.no_grad():
        out = lm.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=args["max_new"], do_sample=False,
                          eos_token_id=eos, pad_token_id=eot, output_scores=True, return_dict_in_generate=True)
    new = out.sequences[0, len(ids):].tolist()
    margin = min(float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores)
    return {"prompt_ids": ids, "new_ids": new, "text": hf.decode(new, skip_special_tokens=True), "margin": margin}

completions = {name: [greedy(lm, tok.encode(p).ids, [eot]) for p in args["prompts"]] for name, lm in lms.items()}
chats = []
for msgs in args["chats"]:
    ids = hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    chats.append(greedy(m, list(ids), [eot, im_end]))
print(json.dumps({"completions": completions, "chats": chats, "im_end": im_end, "eot": eot}))
`

const chatTemplate = `{%- if messages[0]['role'] != 'system' %}
{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %}`

var corpus = []string{
	"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
	"The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
	"Hello, world! Hello again, world. Once upon a time there was a little model.",
	"naïve café résumé — déjà vu; you answer briefly and helpfully, assistant.",
}

// prompts are the completion prompts; chats the chat conversations.
var (
	prompts = []string{"The quick brown fox", "Once upon a time there", "Hello, world! naïve café"}
	chats   = [][]map[string]any{
		{{"role": "user", "content": "Hello"}},
		{{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "The quick brown fox"}},
	}
	adapterNames = []string{"alpha", "beta"}
)

const fixtureMaxNew = 10

type answer struct {
	PromptIDs []int64 `json:"prompt_ids"`
	NewIDs    []int64 `json:"new_ids"`
	Text      string  `json:"text"`
	Margin    float64 `json:"margin"`
}

var fixture struct {
	once        sync.Once
	root        string
	completions map[string][]answer
	chats       []answer
	imEnd, eot  int64
}

// hfFixture builds the directories and transformers' answers once per package run.
func hfFixture(t *testing.T) string {
	t.Helper()
	modules := []string{"torch", "transformers", "tokenizers", "peft"}
	fixture.once.Do(func() {
		root, err := os.MkdirTemp("", "serve-hf-")
		require.NoError(t, err)
		fixture.root = root
		in, err := json.Marshal(map[string]any{"dir": root, "corpus": corpus, "template": chatTemplate,
			"prompts": prompts, "chats": chats, "max_new": fixtureMaxNew})
		require.NoError(t, err)
		argsPath := filepath.Join(root, "args.json")
		require.NoError(t, os.WriteFile(argsPath, in, 0o644))
		var res struct {
			Completions map[string][]answer `json:"completions"`
			Chats       []answer            `json:"chats"`
			IMEnd       int64               `json:"im_end"`
			EOT         int64               `json:"eot"`
		}
		out := testpy.Run(t, fixturePy, modules, argsPath)
		require.NoError(t, json.Unmarshal(out, &res), "%s", out)
		fixture.completions, fixture.chats, fixture.imEnd, fixture.eot = res.Completions, res.Chats, res.IMEnd, res.EOT
	})
	if fixture.completions == nil {
		testpy.Python(t, modules...)
		t.Fatal("the Python side failed in an earlier test")
	}
	return fixture.root
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.root != "" {
		os.RemoveAll(fixture.root)
	}
	os.Exit(code)
}
