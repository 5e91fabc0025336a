"""The Python side of bench/llm: a small Llama, its tokenizer and the same workloads as
the Go side, in transformers, peft and tokenizers on the same libtorch.

  bench.py setup DIR CORPUS   reads DIR/spec.json (written by the Go driver), trains a
                              Llama-3-style byte-level BPE on CORPUS with `tokenizers`,
                              saves LlamaForCausalLM (random weights, seed 0) and the
                              tokenizer in DIR/model, and writes DIR/ids.bin (the
                              corpus's token ids, int64 little-endian, line by line as
                              both tokenizer benchmarks encode it) and DIR/ids.json
  bench.py WORKLOAD DIR [--cpumem LIB]
                              runs one workload on DIR and prints one JSON object:
                              train (full fine-tuning), lora, lora-ckpt (LoRA with
                              gradient checkpointing), gen (greedy generation with the KV
                              cache, then the tokenizer's encode throughput), moe (full
                              fine-tuning of a Mixtral of the same sizes, DIR/moe)

Each workload runs in its own process, so that its peak RSS (VmHWM) is its own. --cpumem
loads cgotorch/cpumem.cc compiled as a shared object (bench/gpu's CPUMemory) before the
model is built, so tensor memory is counted as the Go side counts it.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import sys
import time

BASE_RSS = None  # VmRSS once the libraries are imported, before any work
TENSORS_AT_START = 0  # the counting allocator's bytes when the timed work began


def status_mb(key):
    """A /proc/self/status field (VmRSS, VmHWM) in MiB, read as bench/internal/loopio reads it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def read_spec(d):
    with open(os.path.join(d, "spec.json")) as f:
        return json.load(f)


def corpus_lines(path):
    """The corpus split after each newline, as Go's strings.SplitAfter(text, "\\n") splits it."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = [l + "\n" for l in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return [l for l in lines if l], len(text.encode("utf-8"))


def setup(d, corpus):
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    s = read_spec(d)
    lines, _ = corpus_lines(corpus)
    # Llama 3's split regex and byte-level mapping, its BOS added by the post-processor.
    llama3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(llama3), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=s["vocab"], min_frequency=2, special_tokens=[bos, eos],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))]),
    ])
    model_dir = os.path.join(d, "model")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos).save_pretrained(model_dir)

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                      num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                      num_key_value_heads=s["kv_heads"], max_position_embeddings=s["max_positions"],
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(model_dir)
    # The moe workload's Mixtral: the same sizes, each MLP replaced by the experts.
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    mcfg = MixtralConfig(vocab_size=tok.get_vocab_size(), hidden_size=s["hidden"], intermediate_size=s["moe_intermediate"],
                         num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                         num_key_value_heads=s["kv_heads"], max_position_embeddings=s["max_positions"],
                         num_local_experts=s["experts"], num_experts_per_tok=s["top_k"],
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    moe = MixtralForCausalLM(mcfg)
    moe.save_pretrained(os.path.join(d, "moe"))

    ids = []
    for enc in tok.encode_batch(lines):
        ids.extend(enc.ids)
    raw = torch.tensor(ids, dtype=torch.int64).numpy().tobytes()
    with open(os.path.join(d, "ids.bin"), "wb") as f:
        f.write(raw)
    with open(os.path.join(d, "ids.json"), "w") as f:
        json.dump({"tokens": len(ids), "sha256": hashlib.sha256(raw).hexdigest(),
                   "params": sum(p.numel() for p in model.parameters()),
                   "moe_params": sum(p.numel() for p in moe.parameters())}, f)


def load_cpumem(lib):
    """bench/gpu/bench.py's CPUMemory, loaded from that file rather than copied."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu", "bench.py")
    spec = importlib.util.spec_from_file_location("gpu_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CPUMemory(lib)


def start_counting(cpumem):
    """Starts the peak of the timed work over the bytes held now, as the Go side does
    (transformers leaves float32 weights in the safetensors file's mapping, which the
    allocator does not see; gotrain copies them into its own allocations)."""
    global TENSORS_AT_START
    if cpumem:
        cpumem.reset_peak()
        TENSORS_AT_START = cpumem.stats()["allocated"]


def batches(d, s, torch):
    """The training batches, [batch, seq] each, cut in order from the corpus's ids: only
    the tokens the steps use are read."""
    b, t, n = s["batch"], s["seq"], s["warmup"] + s["steps"]
    with open(os.path.join(d, "ids.bin"), "rb") as f:
        raw = f.read(8 * b * t * n)
    ids = torch.frombuffer(bytearray(raw), dtype=torch.int64)
    if ids.numel() < b * t * n:
        sys.exit(f"bench.py: the corpus has {ids.numel()} tokens; {b * t * n} needed")
    return list(ids.view(n, b, t).unbind(0))


def train(d, s, workload, cpumem, torch):
    from transformers import AutoModelForCausalLM

    # moe: the Mixtral, with transformers' default experts implementation (grouped_mm).
    m = AutoModelForCausalLM.from_pretrained(os.path.join(d, "moe" if workload == "moe" else "model"), dtype=torch.float32)
    m.train()
    if workload in ("lora", "lora-ckpt"):
        from peft import LoraConfig, get_peft_model

        m = get_peft_model(m, LoraConfig(r=s["lora_r"], lora_alpha=s["lora_alpha"], lora_dropout=0.0,
                                         target_modules=s["lora_targets"], task_type="CAUSAL_LM"))
        if workload == "lora-ckpt":
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=s["lr"], weight_decay=0.01, fused=True)
    xs = batches(d, s, torch)
    start_counting(cpumem)
    losses, times, cpu = [], [], []
    for i, ids in enumerate(xs):
        t, c = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    tokens = s["batch"] * s["seq"]
    return {"tokens_per_s": tokens / statistics.median(times[s["warmup"]:]),
            "tokens_per_cpu_s": tokens / statistics.median(cpu[s["warmup"]:]),
            "step_s": times, "step_cpu_s": cpu, "losses": losses, "trainable": sum(p.numel() for p in params)}


def gen(d, s, cpumem, torch):
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    m = LlamaForCausalLM.from_pretrained(os.path.join(d, "model"), dtype=torch.float32)
    m.eval()
    with open(os.path.join(d, "ids.bin"), "rb") as f:
        prompt = torch.frombuffer(bytearray(f.read(8 * s["prompt"])), dtype=torch.int64).view(1, -1)
    # Token 0 (BOS) is also pad_token_id: without a mask, generate would take it for padding.
    mask = torch.ones_like(prompt)
    new = s["new_tokens"]
    out, best, best_cpu = None, float("inf"), float("inf")
    with torch.no_grad():
        m.generate(prompt, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)  # warm-up
        start_counting(cpumem)
        for _ in range(s["gen_reps"]):
            t, c = time.perf_counter(), time.process_time()
            out = m.generate(prompt, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                             pad_token_id=0)
            best, best_cpu = min(best, time.perf_counter() - t), min(best_cpu, time.process_time() - c)
    generated = out[0, prompt.shape[1]:].tolist()

    # The tokenizer over the whole corpus a line at a time, as setup made the ids: the
    # best of two passes, each with a fresh tokenizer (its BPE word cache empty), through
    # encode_batch, which RAYON_NUM_THREADS=1 (set by the driver) keeps on one thread;
    # then one pass of a Python loop of encode, shown for reference.
    lines, nbytes = corpus_lines(s["corpus"])
    path = os.path.join(d, "model", "tokenizer.json")
    tb, tc, ratio, ids = float("inf"), float("inf"), 0, None
    for _ in range(2):
        tok = Tokenizer.from_file(path)
        c, t = time.process_time(), time.perf_counter()
        encs = tok.encode_batch(lines)
        w, c = time.perf_counter() - t, time.process_time() - c
        if w < tb:
            tb, ratio = w, c / w
        tc = min(tc, c)
        ids = [i for e in encs for i in e.ids]
        del encs
    tok = Tokenizer.from_file(path)
    t = time.perf_counter()
    for l in lines:
        tok.encode(l)
    loop = time.perf_counter() - t
    raw = torch.tensor(ids, dtype=torch.int64).numpy().tobytes()
    return {"gen_tokens_per_s": len(generated) / best, "gen_tokens_per_cpu_s": len(generated) / best_cpu,
            "generated": generated, "tok_bytes": nbytes, "tok_mb_per_s": nbytes / 1e6 / tb,
            "tok_mb_per_cpu_s": nbytes / 1e6 / tc, "tok_loop_mb_per_s": nbytes / 1e6 / loop,
            "tok_cpu_over_wall": ratio, "tok_sha256": hashlib.sha256(raw).hexdigest()}


def main():
    global BASE_RSS
    if sys.argv[1] == "setup":
        setup(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["train", "lora", "lora-ckpt", "gen", "moe"])
    ap.add_argument("dir")
    ap.add_argument("--cpumem")
    a = ap.parse_args()
    import torch
    import transformers  # noqa: F401  (what the workload imports, in the base RSS)
    if a.workload.startswith("lora"):
        import peft  # noqa: F401
    s = read_spec(a.dir)
    torch.set_num_threads(s["threads"])
    cpumem = load_cpumem(a.cpumem) if a.cpumem else None
    BASE_RSS = status_mb("VmRSS")
    if a.workload == "gen":
        r = gen(a.dir, s, cpumem, torch)
    else:
        r = train(a.dir, s, a.workload, cpumem, torch)
    r.update({"impl": "python", "workload": a.workload, "base_rss_mb": BASE_RSS, "peak_rss_mb": status_mb("VmHWM"),
              "threads": torch.get_num_threads(), "torch": torch.__version__})
    if cpumem:
        r["tensor_peak_mb"] = (cpumem.stats()["peak"] - TENSORS_AT_START) / 2**20
    print(json.dumps(r))


if __name__ == "__main__":
    main()
