"""The Python side of `go run ./bench/data -imagefolder`: writes the ImageFolder tree of
JPEGs both sides read, and measures torch.utils.data.DataLoader over
torchvision.datasets.ImageFolder with RandomResizedCrop + RandomHorizontalFlip + ToTensor
+ Normalize, for each worker count, in samples per second of wall time and per second of
CPU time (the main process and its workers, from /proc)."""

import argparse, gzip, json, os, time

import numpy as np


def make(root, src, n, size):
    from PIL import Image
    with gzip.open(os.path.join(src, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28).astype(np.int32)
    with gzip.open(os.path.join(src, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    for k in range(n):
        g = images[k]
        rgb = np.stack([g, 255 - g, (g * 7 + k) % 256], -1).astype(np.uint8)
        im = Image.fromarray(rgb).resize((size, size), Image.BICUBIC)
        d = os.path.join(root, f"class_{labels[k]}")
        os.makedirs(d, exist_ok=True)
        im.save(os.path.join(d, f"{k:06d}.jpg"), quality=90)


def cpu_seconds(pids):
    """User + system CPU time of the processes pids, from /proc (clock ticks)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def measure(root, workers, batch, crop, epochs):
    import torch
    from torchvision import datasets, transforms as T
    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(crop), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(root, transform=tf)
    out = {}
    for w in workers:
        dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=w,
                                         persistent_workers=True, prefetch_factor=2)
        it = iter(dl)
        for _ in it:  # warm-up epoch: worker start, page cache
            pass
        pids = [os.getpid()] + [p.pid for p in dl._iterator._workers]
        t0, c0, n = time.perf_counter(), cpu_seconds(pids), 0
        for _ in range(epochs):
            for x, y in dl:
                n += x.shape[0]
        out[str(w)] = [n / (time.perf_counter() - t0), n / (cpu_seconds(pids) - c0)]
        del dl
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--make", action="store_true")
    p.add_argument("--root", required=True)
    p.add_argument("--src", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--crop", type=int, default=112)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    if a.make:
        make(a.root, a.src, a.n, a.size)
    else:
        print(json.dumps(measure(a.root, [int(w) for w in a.workers.split(",")], a.batch, a.crop, a.epochs)))
