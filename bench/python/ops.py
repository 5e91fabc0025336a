"""The Python side of the per-op microbenchmark (bench/cmd/opbench is the Go side,
bench/cpp/ops.cpp the C++ side): the same two tiny ops on the same libtorch.

    ops.py [--n 100000] [--reps 7] [--block 100] [--threads 1]

"add" is torch.add of two 16-element float32 tensors (a + b); "linear" is
nn.Linear(16, 16)'s forward on a [1, 16] input with autograd recording. Results are kept in
a list of --block and released together, as gotrain's scope frees a block's results. The
first rep is a warm-up. Prints one JSON object (fields as opbench's).
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=100000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--block", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    x16 = torch.arange(16, dtype=torch.float32) * 0.25
    b16 = x16.clone()
    x = x16.clone().view(1, 16)
    lin = torch.nn.Linear(16, 16)
    ops = {"add": lambda: x16 + b16, "linear": lambda: lin(x)}
    out = {}
    blocks, block = a.n // a.block, range(a.block)
    for name, op in ops.items():
        out[name] = []
        for r in range(a.reps + 1):
            t0 = time.perf_counter_ns()
            for _ in range(blocks):
                kept = [op() for _ in block]
                del kept
            if r > 0:
                out[name].append((time.perf_counter_ns() - t0) / (blocks * a.block))
    print(json.dumps({"impl": "python", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "block": a.block, "n": blocks * a.block, "ns_per_op": out}))


if __name__ == "__main__":
    main()
