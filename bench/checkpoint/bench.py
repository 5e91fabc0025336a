# The Python half of bench/checkpoint: torch.save / torch.load of a state dict of the
# same shape as the Go half's, on the same disk. Prints one JSON line of seconds.
import json
import os
import sys
import time
from collections import OrderedDict

import torch

path, mb, tensors, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
numel = mb * 2**20 // 4 // tensors
sd = OrderedDict((f"layer{i}.weight", torch.randn(numel)) for i in range(tensors))


def best(f):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def save_fsync():
    with open(path, "wb") as f:
        torch.save(sd, f)
        f.flush()
        os.fsync(f.fileno())


out = {
    "save": best(lambda: torch.save(sd, path)),
    "save_fsync": best(save_fsync),
    "load": best(lambda: torch.load(path)),  # weights_only=True, the default
    "load_mmap": best(lambda: torch.load(path, mmap=True)),
    "bytes": os.path.getsize(path),
}
os.remove(path)
print(json.dumps(out))
