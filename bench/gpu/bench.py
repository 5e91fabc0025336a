"""The Python side of bench/gpu, on the same GPU and libtorch as the Go program:

  bench.py train DIR            the training step of DIR/spec.json (written by `gpu train`):
                                the same model (transformers' GPT2LMHeadModel loaded with
                                from_pretrained, or torchvision's VisionTransformer with
                                gotrain's state dict), batches, optimizer and timing
  bench.py sdpa GO_JSON         the backend torch._fused_sdp_choice picks for each case of
                                `gpu sdpa`'s output, for comparison with gotrain's choice
  bench.py matmul N DEVICE      an N×N matmul in float32, tf32 and bfloat16, timed as
                                cmd/gpucheck times it (one warm-up, 5 synchronised reps)

Each prints one JSON object.
"""
import json
import os
import statistics
import sys
import time

import torch

# torch.nn.attention.SDPBackend's values, as gotrain's torch.SDPBackend numbers them.
SDP_NAMES = {-1: "ERROR", 0: "MATH", 1: "FLASH_ATTENTION", 2: "EFFICIENT_ATTENTION", 3: "CUDNN_ATTENTION", 4: "OVERRIDEABLE"}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def build(spec, d):
    """The model, its loss over a batch, the batches (drawn as the Go side draws them) and
    the items per step."""
    path = os.path.join(d, spec["weights"])
    if spec["model"] == "gpt":
        from transformers import GPT2LMHeadModel

        m = GPT2LMHeadModel.from_pretrained(path, attn_implementation="sdpa")
        vocab = m.config.vocab_size
        torch.manual_seed(1)  # after the model, whose construction draws
        batches = [(torch.randint(0, vocab, (spec["batch"], spec["seq"])),) for _ in range(spec["pool"])]
        return m, lambda b: m(b[0], labels=b[0]).loss, batches, spec["batch"] * spec["seq"], "tokens/s"
    from torchvision.models import VisionTransformer

    c = spec["vit"]
    m = VisionTransformer(image_size=c["ImageSize"], patch_size=c["PatchSize"], num_layers=c["NumLayers"],
                          num_heads=c["NumHeads"], hidden_dim=c["HiddenDim"], mlp_dim=c["MLPDim"],
                          num_classes=c["NumClasses"])
    m.load_state_dict(torch.load(path, weights_only=True), strict=True)
    s = c["ImageSize"]
    torch.manual_seed(1)
    batches = [(torch.randn(spec["batch"], 3, s, s), torch.randint(0, c["NumClasses"], (spec["batch"],)))
               for _ in range(spec["pool"])]
    return m, lambda b: torch.nn.functional.cross_entropy(m(b[0]), b[1]), batches, spec["batch"], "samples/s"


def train(d):
    with open(os.path.join(d, "spec.json")) as f:
        spec = json.load(f)
    dev = torch.device(spec["device"])
    m, loss_of, batches, items, unit = build(spec, d)
    m.to(dev).train()
    batches = [tuple(t.to(dev) for t in b) for b in batches]
    opt = torch.optim.AdamW(m.parameters(), lr=spec["lr"], weight_decay=spec["weight_decay"], fused=True)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    bf16 = spec["precision"] == "bf16"
    times, first, last = [], None, None
    n = spec["warmup"] + spec["steps"]
    for i in range(n):
        sync(dev)
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(batches[i % len(batches)])
        loss.backward()
        opt.step()
        sync(dev)
        if i >= spec["warmup"]:
            times.append(time.perf_counter() - t)
        if i == 0:
            first = loss.item()
        if i == n - 1:
            last = loss.item()
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else 0.0
    return {"impl": "python", "model": spec["model"], "precision": spec["precision"], "median_step_s": med,
            "step_s": times, "items_per_s": items / med, "unit": unit, "peak_memory_mib": peak,
            "first_loss": first, "last_loss": last}


def sdpa(go_json):
    with open(go_json) as f:
        go = json.load(f)
    dev = torch.device(go["device"])
    out = []
    for c in go["cases"]:
        b, h, l, e = c["shape"]
        dt = DTYPES[c["dtype"]]
        q, k, v = (torch.randn(b, l, h, e, device=dev).to(dt).transpose(1, 2).requires_grad_() for _ in range(3))
        choice = torch._fused_sdp_choice(q, k, v, None, 0.0, c["causal"], scale=e ** -0.5)
        out.append({"model": c["model"], "dtype": c["dtype"], "backend": SDP_NAMES.get(int(choice), str(choice))})
    return {"torch": torch.__version__, "cases": out}


def matmul(n, device):
    dev = torch.device(device)
    out = []
    for name, dt, precision in (("float32", torch.float32, "highest"), ("tf32", torch.float32, "high"),
                                ("bfloat16", torch.bfloat16, "highest")):
        torch.set_float32_matmul_precision(precision)
        a = torch.randn(n, n, dtype=dt, device=dev)
        b = torch.randn(n, n, dtype=dt, device=dev)
        a @ b
        sync(dev)
        reps = 5
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(dev)
        sec = (time.perf_counter() - t) / reps
        out.append({"dtype": name, "n": n, "seconds": sec, "tflops": 2 * n ** 3 / sec / 1e12})
        del a, b
    torch.set_float32_matmul_precision("highest")
    return {"torch": torch.__version__, "matmul": out}


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "train":
        res = train(sys.argv[2])
    elif cmd == "sdpa":
        res = sdpa(sys.argv[2])
    elif cmd == "matmul":
        res = matmul(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit("usage: bench.py train DIR | sdpa GO_JSON | matmul N DEVICE")
    print(json.dumps(res))
