"""The Python side of bench/gpu, on the same GPU and libtorch as the Go program:

  bench.py train DIR [--modes eager,default,reduce-overhead] [--cpumem LIB]
                                the training step of DIR/spec.json (written by `gpu train`):
                                the same model (transformers' GPT2LMHeadModel loaded with
                                from_pretrained, torchvision's VisionTransformer or resnet18,
                                or the seed's CNN, with gotrain's state dict), batches,
                                optimizer and timing, once per mode: eager, or the model
                                compiled by torch.compile in its default mode or in
                                "reduce-overhead" (CUDA graphs), compilation timed apart from
                                the steps; one JSON line per mode. --cpumem loads LIB
                                (cgotorch/cpumem.cc compiled with -shared) before the model is
                                built, so that CPU memory is counted as gotrain counts it
  bench.py profile DIR [--modes eager,default]
                                the same step under torch.profiler, each mode's raw events
                                (name, kind, device, thread, start, duration) as one JSON
                                line, which `gpu profile` classifies as it does gotrain's
  bench.py sdpa GO_JSON         the backend torch._fused_sdp_choice picks for each case of
                                `gpu sdpa`'s output, for comparison with gotrain's choice
  bench.py matmul N DEVICE      an N×N matmul in float32, tf32 and bfloat16, timed as
                                cmd/gpucheck times it (one warm-up, 5 synchronised reps)

sdpa and matmul print one JSON object.
"""
import argparse
import ctypes
import gc
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
    if spec["model"] == "vit":
        from torchvision.models import VisionTransformer

        c = spec["vit"]
        m = VisionTransformer(image_size=c["ImageSize"], patch_size=c["PatchSize"], num_layers=c["NumLayers"],
                              num_heads=c["NumHeads"], hidden_dim=c["HiddenDim"], mlp_dim=c["MLPDim"],
                              num_classes=c["NumClasses"])
        image, classes = (3, c["ImageSize"], c["ImageSize"]), c["NumClasses"]
    elif spec["model"] == "resnet18":
        from torchvision.models import resnet18

        m = resnet18(num_classes=spec["classes"])
        image, classes = (3, spec["side"], spec["side"]), spec["classes"]
    elif spec["model"] == "cnn":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        from seed_loop import make_model  # the seed's CNN, as bench/cmd/bench runs it

        m = make_model("cnn")
        image, classes = (1, 28, 28), spec["classes"]
    else:
        sys.exit("bench.py: unknown model %r in spec.json" % spec["model"])
    m.load_state_dict(torch.load(path, weights_only=True), strict=True)
    torch.manual_seed(1)
    batches = [(torch.randn(spec["batch"], *image), torch.randint(0, classes, (spec["batch"],)))
               for _ in range(spec["pool"])]
    return m, lambda b: torch.nn.functional.cross_entropy(m(b[0]), b[1]), batches, spec["batch"], "samples/s"


class CPUMemory:
    """The counting CPU allocator of cgotorch/cpumem.cc, loaded from LIB (a shared object of
    that file alone): from install on, every CPU storage libtorch allocates is counted."""

    def __init__(self, lib):
        self.lib = ctypes.CDLL(os.path.abspath(lib))  # after `import torch`: the same libc10
        self.lib.cg_cpumem_install()

    def stats(self):
        out = (ctypes.c_int64 * 3)()
        self.lib.cg_cpumem_stats(out)
        return {"allocated": out[0], "peak": out[1], "allocations": out[2]}

    def reset_peak(self):
        self.lib.cg_cpumem_reset_peak()


def reset_peak(dev, cpumem):
    """Starts a peak measurement; returns the bytes allocated now (0 on a CPU without cpumem)."""
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        return torch.cuda.memory_allocated(dev)
    if cpumem:
        cpumem.reset_peak()
        return cpumem.stats()["allocated"]
    return 0


def peak(dev, cpumem):
    if dev.type == "cuda":
        return torch.cuda.max_memory_allocated(dev)
    return cpumem.stats()["peak"] if cpumem else 0


MODES = ("eager", "default", "reduce-overhead")


def train(d, modes=("eager",), cpumem_lib=None):
    """Runs the step of DIR/spec.json once per mode, each on freshly loaded weights and
    batches: eager PyTorch, or the model compiled by torch.compile in that mode. One
    process for all modes shares the imports and, between compile modes, inductor's caches
    (as a user who compiles twice would); the memory of each is measured after the last
    one's is freed."""
    cpumem = CPUMemory(cpumem_lib) if cpumem_lib else None  # before the model, as gotrain
    with open(os.path.join(d, "spec.json")) as f:
        spec = json.load(f)
    out = []
    for mode in modes:
        out.append(train_mode(spec, d, mode, cpumem))
        gc.collect()
        if spec["device"].startswith("cuda"):
            torch.cuda.empty_cache()
    return out


class Run:
    """One mode's model, batches, optimizer and step on freshly loaded weights."""

    def __init__(self, spec, d, mode, cpumem=None):
        self.spec, self.mode = spec, mode
        self.dev = dev = torch.device(spec["device"])
        m, self.loss_of, batches, self.items, self.unit = build(spec, d)
        m.to(dev).train()
        if cpumem:
            # from_pretrained maps the safetensors file: those parameters' storages never
            # went through the allocator, while gotrain's did. Copies into counted memory
            # make the weights count on both sides (tied weights are one Parameter, copied
            # once).
            with torch.no_grad():
                for p in m.parameters():
                    p.data = p.data.clone()
                for mod in m.modules():
                    for k, b in mod._buffers.items():
                        if b is not None:
                            mod._buffers[k] = b.clone()
        self.batches = [tuple(t.to(dev) for t in b) for b in batches]
        self.opt = torch.optim.AdamW(m.parameters(), lr=spec["lr"], weight_decay=spec["weight_decay"], fused=True)
        if mode != "eager":
            # What a Python user writes: the model compiled, the loss and fused AdamW as
            # they are. build's loss closes over the module object, which compile()
            # compiles in place.
            torch._dynamo.reset()
            m.compile(mode=None if mode == "default" else mode)
        self.m = m
        self.graphs = mode == "reduce-overhead" and dev.type == "cuda"
        self.bf16 = spec["precision"] == "bf16"

    def step(self, i, after_zero_grad=None):
        """Runs step i (batch i of the pool, cycled) and returns its loss."""
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()  # a new step: the last one's outputs may be overwritten
        self.opt.zero_grad(set_to_none=True)
        if after_zero_grad:
            after_zero_grad()
        with torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.bf16):
            loss = self.loss_of(self.batches[i % len(self.batches)])
        loss.backward()
        self.opt.step()
        return loss


def train_mode(spec, d, mode, cpumem):
    r = Run(spec, d, mode, cpumem)
    dev = r.dev
    times, warm, first, last, baseline = [], [], None, None, 0
    n = spec["warmup"] + spec["steps"]
    for i in range(n):
        sync(dev)
        t = time.perf_counter()
        if i == spec["warmup"]:
            # as gotrain: the peak from after zero_grad of the first timed step
            def mark():
                nonlocal baseline
                baseline = reset_peak(dev, cpumem)
            loss = r.step(i, mark)
        else:
            loss = r.step(i)
        sync(dev)
        (times if i >= spec["warmup"] else warm).append(time.perf_counter() - t)
        if i == 0:
            first = loss.item()
        if i == n - 1:
            last = loss.item()
    med = statistics.median(times)
    pk = peak(dev, cpumem)
    impl = {"eager": "python", "default": "python-compile"}.get(mode, "python-" + mode)
    res = {"impl": impl, "mode": mode, "model": spec["model"], "precision": spec["precision"], "median_step_s": med,
           "step_s": times, "items_per_s": r.items / med, "unit": r.unit,
           "peak_memory_mib": pk / 2**20 if dev.type == "cuda" else 0.0,
           "baseline_bytes": baseline, "peak_bytes": pk, "first_loss": first, "last_loss": last}
    if mode != "eager":
        # Compilation (and, with reduce-overhead on CUDA, graph recording) happens in the
        # warm-up steps: their time beyond that many ordinary steps. The first step alone
        # is most of it.
        res["warmup_s"] = warm
        res["compile_s"] = max(0.0, sum(warm) - len(warm) * med)
    del r, loss
    return res


# Kineto's activity types as `gpu profile` reads them (torch.ProfileKind).
PROFILE_KINDS = {"cpu_op": 0, "kernel": 1, "gpu_memcpy": 2, "gpu_memset": 3, "cuda_runtime": 4, "cuda_driver": 4}


def profile(d, modes):
    """Profiles spec["steps"] steps after spec["warmup"] of each mode with torch.profiler
    and prints each mode's raw events as one JSON line, for `gpu profile` to classify as
    it classifies gotrain's."""
    from torch.profiler import ProfilerActivity
    with open(os.path.join(d, "spec.json")) as f:
        spec = json.load(f)
    for mode in modes:
        r = Run(spec, d, mode)
        for i in range(spec["warmup"]):
            r.step(i)
        sync(r.dev)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if r.dev.type == "cuda" else [])
        with torch.profiler.profile(activities=acts) as prof:
            for i in range(spec["steps"]):
                r.step(spec["warmup"] + i)
            sync(r.dev)
        events = []
        for e in prof.profiler.kineto_results.events():
            kind = PROFILE_KINDS.get(str(e.activity_type()).lower(), 5)
            events.append([e.name(), kind, "cuda" in str(e.device_type()).lower(), e.start_thread_id(),
                           e.start_ns(), e.duration_ns()])
        impl = {"eager": "python", "default": "python-compile"}.get(mode, "python-" + mode)
        print(json.dumps({"impl": impl, "mode": mode, "model": spec["model"], "precision": spec["precision"],
                          "device": spec["device"], "events": events}), flush=True)
        del r
        gc.collect()


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
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "train":
        ap = argparse.ArgumentParser(prog="bench.py train")
        ap.add_argument("dir")
        ap.add_argument("--modes", default="eager",
                        help="comma-separated: eager, default (torch.compile), reduce-overhead")
        ap.add_argument("--cpumem", help="cgotorch/cpumem.cc compiled with -shared: count CPU memory as gotrain does")
        a = ap.parse_args(sys.argv[2:])
        modes = a.modes.split(",")
        bad = [x for x in modes if x not in MODES]
        if bad:
            sys.exit("bench.py train: unknown mode %s (%s)" % (", ".join(bad), ", ".join(MODES)))
        for r in train(a.dir, modes, a.cpumem):
            print(json.dumps(r), flush=True)
        sys.exit(0)
    elif cmd == "profile":
        ap = argparse.ArgumentParser(prog="bench.py profile")
        ap.add_argument("dir")
        ap.add_argument("--modes", default="eager")
        a = ap.parse_args(sys.argv[2:])
        profile(a.dir, a.modes.split(","))
        sys.exit(0)
    elif cmd == "sdpa":
        res = sdpa(sys.argv[2])
    elif cmd == "matmul":
        res = matmul(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit("usage: bench.py train DIR [--modes eager,default,reduce-overhead] [--cpumem LIB] | profile DIR [--modes ...] | sdpa GO_JSON | matmul N DEVICE")
    print(json.dumps(res))
