"""Reference side of the LoRA-on-experts tests (moe_test.go).

usage: python peft_moe.py build DIR   writes, for mixtral and qwen3_moe, DIR/ARCH/base (a
                                      tiny random model, saved per expert as
                                      save_pretrained does), DIR/ARCH/peft (a PEFT adapter
                                      on q_proj, v_proj, the router "gate" and the experts'
                                      gate_up_proj and down_proj through target_parameters)
                                      and DIR/ARCH/ref.pt: the adapted logits, one training
                                      forward's loss and adapter gradients, the merged
                                      logits and the PeftModel's inner state-dict keys; and
                                      DIR/ARCH/all_linear, a PEFT all-linear adapter, with
                                      its logits in ref.pt.
       python peft_moe.py check DIR   loads DIR/ARCH/go (an adapter gotrain saved) onto
                                      DIR/ARCH/base with PeftModel.from_pretrained and checks
                                      its logits against DIR/ARCH/go.pt's; prints "ok".
"""

import collections
import os
import sys

import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

mode, d = sys.argv[1], sys.argv[2]
SMALL = dict(vocab_size=61, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=32, num_experts_per_tok=2)
ARCHS = {
    "mixtral": (MixtralConfig, MixtralForCausalLM, dict(SMALL, intermediate_size=12, num_local_experts=4)),
    # Layer 1 dense, so that all-linear has an MLP to select.
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                  dict(SMALL, intermediate_size=20, moe_intermediate_size=12, num_experts=3, head_dim=8,
                       norm_topk_prob=True, mlp_only_layers=[1])),
}


def randomize(m, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.normal_(1, 0.2) if "norm" in n else p.normal_(0, 0.3)


def lora_config():
    return LoraConfig(r=2, lora_alpha=6, target_modules=["q_proj", "v_proj", "gate"],
                      target_parameters=["experts.gate_up_proj", "experts.down_proj"], init_lora_weights=False)


def v4_adapter(arch, kw, base, out, ids):
    import json
    from safetensors.torch import save_file

    if arch == "mixtral":
        block, names, experts, inter = "block_sparse_moe", ("w1", "w3", "w2"), kw["num_local_experts"], kw["intermediate_size"]
    else:
        block, names, experts, inter = "mlp", ("gate_proj", "up_proj", "down_proj"), kw["num_experts"], kw["moe_intermediate_size"]
    h, r = kw["hidden_size"], 2
    g = torch.Generator().manual_seed(5)
    t = {}

    def lora(path, a_in, b_out):
        t[f"base_model.model.{path}.lora_A.weight"] = torch.randn(r, a_in, generator=g) * 0.2
        t[f"base_model.model.{path}.lora_B.weight"] = torch.randn(b_out, r, generator=g) * 0.2

    sparse = [0, 1] if arch == "mixtral" else [0]
    for i in range(kw["num_hidden_layers"]):
        heads = kw["num_attention_heads"]
        lora(f"model.layers.{i}.self_attn.q_proj", h, heads * kw.get("head_dim", h // heads))
        if i not in sparse:
            continue
        lora(f"model.layers.{i}.{block}.gate", h, experts)
        for e in range(experts):
            p = f"model.layers.{i}.{block}.experts.{e}"
            lora(f"{p}.{names[0]}", h, inter)
            lora(f"{p}.{names[1]}", h, inter)
            lora(f"{p}.{names[2]}", inter, h)
    os.makedirs(out)
    save_file(t, os.path.join(out, "adapter_model.safetensors"), metadata={"format": "pt"})
    cfg = LoraConfig(r=r, lora_alpha=5, target_modules=["q_proj", "gate", *names]).to_dict()
    cfg["target_modules"] = sorted(cfg["target_modules"])
    cfg["peft_type"], cfg["task_type"] = "LORA", None
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    pm = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), out)
    pm.eval()
    with torch.no_grad():
        return pm(input_ids=ids).logits


if mode == "build":
    for arch, (cfg_cls, model_cls, kw) in ARCHS.items():
        out = os.path.join(d, arch)
        m = model_cls(cfg_cls(**kw))
        randomize(m, 1)
        m.save_pretrained(os.path.join(out, "base"))
        torch.manual_seed(2)
        pm = get_peft_model(m, lora_config())
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_" in n:
                    p.normal_(0, 0.2)
        pm.save_pretrained(os.path.join(out, "peft"))
        ids = torch.randint(0, 61, (2, 7), generator=torch.Generator().manual_seed(3))
        r = {"ids": ids}
        pm.eval()
        with torch.no_grad():
            r["logits"] = pm(input_ids=ids).logits
        r["keys"] = list(pm.base_model.model.state_dict().keys())
        pm.train()
        loss = pm(input_ids=ids, labels=ids).loss
        loss.backward()
        r["loss"] = loss.detach()
        r["grads"] = collections.OrderedDict(
            (n[len("base_model.model."):], p.grad.clone()) for n, p in pm.named_parameters() if p.requires_grad)
        pm.eval()
        merged = pm.merge_and_unload()
        with torch.no_grad():
            r["merged"] = merged(input_ids=ids).logits
        # all-linear, as PEFT resolves it on these models: the attention projections and,
        # through target_parameters, the router and the experts (gate_up_proj with
        # twice the rank and alpha, as the v4 gate and up projections it fuses).
        fresh = AutoModelForCausalLM.from_pretrained(os.path.join(out, "base"))
        torch.manual_seed(4)
        pa = get_peft_model(fresh, LoraConfig(r=2, lora_alpha=3, target_modules="all-linear", init_lora_weights=False))
        with torch.no_grad():
            for n, p in pa.named_parameters():
                if "lora_" in n:
                    p.normal_(0, 0.2)
        pa.save_pretrained(os.path.join(out, "all_linear"))
        pa.eval()
        with torch.no_grad():
            r["all_logits"] = pa(input_ids=ids).logits
        # An adapter as PEFT wrote it on transformers 4, where the experts and the router
        # were nn.Linear layers: LoRA per expert and projection, which PEFT converts to
        # the fused parameters' adapters at load.
        r["v4_logits"] = v4_adapter(arch, kw, os.path.join(out, "base"), os.path.join(out, "v4"), ids)
        torch.save(r, os.path.join(out, "ref.pt"))
        print(arch)
elif mode == "check":
    for arch in ARCHS:
        out = os.path.join(d, arch)
        got = torch.load(os.path.join(out, "go.pt"))
        base = AutoModelForCausalLM.from_pretrained(os.path.join(out, "base"))
        pm = PeftModel.from_pretrained(base, os.path.join(out, "go"))
        pm.eval()
        with torch.no_grad():
            torch.testing.assert_close(pm(input_ids=got["ids"]).logits, got["logits"], rtol=0, atol=1e-5)
    print("ok")
