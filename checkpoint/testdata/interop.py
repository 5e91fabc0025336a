# Interop fixtures and checks for package checkpoint, run by its tests with the real torch.
#
#   python interop.py gen DIR            write DIR/<name>.pt with torch.save and DIR/<name>.json,
#                                        a canonical description of what torch.load returns
#   python interop.py check PT JSON ...  torch.load each PT (default weights_only=True, and
#                                        mmap=True) and compare it exactly with its JSON
#   python interop.py stgen ST           write dtypes() as a safetensors file (by hand)
#   python interop.py stcheck ST PT      check that safetensors file ST holds PT's tensors
#   python interop.py describe PT ...    torch.load each PT and print, one JSON line each,
#                                        its description or the error torch raised
#
# The description keeps everything that must survive a round trip: container kinds and
# order, int/float bits, dtypes, shapes, strides, offsets, storage bytes, storage sharing
# and tensor identity. The committed testdata/*.pt were written by `gen` with the pinned
# torch and are also the fuzz seed corpus; malicious.pt (no .json) calls os.system when
# unpickled without weights_only.
import collections
import json
import math
import os
import struct
import sys

import torch


def describe(v, st):
    if v is None:
        return ["none"]
    if isinstance(v, bool):
        return ["bool", v]
    if isinstance(v, int):
        return ["int", str(v)]
    if isinstance(v, float):
        return ["float", str(struct.unpack("<Q", struct.pack("<d", v))[0])]
    if isinstance(v, str):
        return ["str", v]
    if isinstance(v, bytes):
        return ["bytes", v.hex()]
    if isinstance(v, tuple):
        return ["tuple", [describe(e, st) for e in v]]
    if isinstance(v, list):
        return ["list", [describe(e, st) for e in v]]
    if isinstance(v, torch.Tensor):
        tid = st["tensors"].setdefault(id(v), len(st["tensors"]))
        s = v.untyped_storage()
        sid = st["storages"].setdefault(s._cdata, len(st["storages"]))
        return ["tensor", tid, str(v.dtype).removeprefix("torch."), list(v.shape), list(v.stride()),
                v.storage_offset(), v.requires_grad, sid, bytes(s).hex()]
    if isinstance(v, collections.OrderedDict):
        attrs = dict(vars(v))
        items = [[describe(k, st), describe(x, st)] for k, x in v.items()]
        return ["odict", items, describe(attrs, st) if attrs else ["none"]]
    if isinstance(v, dict):
        return ["dict", [[describe(k, st), describe(x, st)] for k, x in v.items()]]
    raise TypeError(f"cannot describe {type(v)}")


def desc(v):
    return describe(v, {"tensors": {}, "storages": {}})


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 2))


def training_checkpoint():
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    for _ in range(2):
        loss = m(torch.randn(5, 4)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return {
        "epoch": 3,
        "global_step": 2**40,
        "best_metric": 0.8125,
        "model_state_dict": m.state_dict(),
        "optimizer_state_dict": opt.state_dict(),
        "scheduler_state_dict": sched.state_dict(),
        "history": [{"epoch": 1, "loss": 1.5, "acc": 0.5}, {"epoch": 2, "loss": 0.75, "acc": 0.625}],
        "model_config": {"name": "run-é", "layers": [4, 8, 2], "tuple": (1, 2.0, "x"), "flag": True,
                         "none": None},
        "ints": [0, 1, -1, 255, 256, 65535, 65536, 2**31 - 1, -2**31, 2**31, -2**31 - 1, 2**63 - 1,
                 -2**63, 2**64, 2**70, -2**70, 10**30],
        "floats": [0.0, -0.0, 1e-300, 1.5, math.inf, -math.inf, math.pi],
        "keys": {0: "zero", -5: "neg", 2**40: "big", "s": 1, (1, "a"): "tuple key", True: "bool"},
        "bytes": b"\x00\xffabc",
        "empty": {"list": [], "dict": {}, "tuple": (), "str": "", "odict": collections.OrderedDict()},
        "one": {"list": [1], "tuple": (1,), "dict": {"a": 1}},
        "long_list": list(range(2500)),
    }


def views():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {"base": base, "t": base.t(), "row": base[1], "col": base[:, 2], "same": base,
            "narrow": base[1:, 1:3], "expand": torch.ones(1, 3).expand(4, 3)}


def dtypes():
    g = torch.Generator().manual_seed(1)
    out = collections.OrderedDict()
    for dt in [torch.float64, torch.float32, torch.float16, torch.bfloat16]:
        x = torch.randn(2, 3, generator=g).to(dt)
        x[0, 0] = float("nan") if dt != torch.bfloat16 else -0.0
        out[str(dt)] = x
    for dt in [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]:
        info = torch.iinfo(dt)
        out[str(dt)] = torch.tensor([info.min, info.max, 0, 1, 7, -1 if info.min < 0 else 2], dtype=dt).reshape(3, 2)
    out["torch.bool"] = torch.tensor([[True, False], [False, True]])
    out["scalar_f32"] = torch.tensor(7.0)
    out["scalar_i64"] = torch.tensor(-3)
    out["scalar_bool"] = torch.tensor(True)
    out["empty_f32"] = torch.zeros(0, 3)
    out["empty_i8"] = torch.zeros(2, 0, dtype=torch.int8)
    out["param"] = torch.nn.Parameter(torch.ones(2, 2))
    out["grad"] = torch.ones(3).requires_grad_()
    return out


def new_dtypes():
    # The dtypes torch.save writes with _rebuild_tensor_v3 over an UntypedStorage (uint16/
    # 32/64, float8) or with complex storage classes, a view sharing one of those storages,
    # and each tensor's values as Python numbers for the Go side to compare with.
    out = collections.OrderedDict()
    u16 = torch.tensor([0, 1, 65535, 40000], dtype=torch.uint16)
    out["uint16"] = u16
    out["uint16_view"] = u16[1:3]
    out["uint32"] = torch.tensor([[0, 1], [2**32 - 1, 123456789]], dtype=torch.uint32)
    out["uint64"] = torch.tensor([0, 1, 2**63, 2**64 - 1], dtype=torch.uint64)
    f8 = [0.0, -0.0, 0.015625, -3.5, 448.0, 1e-3, 0.1, float("nan")]
    out["float8_e4m3fn"] = torch.tensor(f8, dtype=torch.float32).to(torch.float8_e4m3fn)
    out["float8_e5m2"] = torch.tensor(f8 + [float("inf"), -float("inf"), 57344.0, 1.5e-5],
                                      dtype=torch.float32).to(torch.float8_e5m2)
    out["complex64"] = torch.tensor([1 + 2j, -0.5 - 0.25j], dtype=torch.complex64)
    out["complex128"] = torch.tensor([[3 - 4j]], dtype=torch.complex128)
    values = {}
    for k, v in list(out.items()):
        if v.is_complex():
            values[k] = [[z.real, z.imag] for z in v.flatten().tolist()]
        elif v.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            values[k] = v.float().flatten().tolist()
        else:
            values[k] = [str(x) for x in v.flatten().tolist()]
    out["values"] = values
    return out


def fixtures():
    torch.manual_seed(0)
    return {
        "linear_state_dict": torch.nn.Linear(3, 2).state_dict(),
        "state_dict": model().state_dict(),
        "training_checkpoint": training_checkpoint(),
        "views": views(),
        "dtypes": dtypes(),
        "new_dtypes": new_dtypes(),
    }


class Exploit:
    # What a malicious checkpoint does: unpickling calls os.system.
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def gen(d):
    os.makedirs(d, exist_ok=True)
    torch.save({"weights": torch.ones(2), "payload": Exploit()}, os.path.join(d, "malicious.pt"))
    for name, v in fixtures().items():
        torch.save(v, os.path.join(d, name + ".pt"))
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(desc(v), f)
    # Formats a reader must handle but torch.save does not produce by default.
    small = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "n": 2**40, "s": "x",
             "v": torch.arange(6, dtype=torch.int64)[2:]}
    torch.save(small, os.path.join(d, "legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save(small, os.path.join(d, "protocol4.pt"), pickle_protocol=4)
    for name in ["legacy", "protocol4"]:
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(desc(small), f)


def check(pairs):
    for pt, js in pairs:
        with open(js) as f:
            want = json.load(f)
        for mmap in [False, True]:
            got = json.loads(json.dumps(desc(torch.load(pt, mmap=mmap))))
            if got != want:
                raise SystemExit(f"{pt} (mmap={mmap}): torch.load gives\n{json.dumps(got)[:3000]}\nwant\n{json.dumps(want)[:3000]}")
        v = torch.load(pt)
        if "training_checkpoint" in os.path.basename(pt):
            # The state dicts must also work where they are used.
            m = model()
            m.load_state_dict(v["model_state_dict"], strict=True)
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
            opt.load_state_dict(v["optimizer_state_dict"])
            m(torch.randn(5, 4)).sum().backward()
            opt.step()
        print("OK", pt)


def tensor_bytes(t):
    return bytes(t.detach().contiguous().clone().untyped_storage())


ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
             "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
             "BOOL": torch.bool}


def st_read(path):
    # Parsed by hand (the safetensors package is not a project dependency).
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + end])
        t = torch.frombuffer(raw, dtype=ST_DTYPES[e["dtype"]]) if raw else torch.empty(0, dtype=ST_DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out, meta


def st_check(st, pt):
    # Every tensor of the torch.save file PT is in the safetensors file ST, exactly.
    got, meta = st_read(st)
    want = {k: v for k, v in torch.load(pt).items() if isinstance(v, torch.Tensor)}
    assert meta == {"format": "pt"}, meta
    assert list(got) == list(want), (list(got), list(want))
    for k, w in want.items():
        g = got[k]
        assert g.dtype == w.dtype and g.shape == w.shape and tensor_bytes(g) == tensor_bytes(w), k
    print("OK", st)


def st_gen(st):
    tensors = {k: v.detach() for k, v in dtypes().items()}
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, v in tensors.items():
        b = tensor_bytes(v)
        header[k] = {"dtype": next(n for n, d in ST_DTYPES.items() if d == v.dtype), "shape": list(v.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(st, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    if sys.argv[1] == "describe":
        import warnings
        warnings.simplefilter("ignore")
        for p in sys.argv[2:]:
            try:
                print(json.dumps({"desc": desc(torch.load(p))}))
            except Exception as e:  # what torch refuses, and why
                print(json.dumps({"error": f"{type(e).__name__}: {e}"[:300]}))
    elif sys.argv[1] == "gen":
        gen(sys.argv[2])
    elif sys.argv[1] == "stcheck":
        st_check(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "stgen":
        st_gen(sys.argv[2])
    elif sys.argv[1] == "check":
        args = sys.argv[2:]
        check(list(zip(args[0::2], args[1::2])))
    else:
        raise SystemExit("usage: interop.py gen DIR | check PT JSON ...")
