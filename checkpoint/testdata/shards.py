# Sharded safetensors interop for package checkpoint, run by TestSafetensorsDirPython
# with the real transformers, huggingface_hub and safetensors, as one process in two
# phases (so that the libraries are imported once):
#
#   python shards.py DIR
#     1. writes DIR/hf_model (a seeded tiny GPT-2, save_pretrained with
#        max_shard_size="20KB") and DIR/hf_sd (a state dict of every safetensors dtype,
#        save_torch_state_dict with max_shard_size=4096), then prints one JSON line:
#        {"model": DESC, "sd": DESC, "sd_order": [names]}, DESC = {name: [dtype, shape,
#        sha256 of the bytes]}.
#     2. reads one line "GO_SD GO_MODEL" from stdin: directories the Go side wrote
#        sharded, and checks that huggingface_hub's loader, transformers' load_state_dict
#        and safetensors' safe_open read GO_SD as the state dict of step 1, bit for bit,
#        and that GPT2LMHeadModel.from_pretrained(GO_MODEL) has the state dict of
#        hf_model; it prints {"ok": true, ...} or exits non-zero.
import hashlib
import json
import os
import sys

import torch
from huggingface_hub import load_torch_model, save_torch_state_dict
from safetensors import safe_open
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.modeling_utils import load_state_dict

ST = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
      torch.uint8: "U8", torch.bool: "BOOL"}


def raw(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def desc(sd):
    return {k: [ST[v.dtype], list(v.shape), hashlib.sha256(raw(v)).hexdigest()] for k, v in sd.items()}


def state_dict():
    g = torch.Generator().manual_seed(3)
    sd = {}
    for i, dt in enumerate([torch.float32, torch.bfloat16, torch.float16, torch.float64]):
        x = torch.randn(8, 16, generator=g).to(dt)
        x[0, 0] = float("nan")
        sd["w%d_%s" % (i, str(dt)[6:])] = x
    sd["big"] = torch.randn(40, 40, generator=g)  # 6400 bytes: a shard of its own
    for dt in [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]:
        sd["i_" + str(dt)[6:]] = torch.randint(-100 if dt != torch.uint8 else 0, 100, (30,), generator=g).to(dt)
    sd["mask"] = torch.rand(7, 3, generator=g) > 0.5
    sd["scalar"] = torch.tensor(2.5)
    sd["empty"] = torch.zeros(0, 5)
    sd["tail"] = torch.arange(500, dtype=torch.float32)
    return sd


def model():
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    return GPT2LMHeadModel(cfg).eval()


def same(a, b, what):
    if a.dtype != b.dtype or a.shape != b.shape or raw(a) != raw(b):
        sys.exit("%s: %s %s differs from %s %s" % (what, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape)))


def main(d):
    m = model()
    m.config.bos_token_id = m.config.eos_token_id = 0  # in the tiny vocabulary
    m.save_pretrained(os.path.join(d, "hf_model"), max_shard_size="20KB")
    sd = state_dict()
    os.makedirs(os.path.join(d, "hf_sd"))
    save_torch_state_dict(sd, os.path.join(d, "hf_sd"), max_shard_size=4096)
    files = {}
    for root in ["hf_model", "hf_sd"]:
        files[root] = sorted(os.listdir(os.path.join(d, root)))
    print(json.dumps({"model": desc(m.state_dict()), "sd": desc(sd), "sd_order": list(sd), "files": files}), flush=True)

    go_sd, go_model = sys.stdin.readline().split()
    # huggingface_hub's loader: finds the index, reads every shard, strict names.
    holder = torch.nn.Module()
    for k, v in sd.items():
        holder.register_buffer(k, torch.empty_like(v))
    res = load_torch_model(holder, go_sd, strict=True)
    for k, v in sd.items():
        same(getattr(holder, k), v, "load_torch_model " + k)
    # transformers' and safetensors' readers, shard by shard as the index says.
    with open(os.path.join(go_sd, "model.safetensors.index.json")) as f:
        index = json.load(f)
    if sorted(index["weight_map"]) != sorted(sd):
        sys.exit("index names %s" % sorted(index["weight_map"]))
    seen = set()
    for shard in sorted(set(index["weight_map"].values())):
        path = os.path.join(go_sd, shard)
        loaded = load_state_dict(path)
        with safe_open(path, framework="pt") as f:
            if f.metadata().get("format") != "pt":
                sys.exit("%s: metadata %s" % (shard, f.metadata()))
            for k in f.keys():
                if index["weight_map"][k] != shard:
                    sys.exit("%s holds %s" % (shard, k))
                same(f.get_tensor(k), sd[k], "safe_open " + k)
                same(loaded[k], sd[k], "load_state_dict " + k)
                seen.add(k)
    if seen != set(sd):
        sys.exit("shards hold %s" % sorted(seen))
    # transformers' model loader on the model directory Go wrote.
    back, info = GPT2LMHeadModel.from_pretrained(go_model, output_loading_info=True)
    if any(info[k] for k in ["missing_keys", "unexpected_keys", "mismatched_keys"]):
        sys.exit("from_pretrained: %s" % info)
    want = m.state_dict()
    got = back.state_dict()
    if sorted(want) != sorted(got):
        sys.exit("from_pretrained names differ")
    for k in want:
        same(got[k], want[k], "from_pretrained " + k)
    print(json.dumps({"ok": True, "total_size": index["metadata"]["total_size"], "shards": len(set(index["weight_map"].values()))}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
