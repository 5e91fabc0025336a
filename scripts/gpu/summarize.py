"""summarize.py WORK STAGE DRYRUN TAGS SECONDS: scripts/gpu/run.sh's summary.

Reads the step table (WORK/steps.tsv, each failed step's output in WORK/logs), what
python3's torch is (WORK/torch.json), gpucheck's reports (WORK/gpucheck*.out) and every
result the steps wrote to STAGE, writes STAGE/results.json and prints the tables: the
steps, the SDPA cases, and gotrain against PyTorch eager, torch.compile and
mode="reduce-overhead" (throughput, peak memory, compile time) with issue 35's targets.
Exits 1 when a step or a check failed.
"""
import json
import os
import re
import subprocess
import sys


def read(p):
    try:
        with open(p) as f:
            return f.read()
    except OSError:
        return ""


def median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def cmd(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def json_lines(text):
    """The JSON values of text: one document, or one per line."""
    text = text.strip()
    if not text:
        return []
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def main(work, stage, dryrun, tags, seconds):
    def load(name):
        """The JSON object a benchmark wrote to STAGE/name, or None."""
        v = json_lines(read(os.path.join(stage, name)))
        return v[0] if v else None

    steps = []
    for line in read(os.path.join(work, "steps.tsv")).splitlines():
        name, status, secs, note = line.split("\t")
        st = {"name": name, "status": status, "seconds": int(secs), "note": note}
        if status not in ("passed", "skipped"):
            st["output_tail"] = read(os.path.join(work, "logs", name + ".log"))[-6000:]
        steps.append(st)

    tests = {"passed": 0, "failed": 0, "skipped": 0, "failed_tests": [], "failed_packages": []}
    for line in read(os.path.join(stage, "tests.json")).splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        action, test, pkg = ev.get("Action"), ev.get("Test"), ev.get("Package", ev.get("ImportPath", ""))
        if test and action in ("pass", "fail", "skip"):
            tests[{"pass": "passed", "fail": "failed", "skip": "skipped"}[action]] += 1
            if action == "fail":
                tests["failed_tests"].append(pkg + "." + test)
        elif not test and action in ("fail", "build-fail"):
            tests["failed_packages"].append(pkg)
    tests["failed_packages"] = sorted(set(tests["failed_packages"]))

    # gpubench-W-IMPL.json: the last line of each is the loop's JSON result.
    bench = {}
    for name in sorted(os.listdir(stage)):
        m = re.match(r"gpubench-(.+)-(go|python)\.json$", name)
        rows = json_lines(read(os.path.join(stage, name)))
        if m and rows:
            bench.setdefault(m.group(1), {})[m.group(2)] = rows[-1]

    # gpucheck --json: its report, with matmul TFLOP/s per dtype; else its text lines. The
    # TF32 process adds its float32 figure under "tf32".
    def gpucheck_report(name):
        text = read(os.path.join(work, name))
        try:
            rep = json.loads(text)
            return rep, {m["dtype"]: m["tflops"] for m in rep.get("matmul") or []}
        except ValueError:
            return text.splitlines(), {}

    gpucheck, tflops = gpucheck_report("gpucheck.out")
    gpucheck_tf32, tf32 = gpucheck_report("gpucheck-tf32.out")
    if "tf32" in tf32:
        tflops["tf32"] = tf32["tf32"]
    tflops = tflops or None
    checks = []  # (name, ok): what the run asserts beyond each step's exit status
    py_matmul = {m["dtype"]: m["tflops"] for m in (load("matmul-python.json") or {}).get("matmul", [])}
    matmul = {"gotrain": tflops, "python": py_matmul or None, "ratio": {}}
    for dt, v in (tflops or {}).items():
        if py_matmul.get(dt):
            matmul["ratio"][dt] = v / py_matmul[dt]

    # SDPA: gotrain's cases with Python's choice for the same inputs beside them.
    sdpa_go, sdpa_py = load("sdpa-go.json"), load("sdpa-python.json")
    sdpa = None
    if sdpa_go:
        py_choice = {(c["model"], c["dtype"]): c["backend"] for c in (sdpa_py or {}).get("cases", [])}
        sdpa = sdpa_go["cases"]
        for c in sdpa:
            c["python_backend"] = py_choice.get((c["model"], c["dtype"]))
            c["same_backend"] = c["python_backend"] == c["backend"]
            checks.append(("sdpa %s %s: same backend as Python" % (c["model"], c["dtype"]), c["same_backend"]))

    # Training steps: gotrain, and PyTorch in each mode (eager, default, reduce-overhead),
    # with gotrain/PyTorch ratios of throughput and peak memory against each.
    train = {}
    for name in sorted(os.listdir(stage)):
        m = re.match(r"train-(.+)-go\.json$", name)
        if not m:
            continue
        g = load(name)
        py = {r.get("mode", "eager"): r for r in json_lines(read(os.path.join(stage, "train-%s-python.json" % m.group(1))))}
        t = {"gotrain": g, "python": py}
        if g and py:
            t["unit"] = g["unit"]
            t["throughput_ratio"] = {k: g["items_per_s"] / r["items_per_s"] for k, r in py.items()}
            t["peak_memory_ratio"] = {k: g["peak_bytes"] / r["peak_bytes"] for k, r in py.items() if r.get("peak_bytes")}
            best = max(py.values(), key=lambda r: r["items_per_s"])
            t["best_python_mode"] = best.get("mode", "eager")
            t["ratio_to_best"] = g["items_per_s"] / best["items_per_s"]
            t["compile_s"] = {k: r["compile_s"] for k, r in py.items() if "compile_s" in r}
            if "eager" in py:
                # Same weights and batches: the first losses agree to the precision's rounding.
                # (Compiled modes draw dropout masks from their own generator: not checked.)
                tol = 1e-3 if g["precision"] == "fp32" else 2e-2
                p = py["eager"]
                t["first_loss_match"] = abs(g["first_loss"] - p["first_loss"]) <= tol * abs(p["first_loss"])
                checks.append(("train %s: first loss as PyTorch's" % m.group(1), t["first_loss_match"]))
        train[m.group(1)] = t

    hostsync = {}
    for name in sorted(os.listdir(stage)):
        m = re.match(r"hostsync-(.+)\.json$", name)
        if m and load(name):
            hostsync[m.group(1)] = load(name)
    graphs = load("graphs.json")
    profiles = {}
    for name in sorted(os.listdir(stage)):
        m = re.match(r"profile-(.+)\.json$", name)
        if m and load(name):
            profiles[m.group(1)] = load(name)

    # Issue 16's and issue 35's targets: gotrain's bf16 step at least the best PyTorch
    # mode's, peak memory at most every PyTorch mode's, bf16 matmul at least 0.95x.
    targets = {}
    for k, v in train.items():
        if "ratio_to_best" not in v:
            continue
        if k.endswith("bf16"):
            targets["train_%s_ge_best_pytorch" % k] = v["ratio_to_best"] >= 1
        for mode, r in v["peak_memory_ratio"].items():
            targets["train_%s_peak_memory_le_%s" % (k, mode)] = r <= 1
    for w, b in bench.items():
        if w.endswith("bf16") and "go" in b and "python" in b:
            try:
                timed = lambda r: median(r["epoch_s"][r.get("warmup", 0):])
                targets["gpubench_%s_ratio_ge_1" % w] = timed(b["python"]) >= timed(b["go"])
            except (KeyError, TypeError, ValueError):
                pass
    if "bfloat16" in matmul["ratio"]:
        targets["matmul_bf16_ratio_ge_0.95"] = matmul["ratio"]["bfloat16"] >= 0.95

    out = {
        "dry_run": dryrun == "1",
        "tags": tags,
        "ok": all(s["status"] in ("passed", "skipped") for s in steps) and all(ok for _, ok in checks),
        "seconds": int(seconds),
        "go": cmd("go", "version"),
        "bundle": read(os.path.join(os.environ.get("BUNDLE", ""), "manifest")).strip().splitlines(),
        "nvidia_smi": cmd("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"),
        "torch": json.loads(read(os.path.join(work, "torch.json")) or "null"),
        "steps": steps,
        "matmul_tflops": tflops,
        "matmul": matmul,
        "gpucheck": gpucheck,
        "gpucheck_tf32": gpucheck_tf32 or None,
        "sdpa": sdpa,
        "train": train,
        "graphs": graphs,
        "profile": profiles,
        "hostsync": hostsync,
        "checks": [{"check": n, "ok": ok} for n, ok in checks],
        "targets": targets,
        "tests": tests,
        "bench": bench,
    }
    with open(os.path.join(stage, "results.json"), "w") as f:
        json.dump(out, f, indent=2)

    p = lambda s: print("run.sh: " + s)
    p("results.json: ok=%s, %d s; tests %d passed, %d failed, %d skipped; matmul %s TFLOP/s" % (
        out["ok"], out["seconds"], tests["passed"], tests["failed"], tests["skipped"], out["matmul_tflops"]))
    for s in steps:
        p("  step %-16s %-8s %4d s  %s" % (s["name"], s["status"], s["seconds"], s["note"]))
    for c in sdpa or []:
        p("sdpa %s %s %s: gotrain %s, Python %s, max error %.3g (tolerance %.3g)" % (
            c["model"], c["dtype"], "x".join(map(str, c["shape"])), c["backend"], c["python_backend"],
            max(c["errors"].values() or [float("nan")]), c["tolerance"]))
    modes = ("eager", "default", "reduce-overhead")
    rows = [(k, t) for k, t in train.items() if "throughput_ratio" in t]
    if rows:
        p("")
        p("| workload | unit | gotrain | PyTorch eager | torch.compile | reduce-overhead | gotrain / best PyTorch |"
          " peak MiB: gotrain | eager | compile | reduce-overhead | compile s: default | reduce-overhead |")
        p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for k, t in rows:
            py = t["python"]
            # (a peak of 0: not measured, as on a CPU without the counting allocator)
            f = lambda mode, key, fmt, scale=1: fmt % (py[mode][key] / scale) if py.get(mode, {}).get(key) is not None and (
                key != "peak_bytes" or py[mode][key]) else "—"
            p("| %s | %s | %.0f | %s | %s | %s | %.2f× (%s) | %s | %s | %s | %s | %s | %s |" % (
                k, t["unit"], t["gotrain"]["items_per_s"],
                *(f(mo, "items_per_s", "%.0f") for mo in modes), t["ratio_to_best"], t["best_python_mode"],
                "%.0f" % (t["gotrain"]["peak_bytes"] / 2**20) if t["gotrain"]["peak_bytes"] else "—",
                *(f(mo, "peak_bytes", "%.0f", 2**20) for mo in modes),
                f("default", "compile_s", "%.1f"), f("reduce-overhead", "compile_s", "%.1f")))
        p("")
        for k, t in rows:
            p("train %s: first loss gotrain %.5f, PyTorch %s" % (
                k, t["gotrain"]["first_loss"], ", ".join("%s %.5f" % (mo, r["first_loss"]) for mo, r in t["python"].items())))
    for k, sides in profiles.items():
        name = lambda r: r["impl"] + ("" if r.get("mode", "eager") == "eager" else " " + r["mode"])
        p("")
        p("profile %s: %s per step, count / ms" % (k, sides[0]["counted"]))
        p("| class | " + " | ".join(name(r) for r in sides) + " |")
        p("|---|" + "--:|" * len(sides))
        classes = sorted({c for r in sides for c in r["classes"]})
        for c in classes + ["all"]:
            cells = []
            for r in sides:
                x = {"per_step": r["per_step"], "time_per_step_s": r["time_per_step_s"]} if c == "all" else r["classes"].get(c)
                cells.append("%.1f / %.3f" % (x["per_step"], x["time_per_step_s"] * 1e3) if x else "—")
            p("| %s | %s |" % (c, " | ".join(cells)))
    if graphs:
        p("graphs: %s" % json.dumps({k: v for k, v in graphs.items() if k != "eager" and k != "graphs"}))
    for k, h in hostsync.items():
        p("hostsync %s: %d host reads in %d optimizer steps between logging points, %d at %d logging points" % (
            k, h["between_reads"], h["between_steps"], h["log_reads"], h["log_points"]))
    for n, ok in sorted(targets.items()):
        p("target %s: %s" % (n, "met" if ok else "NOT MET"))
    for n, ok in checks:
        if not ok:
            p("CHECK FAILED: " + n)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit("usage: summarize.py WORK STAGE DRYRUN TAGS SECONDS")
    sys.exit(main(*sys.argv[1:]))
