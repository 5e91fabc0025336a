"""Reference side of the LoRA interop tests (lora_test.go), with transformers and PEFT.

usage:
  python peft_ref.py build DIR   tiny random Llama in DIR/base; for each case, a PEFT
                                 adapter in DIR/CASE (A and B both non-zero) and, in
                                 DIR/ref.pt, PEFT's logits, its merge_and_unload weights
                                 and logits, the logits of adapter "qv" on the base in
                                 bfloat16, and the loss and adapter gradients of one
                                 training forward (case "qv", no dropout)
  python peft_ref.py check DIR   loads gotrain's adapter DIR/go_adapter onto DIR/base with
                                 PeftModel.from_pretrained and gotrain's merged model
                                 DIR/go_merged with AutoModelForCausalLM, and prints, as
                                 JSON, their largest logit differences from gotrain's
                                 (DIR/go_logits.safetensors) and the config PEFT read
"""

import json
import os
import sys

import torch
import transformers
from peft import LoraConfig, PeftConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

mode, d = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()

IDS = torch.tensor([[1, 5, 17, 42, 8, 93, 60, 2, 33], [1, 70, 4, 4, 81, 12, 9, 55, 20]])

CASES = {
    # The usual choice: attention queries and values, no dropout.
    "qv": dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
    # Every linear layer but lm_head, rank-stabilised scaling, dropout (off in eval).
    "all_rs": dict(r=2, lora_alpha=5, target_modules="all-linear", use_rslora=True, lora_dropout=0.1),
}


def base_model():
    return LlamaForCausalLM.from_pretrained(os.path.join(d, "base"), dtype=torch.float32).eval()


def build():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      bos_token_id=1, eos_token_id=96)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
            else:
                p.normal_(0, 0.1)
    m.save_pretrained(os.path.join(d, "base"))
    ref = {"ids": IDS}
    for case, kw in CASES.items():
        pm = get_peft_model(base_model(), LoraConfig(task_type="CAUSAL_LM", **kw))
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.1)
        pm.save_pretrained(os.path.join(d, case))
        ref[case + ".keys"] = list(pm.base_model.model.state_dict().keys())
        pm.eval()
        with torch.no_grad():
            ref[case + ".logits"] = pm(input_ids=IDS).logits
            merged = pm.merge_and_unload()
            ref[case + ".merged_logits"] = merged(input_ids=IDS).logits
            for k, v in merged.state_dict().items():
                ref[case + ".merged." + k] = v.clone()
    # The "qv" adapter on the base in bfloat16: PEFT keeps the adapter in float32.
    bf16 = LlamaForCausalLM.from_pretrained(os.path.join(d, "base"), dtype=torch.bfloat16).eval()
    pm = PeftModel.from_pretrained(bf16, os.path.join(d, "qv")).eval()
    assert pm.base_model.model.model.layers[0].self_attn.q_proj.lora_A["default"].weight.dtype == torch.float32
    with torch.no_grad():
        ref["qv.bf16_logits"] = pm(input_ids=IDS).logits.float()
    # One training forward of the "qv" adapter as PEFT loads it for training.
    pm = PeftModel.from_pretrained(base_model(), os.path.join(d, "qv"), is_trainable=True)
    pm.train()
    out = pm(input_ids=IDS, labels=IDS)
    out.loss.backward()
    ref["qv.loss"] = out.loss.detach()
    for n, p in pm.named_parameters():
        assert (p.grad is not None) == p.requires_grad, n
        if p.requires_grad:
            ref["qv.grad." + n.removeprefix("base_model.model.")] = p.grad
    torch.save(ref, os.path.join(d, "ref.pt"))


def check():
    got = load_file(os.path.join(d, "go_logits.safetensors"))
    pm = PeftModel.from_pretrained(base_model(), os.path.join(d, "go_adapter")).eval()
    cfg = PeftConfig.from_pretrained(os.path.join(d, "go_adapter"))
    merged = AutoModelForCausalLM.from_pretrained(os.path.join(d, "go_merged"), dtype=torch.float32).eval()
    with torch.no_grad():
        adapter = pm(input_ids=IDS).logits
        merged_logits = merged(input_ids=IDS).logits
        peft_merged = pm.merge_and_unload()(input_ids=IDS).logits
    print(json.dumps({
        "adapter_diff": (adapter - got["adapter"]).abs().max().item(),
        "merged_diff": (merged_logits - got["merged"]).abs().max().item(),
        "peft_merge_diff": (peft_merged - merged_logits).abs().max().item(),
        "r": cfg.r, "lora_alpha": cfg.lora_alpha, "use_rslora": cfg.use_rslora,
        "target_modules": sorted(cfg.target_modules), "task_type": cfg.task_type,
        "trainable": sum(p.requires_grad for p in pm.parameters()),
    }))


{"build": build, "check": check}[mode]()
