# The Python half of bench/checkpoint: torch.save / torch.load of a state dict of the
# same shape as the Go half's, on the same disk, with the same page-cache treatment (see
# main.go). Prints one JSON line of median seconds.
import json
import os
import statistics
import sys
import time
from collections import OrderedDict

import torch

path, mb, tensors, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
numel = mb * 2**20 // 4 // tensors
sd = OrderedDict((f"layer{i}.weight", torch.randn(numel)) for i in range(tensors))


def before_write():
    # The Go half's treatment: a fresh file, no dirty pages left from the last write.
    if os.path.exists(path):
        os.remove(path)
    os.sync()


def median(prepare, f):
    """Runs prepare (untimed) and f (timed) reps times; the median of f's times."""
    times = []
    for _ in range(reps):
        prepare()
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def save_fsync():
    with open(path, "wb") as f:
        torch.save(sd, f)
        f.flush()
        os.fsync(f.fileno())


out = {
    "save": median(before_write, lambda: torch.save(sd, path)),
    "save_fsync": median(before_write, save_fsync),
    "load": median(os.sync, lambda: torch.load(path)),  # weights_only=True, the default
    "load_mmap": median(os.sync, lambda: torch.load(path, mmap=True)),
    "bytes": os.path.getsize(path),
}
os.remove(path)
print(json.dumps(out))
