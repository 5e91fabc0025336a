"""Reassemble a gotrain sharded checkpoint (FullyShardedDataParallel) into full state dicts.

A sharded checkpoint is a directory (checkpoints/last.pt/ of a run trained with --fsdp):

    metadata.pt         the world size W; for every sharded tensor its full shape, dtype
                        and rows per rank; everything that is not sharded (unsharded
                        parameters and buffers, the optimizer's param_groups and scalar
                        state such as "step", progress, scheduler, RNG, callbacks, config)
    rank-R-of-W.pt      rank R's shards: rows [R*s, (R+1)*s) of each sharded parameter and
                        of its optimizer state, s = rows_per_rank, zero-padded at the end

Every file is a plain torch.save file. Usage:

    from load_sharded import load_sharded
    model_sd, optim_sd, meta = load_sharded("runs/x/checkpoints/last.pt")
    model.load_state_dict(model_sd)
    optimizer.load_state_dict(optim_sd)

or from the shell, to write one torch.save file that holds a single-file gotrain
checkpoint's keys (model_state_dict, optimizer_state_dict, epoch, ...):

    python scripts/load_sharded.py runs/x/checkpoints/last.pt full.pt
"""

import os
import sys

import torch

FORMAT = "gotrain-fsdp-sharded-v1"


def _load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def load_sharded(path):
    """Return (model_state_dict, optimizer_state_dict, metadata) of the sharded
    checkpoint directory path, with every sharded tensor put together at its full
    shape. metadata is metadata.pt's dict (its other keys are the training state)."""
    meta = _load(os.path.join(path, "metadata.pt"))
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r}, want {FORMAT!r}")
    world = int(meta["world_size"])
    ranks = [_load(os.path.join(path, f"rank-{r}-of-{world}.pt")) for r in range(world)]

    def full(name, pieces):
        rows = int(meta["sharded"][name]["shape"][0])
        return torch.cat(pieces, 0)[:rows].clone()

    model = dict(meta["model_state_dict"])
    for name in meta["sharded"]:
        model[name] = full(name, [r["model_state_dict"][name] for r in ranks])

    state = {}
    for idx, scalars in meta["optimizer_state_dict"]["state"].items():
        st = dict(scalars)
        sharded = meta["optimizer_sharded"].get(idx)
        if sharded is not None:
            for key in sharded["keys"]:
                st[key] = full(sharded["param"], [r["optimizer_state_dict"]["state"][idx][key] for r in ranks])
        state[idx] = st
    optim = {"state": state, "param_groups": meta["optimizer_state_dict"]["param_groups"]}
    return model, optim, meta


def to_single_file(path, out):
    """Write the sharded checkpoint path as one torch.save file with a single-file
    checkpoint's keys."""
    model, optim, meta = load_sharded(path)
    ckpt = {k: v for k, v in meta.items()
            if k not in ("format", "world_size", "sharded", "optimizer_sharded", "samples_in_epoch")}
    ckpt["model_state_dict"] = model
    ckpt["optimizer_state_dict"] = optim
    torch.save(ckpt, out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: load_sharded.py SHARDED_DIR OUT.pt")
    to_single_file(sys.argv[1], sys.argv[2])
