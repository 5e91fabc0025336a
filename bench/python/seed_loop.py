"""The Python side of the training-loop benchmark: the seed's GPUTrainer._train_epoch
loop (seed/000_c9250d376b1ae5fe.txt), ported unchanged in substance, on the same model,
initial weights, data and thread count as bench/cmd/goloop (gotrain) and bench/cpp/loop.cpp.

    seed_loop.py --workload W --dir DIR --threads N --warmup W --reps R --seed S
                 [--loader dataloader|batches]

--loader dataloader (default) feeds the loop the way the seed does: a
torch.utils.data.DataLoader over a TensorDataset in memory (num_workers=0);
--loader batches feeds it a list of pre-sliced batch tensors, with no loader cost at all.

--adam picks torch.optim.Adam's implementation: default (the seed's call, passing neither
foreach nor fused: PyTorch then runs _single_tensor_adam on the CPU, and _multi_tensor_adam
only when every tensor is on CUDA), single (foreach=False), foreach (foreach=True,
_multi_tensor_adam: gotrain's unfused Adam) or fused (fused=True: gotrain's default). The
output's "adam" is the implementation that ran: single, foreach or fused.
Prints one JSON object (fields in bench/README.md).
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

BATCH = {"mlp": 16, "mlp256": 64, "cnn": 128, "cnn-bf16": 128}


def make_model(workload):
    if workload in ("mlp", "mlp256"):
        hidden = 32 if workload == "mlp" else 256
        return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def read_tensors(base):
    """Reads base.bin as described by base.txt ("name dtype numel dims..." per line)."""
    with open(base + ".bin", "rb") as f:
        raw = bytearray(f.read())
    out, off = [], 0
    with open(base + ".txt") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            name, dt, n, shape = parts[0], parts[1], int(parts[2]), [int(d) for d in parts[3:]]
            dtype = torch.float32 if dt == "f32" else torch.int64
            t = torch.frombuffer(raw, dtype=dtype, count=n, offset=off).reshape(shape).clone()
            off += n * (4 if dt == "f32" else 8)
            out.append((name, t))
    return out


def rss_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return float("nan")


class GPUTrainer:
    """The seed's trainer, reduced to what _train_epoch uses. The loop body is the
    seed's; the only addition is that the first epoch's losses are kept for the
    cross-implementation check."""

    def __init__(self, model, train_loader, criterion, optimizer, device, use_amp=False,
                 amp_dtype=torch.bfloat16, grad_clip=None):
        self.model = model.to(device)
        self.train_loader = train_loader
        self.criterion = criterion
        self.optimizer = optimizer
        self.device = device
        self.use_amp = use_amp
        self.amp_dtype = amp_dtype
        self.grad_clip = grad_clip
        # bf16 needs no loss scaling: the scaler is a pass-through, as in the seed on bf16.
        self.scaler = torch.amp.GradScaler(device.type, enabled=False)
        self.step_losses = None

    def _train_epoch(self):
        """执行一个epoch的训练，返回平均loss"""
        self.model.train()
        total_loss = 0
        n_batches = 0

        for batch_idx, (data, target) in enumerate(self.train_loader):
            data, target = data.to(self.device), target.to(self.device)

            self.optimizer.zero_grad()

            if self.use_amp:
                with torch.autocast(self.device.type, dtype=self.amp_dtype):
                    output = self.model(data)
                    loss = self.criterion(output, target)

                self.scaler.scale(loss).backward()

                if self.grad_clip is not None:
                    self.scaler.unscale_(self.optimizer)
                    nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)

                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                output = self.model(data)
                loss = self.criterion(output, target)
                loss.backward()

                if self.grad_clip is not None:
                    nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)

                self.optimizer.step()

            item = loss.item()
            total_loss += item
            n_batches += 1
            if self.step_losses is not None:
                self.step_losses.append(item)

        return total_loss / max(n_batches, 1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="mlp", choices=sorted(BATCH))
    p.add_argument("--dir", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--check", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--loader", default="dataloader", choices=["dataloader", "batches"])
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (scripts/gpu/run.sh)")
    p.add_argument("--adam", default="default", choices=["default", "single", "foreach", "fused"],
                   help="default: the seed's Adam(lr) (single-tensor on the CPU); single: foreach=False; "
                        "foreach: foreach=True; fused: fused=True")
    a = p.parse_args()
    # The baseline the driver subtracts from the peak: torch and its libraries (the CUDA
    # wheel's too) are loaded, nothing is allocated yet.
    base_rss = rss_mb("VmRSS:")
    torch.set_num_threads(a.threads)

    (_, x), (_, y) = read_tensors(os.path.join(a.dir, "data"))
    bs = BATCH[a.workload]
    if a.loader == "dataloader":
        # Its own generator: a DataLoader iterator otherwise draws a base seed from the
        # global generator every epoch, which would shift Dropout's masks against the others.
        loader = DataLoader(TensorDataset(x, y), batch_size=bs, shuffle=False, num_workers=0,
                            generator=torch.Generator())
    else:
        loader = list(zip(x.split(bs), y.split(bs)))

    model = make_model(a.workload)
    with torch.no_grad():
        sd = model.state_dict()
        for name, t in read_tensors(os.path.join(a.dir, "init")):
            sd[name].copy_(t)
    params = list(model.parameters())
    kwargs = {"default": {}, "single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[a.adam]
    optimizer = torch.optim.Adam(params, lr=1e-3, **kwargs)
    trainer = GPUTrainer(model, loader, nn.CrossEntropyLoss(), optimizer, torch.device(a.device),
                         use_amp=a.workload == "cnn-bf16")
    adam = a.adam
    if adam == "default":
        # What torch.optim.Adam.step resolves the seed's call to, on the parameters'
        # device (the trainer has moved them): single-tensor on the CPU.
        from torch.optim.optimizer import _default_to_fused_or_foreach
        fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
        adam = "fused" if fused else "foreach" if foreach else "single"
    torch.manual_seed(a.seed)

    epoch_s, rss, losses = [], [], []
    for ep in range(a.warmup + a.reps):
        trainer.step_losses = losses if ep == 0 else None
        t0 = time.perf_counter()
        trainer._train_epoch()
        epoch_s.append(time.perf_counter() - t0)
        rss.append(rss_mb("VmRSS:"))
    print(json.dumps({
        "impl": "python", "adam": adam, "torch": torch.__version__, "workload": a.workload, "threads": torch.get_num_threads(),
        "steps": len(loader), "batch": bs, "warmup": a.warmup, "epoch_s": epoch_s, "rss_mb": rss,
        "base_rss_mb": base_rss, "peak_rss_mb": rss_mb("VmHWM:"), "losses": losses[:a.check], "loader": a.loader,
    }))


if __name__ == "__main__":
    main()
