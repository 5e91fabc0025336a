"""Reference side of the decoder parity tests (decoder_test.go).

usage: python decoders.py DIR ARCH

For each case of ARCH it builds a tiny transformers model with random weights, saves it
as a Hugging Face directory DIR/CASE/hf (float32, v5 config.json, sharded for some
cases), DIR/CASE/hf_v4 (the same weights with the config rewritten in the v4 form) and
DIR/CASE/bf16 (bfloat16 weights), and writes DIR/CASE/ref.pt: the state dict, the
logits, loss and gradients of one training forward, the state after an AdamW step,
greedy generations (cached and uncached, one prompt and a left-padded batch of two) and
the bfloat16 model's state and logits; a rope-type case writes only the logits and the
rotary inv_freq of a long then a short forward. It prints the case names, one per line.
"""

import collections
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

d, arch = sys.argv[1], sys.argv[2]
# Tiny matrices: threads only contend (the tests run beside others).
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

SMALL = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             bos_token_id=1, eos_token_id=96)

# case name -> (config class, model class, config kwargs, extra: sharding, rope-only)
CASES = {
    "llama": {
        # Grouped-query attention, biases everywhere, a padding token, untied, sharded.
        "llama": (LlamaConfig, LlamaForCausalLM,
                  dict(SMALL, attention_bias=True, mlp_bias=True, pad_token_id=0), dict(shard="12KB")),
        # Llama 3.1 rope scaling (with high, medium and low frequencies) and tied embeddings.
        "llama3_tied": (LlamaConfig, LlamaForCausalLM,
                        dict(SMALL, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                             max_position_embeddings=128,
                             eos_token_id=[95, 96],
                             rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                                  low_freq_factor=1.0, high_freq_factor=4.0,
                                                  original_max_position_embeddings=64)), {}),
        "llama_linear": (LlamaConfig, LlamaForCausalLM,
                         dict(SMALL, rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0)),
                         dict(rope_only=True)),
        # max_position_embeddings 16: the 24-token forward grows the base, the next resets it.
        "llama_dynamic": (LlamaConfig, LlamaForCausalLM,
                          dict(SMALL, max_position_embeddings=16,
                               rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=3.0)),
                          dict(rope_only=True)),
        # YaRN over an original context of 16: the default betas and mscale, truncated.
        "llama_yarn": (LlamaConfig, LlamaForCausalLM,
                       dict(SMALL, rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                                        original_max_position_embeddings=16)),
                       dict(rope_only=True)),
        # YaRN with DeepSeek's mscale pair, other betas and no truncation (a band of
        # dimensions 0.21 to 1.41, which truncation would make 0 to 2).
        "llama_yarn_mscale": (LlamaConfig, LlamaForCausalLM,
                              dict(SMALL, rope_parameters=dict(rope_type="yarn", rope_theta=100.0, factor=8.0,
                                                               original_max_position_embeddings=16, beta_fast=2.0,
                                                               beta_slow=0.5, mscale=0.707, mscale_all_dim=1.0,
                                                               truncate=False)),
                              dict(rope_only=True)),
        # LongRoPE: the 24-token forward passes the original 16 positions (long
        # factors), the 10-token one does not (short factors); attention factor from
        # 64/16.
        "llama_longrope": (LlamaConfig, LlamaForCausalLM,
                           dict(SMALL, rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                            original_max_position_embeddings=16,
                                                            short_factor=[1.0, 1.2, 1.5, 2.0],
                                                            long_factor=[1.5, 3.0, 6.0, 12.0])),
                           dict(rope_only=True)),
    },
    "qwen2": {
        # As Qwen2.5's small models: tied, sliding window present but off.
        "qwen2_tied": (Qwen2Config, Qwen2ForCausalLM,
                       dict(SMALL, tie_word_embeddings=True, use_sliding_window=False, sliding_window=32,
                            rope_parameters=dict(rope_type="default", rope_theta=1000000.0)), dict(shard="20KB")),
        # Layer 1 slides over 4 positions.
        "qwen2_sliding": (Qwen2Config, Qwen2ForCausalLM,
                          dict(SMALL, use_sliding_window=True, sliding_window=4, max_window_layers=1), {}),
    },
    "qwen3": {
        # Biases on all four projections, a head_dim other than hidden/heads, tied,
        # sharded.
        "qwen3_tied": (Qwen3Config, Qwen3ForCausalLM,
                       dict(SMALL, head_dim=16, attention_bias=True, tie_word_embeddings=True,
                            rope_parameters=dict(rope_type="default", rope_theta=1000000.0)), dict(shard="20KB")),
        # Layer 1 slides over 4 positions.
        "qwen3_sliding": (Qwen3Config, Qwen3ForCausalLM,
                          dict(SMALL, head_dim=8, use_sliding_window=True, sliding_window=4, max_window_layers=1), {}),
        # YaRN with an explicit attention factor.
        "qwen3_yarn": (Qwen3Config, Qwen3ForCausalLM,
                       dict(SMALL, head_dim=16, rope_parameters=dict(rope_type="yarn", rope_theta=1000000.0, factor=2.0,
                                                                     original_max_position_embeddings=16,
                                                                     attention_factor=1.25)),
                       dict(rope_only=True)),
    },
    "phi3": {
        # Half of each head rotated, a 4-position window on every layer (generation runs
        # past it), a padding token, tied, sharded; embd_pdrop is in the config but
        # Phi3Model does not apply it.
        "phi3": (Phi3Config, Phi3ForCausalLM,
                 dict(SMALL, pad_token_id=0, sliding_window=4, tie_word_embeddings=True, embd_pdrop=0.1,
                      rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5)),
                 dict(shard="20KB")),
        # LongRoPE over an original context of 16 with three quarters of each head
        # rotated: generation passes position 16, where transformers drops the cache and
        # recomputes every position with the long factors.
        "phi3_longrope": (Phi3Config, Phi3ForCausalLM,
                          dict(SMALL, pad_token_id=0, original_max_position_embeddings=16,
                               rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                                                    short_factor=[1.0, 1.3, 1.9], long_factor=[2.0, 5.0, 11.0])),
                          {}),
    },
    "olmo2": {
        # q/k norms over the whole projections (fewer key/value heads), biases, a
        # padding token.
        "olmo2": (Olmo2Config, Olmo2ForCausalLM,
                  dict(SMALL, attention_bias=True, pad_token_id=0), dict(shard="20KB")),
    },
    "gemma3_text": {
        # Layer 0 slides over 4 positions with the local base, layer 1 is global with
        # linear scaling; biases, query_pre_attn_scalar other than head_dim, tied.
        "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM,
                   dict(SMALL, head_dim=16, query_pre_attn_scalar=24, attention_bias=True, sliding_window=4,
                        layer_types=["sliding_attention", "full_attention"], pad_token_id=0,
                        rope_parameters={"full_attention": dict(rope_type="linear", rope_theta=1000000.0, factor=2.0),
                                         "sliding_attention": dict(rope_type="default", rope_theta=10000.0)}),
                   dict(shard="20KB")),
        # Soft-capped logits, untied; attn_logit_softcapping is in the config but
        # Gemma3Attention does not apply it (eager, so that no SDPA path could).
        "gemma3_softcap": (Gemma3TextConfig, Gemma3ForCausalLM,
                           dict(SMALL, head_dim=8, sliding_window=3, layer_types=["sliding_attention", "full_attention"],
                                attn_logit_softcapping=2.0, final_logit_softcapping=3.0, tie_word_embeddings=False),
                           dict(eager=True)),
    },
    "gemma2": {
        # Soft-capped attention (eager, as transformers requires) and logits, a sliding
        # layer of 3 positions, query_pre_attn_scalar other than head_dim, biases, tied.
        "gemma2": (Gemma2Config, Gemma2ForCausalLM,
                   dict(SMALL, head_dim=16, query_pre_attn_scalar=20, attention_bias=True, sliding_window=3,
                        attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                        rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
                   dict(eager=True, shard="20KB")),
    },
    "mistral": {
        "mistral": (MistralConfig, MistralForCausalLM, dict(SMALL, sliding_window=5), dict(shard="20KB")),
    },
    "mixtral": {
        # 4 experts, 2 per token, a 5-position sliding window, the load-balancing loss in
        # the training loss; saved per expert under block_sparse_moe (save_pretrained's
        # default, the Hub's layout), sharded.
        "mixtral": (MixtralConfig, MixtralForCausalLM,
                    dict(SMALL, num_local_experts=4, num_experts_per_tok=2, sliding_window=5,
                         output_router_logits=True, router_aux_loss_coef=0.05), dict(shard="20KB")),
        # 3 of 5 experts, tied, no auxiliary loss; saved fused (save_original_format=False).
        "mixtral_fused": (MixtralConfig, MixtralForCausalLM,
                          dict(SMALL, num_local_experts=5, num_experts_per_tok=3, tie_word_embeddings=True),
                          dict(fused=True)),
    },
    "qwen3_moe": {
        # Per-head q/k norms with biases, head_dim other than hidden/heads, renormalised
        # routing weights, the auxiliary loss; layer 1 dense (mlp_only_layers); per expert.
        "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                      dict(SMALL, head_dim=16, attention_bias=True, num_experts=4, num_experts_per_tok=2,
                           moe_intermediate_size=24, norm_topk_prob=True, mlp_only_layers=[1],
                           output_router_logits=True, router_aux_loss_coef=0.05), {}),
        # decoder_sparse_step 2 (layer 0 dense, 1 sparse), weights not renormalised, every
        # layer sliding over 4 positions, tied; saved fused.
        "qwen3_moe_step": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                           dict(SMALL, head_dim=8, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
                                decoder_sparse_step=2, use_sliding_window=True, sliding_window=4,
                                tie_word_embeddings=True), dict(fused=True)),
    },
}


def randomize(m):
    # Weights larger than the initial ones (and norms away from one), so that greedy
    # decoding does not repeat one token and every parameter matters.
    torch.manual_seed(1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.normal_(1, 0.2)
            else:
                p.normal_(0, 0.3)


def record(m, ids):
    state = collections.OrderedDict((k, v.clone()) for k, v in m.state_dict().items())
    m.train()
    out = m(ids, labels=ids)
    out.loss.backward()
    grads = collections.OrderedDict((n, p.grad.clone()) for n, p in m.named_parameters())
    aux = {} if getattr(out, "aux_loss", None) is None else {"aux_loss": out.aux_loss.detach()}
    torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-3).step()
    after = collections.OrderedDict((k, v.clone()) for k, v in m.state_dict().items())
    m.load_state_dict(state)
    m.zero_grad()
    m.eval()
    return dict(aux, state=state, logits=out.logits.detach(), loss=out.loss.detach(), grads=grads, after=after)


def until_eos(row, eos):
    out = []
    for tok in row:
        out.append(tok)
        if tok in eos:
            break
    return out


def greedy(m, ids, mask=None, use_cache=True, n=20):
    out = m.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=0,
                     use_cache=use_cache)
    return out[:, ids.shape[1]:]


def v4_config(src, dst):
    """Rewrites a v5 config.json as transformers 4 wrote it: rope_theta and rope_scaling
    at the top level (the type under the old "type" key), torch_dtype, no layer_types
    (Gemma 3: the global rope as rope_theta and rope_scaling, the local base as
    rope_local_base_freq, and sliding_window_pattern; Phi-3: partial_rotary_factor at the
    top level)."""
    c = json.load(open(src))
    rope = c.pop("rope_parameters")
    if "sliding_attention" in rope:
        c["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
        types = c["layer_types"]
        c["sliding_window_pattern"] = types.index("full_attention") + 1
        assert all((t == "full_attention") == ((i + 1) % c["sliding_window_pattern"] == 0) for i, t in enumerate(types))
        rope = rope["full_attention"]
        # Gemma 3's files on the Hub spell rope_scaling's type rope_type, the only
        # spelling transformers 5 reads for it.
        c["rope_theta"] = rope.pop("rope_theta")
        c["rope_scaling"] = None if rope["rope_type"] == "default" else rope
        c["torch_dtype"] = c.pop("dtype")
        c.pop("layer_types")
        json.dump(c, open(dst, "w"), indent=2)
        return
    c["rope_theta"] = rope.pop("rope_theta")
    if c["model_type"] == "phi3":
        # Phi-3's files: partial_rotary_factor at the top level, the original context
        # only there.
        c["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
        rope.pop("original_max_position_embeddings", None)
    rtype = rope.pop("rope_type")
    c["rope_scaling"] = None if rtype == "default" else dict(rope, type=rtype)
    c["torch_dtype"] = c.pop("dtype")
    c.pop("layer_types", None)
    if c["model_type"] == "qwen3_moe":
        c["num_experts"] = c.pop("num_local_experts")
    json.dump(c, open(dst, "w"), indent=2)


def make(name, cfg_cls, model_cls, kw, extra):
    out = os.path.join(d, name)
    os.makedirs(out)
    cfg = cfg_cls(**kw)
    torch.manual_seed(0)
    if extra.get("eager"):
        # Soft-capped attention has no SDPA path.
        cfg._attn_implementation = "eager"
    m = model_cls(cfg)
    assert m.config._attn_implementation == ("eager" if extra.get("eager") else "sdpa"), m.config._attn_implementation
    randomize(m)
    m.eval()
    g = torch.Generator().manual_seed(2)
    r = {}
    if extra.get("rope_only"):
        ids = torch.randint(0, cfg.vocab_size, (2, 24), generator=g)
        rope = m.model.rotary_emb
        with torch.no_grad():
            r["ids"] = ids
            r["logits"] = m(ids).logits
            r["inv_freq"] = rope.inv_freq.clone()
            r["ids_short"] = ids[:, :10]
            r["logits_short"] = m(ids[:, :10]).logits
            r["inv_freq_short"] = rope.inv_freq.clone()
            # The factor on the cosines and sines (yarn's and longrope's attention factor).
            r["attention_scaling"] = torch.tensor(rope.attention_scaling, dtype=torch.float64)
        r["state"] = collections.OrderedDict((k, v.clone()) for k, v in m.state_dict().items())
        torch.save(r, os.path.join(out, "ref.pt"))
        cfg.save_pretrained(os.path.join(out, "hf"))
        return
    ids = torch.randint(0, cfg.vocab_size, (3, 11), generator=g)
    r.update(record(m, ids))
    r["ids"] = ids
    eos = cfg.eos_token_id if isinstance(cfg.eos_token_id, list) else [cfg.eos_token_id]
    prompt = ids[:1, :6]
    r["prompt"] = prompt[0]
    # generate fails with output_router_logits (load_balancing_loss_func gets the
    # cache-long attention mask with one position's router logits); it only adds a loss.
    router_logits = getattr(cfg, "output_router_logits", False)
    cfg.output_router_logits = False
    cached = greedy(m, prompt)[0].tolist()
    uncached = greedy(m, prompt, use_cache=False)[0].tolist()
    assert cached == uncached, (cached, uncached)
    r["greedy"] = torch.tensor(until_eos(cached, eos))
    # A batch of a 6-token and a 3-token prompt, the shorter left-padded.
    short = ids[1, :3]
    batch = torch.zeros(2, 6, dtype=torch.long)
    batch[0], batch[1, 3:] = prompt[0], short
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :3] = 0
    rows = greedy(m, batch, mask)
    r["short"] = short
    r["greedy_short"] = torch.tensor(until_eos(greedy(m, short[None])[0].tolist(), eos))
    r["batch0"] = torch.tensor(until_eos(rows[0].tolist(), eos))
    r["batch1"] = torch.tensor(until_eos(rows[1].tolist(), eos))
    with torch.no_grad():
        r["eval_logits"] = m(ids).logits
    cfg.output_router_logits = router_logits

    hf = os.path.join(out, "hf")
    if "shard" in extra:
        m.save_pretrained(hf, max_shard_size=extra["shard"])
        assert os.path.exists(os.path.join(hf, "model.safetensors.index.json")), os.listdir(hf)
    else:
        # fused: the experts as transformers 5 holds them, not per expert as the Hub.
        m.save_pretrained(hf, save_original_format=not extra.get("fused"))
    v4 = os.path.join(out, "hf_v4")
    shutil.copytree(hf, v4)
    v4_config(os.path.join(hf, "config.json"), os.path.join(v4, "config.json"))
    # transformers reads the v4 form as the same model (Gemma 3's v4 form computes its
    # linear-scaled frequencies through another path, a few float32 ulps away).
    m4 = model_cls.from_pretrained(v4)
    with torch.no_grad():
        torch.testing.assert_close(m4(ids).logits, r["eval_logits"], rtol=0, atol=1e-5 if "sliding_attention" in m.config.rope_parameters else 0)
    def untyped(p):
        return {k: untyped(v) if isinstance(v, dict) else v for k, v in p.items() if k != "type"}
    assert untyped(m4.config.rope_parameters) == m.config.rope_parameters, (m4.config.rope_parameters, m.config.rope_parameters)

    mb = model_cls.from_pretrained(hf, dtype=torch.bfloat16)
    mb.save_pretrained(os.path.join(out, "bf16"))
    mb.eval()
    with torch.no_grad():
        r["bf16_logits"] = mb(ids).logits.float()
    r["bf16_state"] = collections.OrderedDict((k, v.clone()) for k, v in mb.state_dict().items())
    torch.save(r, os.path.join(out, "ref.pt"))


for name, (cfg_cls, model_cls, kw, extra) in CASES[arch].items():
    make(name, cfg_cls, model_cls, kw, extra)
    print(name)
