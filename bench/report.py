#!/usr/bin/python3
"""bench/report.py - summarizes the logs written by bench/run.sh.

  report.py main LOGDIR   # ctrain vs PyTorch table, phase breakdown, per-round
                          # medians, perf per-kernel breakdown of ctrain
  report.py tune LOGDIR   # PyTorch variants (OpenBLAS core type, foreach, ...)

Log files: <workload>_<label>_r<round>.log with the ENV / KERNELS / STEP /
RESULT records of bench_step.c and torch_step.py; <workload>_perf.txt is
`perf report --sort dso,sym -t '|'` of one bench_step run.
Only the standard library: runs without importing torch.
"""
import glob
import os
import re
import statistics
import sys
from collections import defaultdict

WORKLOAD_DESC = {
    "mlp": "MLP 784-1024-1024-10, b256, AdamW",
    "cnn": "CNN [32,64] 1x28x28, b128, SGD-m",
    "gptchar": "GPT gpt-char-small 6/6/384 V65, b8 T256, AdamW",
    "gpt2": "GPT gpt2-124m 12/12/768 V50257, b4 T64, AdamW",
    "resnet50": "ResNet-50 (torchvision) 3x224x224, b32, SGD-m",
}


PREC_DESC = {
    "bf16native": "BF16, native (CT_BF16_NATIVE=1)",
    "bf16copies": "BF16, FP32 copies (CT_BF16_NATIVE=0)",
}


def desc(wl):
    """Description of a workload label; a precision suffix (mlp-bf16) is appended."""
    base, _, prec = wl.partition("-")
    d = WORKLOAD_DESC.get(base, base)
    return f"{d}, {PREC_DESC.get(prec, prec.upper())}" if prec else d


QUIET_CORES = 0.3
BUSY_CORES = 0.7


def others(rec):
    """CPU cores other processes used during a run's timed steps (-1: unknown)."""
    try:
        return float((rec["result"] or {}).get("others_cores", -1))
    except ValueError:
        return -1.0


def kv(line):
    return dict(re.findall(r"(\S+?)=(\S*)", line))


def load(logdir):
    """runs[(workload, label)] -> list of {round, steps:[dict], env:[dict], kernels, result}"""
    runs = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(logdir, "*_r*.log"))):
        m = re.match(r"([\w-]+?)_(.+)_r(\d+)\.log$", os.path.basename(path))
        if not m:
            continue
        wl, label, rnd = m.group(1), m.group(2), int(m.group(3))
        rec = {"round": rnd, "steps": [], "env": [], "kernels": None, "result": None}
        with open(path) as f:
            for line in f:
                if line.startswith("STEP "):
                    rec["steps"].append({k: float(v) for k, v in kv(line).items()})
                elif line.startswith("ENV "):
                    rec["env"].append(line[4:].strip())
                elif line.startswith("KERNELS"):
                    rec["kernels"] = line[8:].strip()
                elif line.startswith("RESULT "):
                    rec["result"] = kv(line)
        runs[(wl, label)].append(rec)
    for v in runs.values():
        v.sort(key=lambda r: r["round"])
    return runs


def all_steps(recs, key="step_ms"):
    return [s[key] for r in recs for s in r["steps"]]


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt(x):
    if x != x:
        return "n/a"
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def table(header, rows):
    w = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    out = ["| " + " | ".join(str(h).ljust(w[i]) for i, h in enumerate(header)) + " |",
           "|" + "|".join("-" * (w[i] + 2) for i in range(len(header))) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c).rjust(w[i]) if i else str(c).ljust(w[i]) for i, c in enumerate(r)) + " |")
    return "\n".join(out)


def perf_breakdown(path):
    """[(group, percent)] from perf report: ct_k_<op>_<slot> grouped by op/slot."""
    groups = defaultdict(float)
    total = 0.0
    event_ns = float("nan")
    with open(path) as f:
        for line in f:
            m = re.match(r"# Event count \(approx\.\): (\d+)", line)
            if m:
                event_ns = float(m.group(1))
            if line.startswith("#") or "|" not in line:
                continue
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 3:
                continue
            try:
                pct = float(parts[0].rstrip("%"))
            except ValueError:
                continue
            dso, sym = parts[1], parts[2]
            sym = re.sub(r"^\[.\]\s*", "", sym)
            total += pct
            m = re.match(r"ct_k_(\w+?)_(ref|avx2|avx512|onednn)(\..*)?$", sym)
            if m:
                g = f"{m.group(1)} [{m.group(2)}]"
            elif sym.split(".")[0] in ("ct_rand_uniform", "ct_philox", "init_values", "philox"):
                g = "setup: parameter init in ct_compile (not part of a step)"
            elif "optim" in sym or "adamw" in sym.lower() or "sgd" in sym.lower():
                g = f"optimizer ({sym.split('.')[0]})"
            elif dso.startswith("[JIT]") or "perf-" in dso:
                g = "JIT-generated code (oneDNN matmul/conv kernels)"
            elif "libgomp" in dso:
                g = "libgomp (OpenMP barriers/spin, fork/join)"
            elif "dnnl" in dso:
                g = "libdnnl (oneDNN, non-JIT code)"
            elif dso.startswith("[kernel"):
                g = "kernel (page faults, scheduling)"
            elif "unknown" in dso or dso == "[JIT]" or sym.startswith("0x"):
                g = f"{dso} (JIT code, e.g. oneDNN kernels)" if "unknown" in dso else f"{dso} {sym}"
            elif "libc" in dso:
                g = f"libc ({sym.split('@')[0]})"
            else:
                g = f"{sym} ({dso})"
            groups[g] += pct
    return sorted(groups.items(), key=lambda kvp: -kvp[1]), total, event_ns


def pick_best_pytorch(runs):
    """run.sh's TORCH_BEST mode logs PyTorch's configurations as pt-<core>-foreach<0|1>[-channels_last]:
    per workload the fastest (median ms/step over all its timed steps) becomes "pytorch". Returns
    {workload: [(label, median, min, rounds), ...]} sorted fastest first."""
    tried = defaultdict(list)
    for (wl, label), recs in list(runs.items()):
        if label.startswith("pt-") and all_steps(recs):
            steps = all_steps(recs)
            tried[wl].append((label, med(steps), min(steps), len(recs)))
    for wl, v in tried.items():
        v.sort(key=lambda t: t[1])
        runs[(wl, "pytorch")] = runs[(wl, v[0][0])]
    return tried


def main_report(logdir):
    runs = load(logdir)
    tried = pick_best_pytorch(runs)
    wls = [w for w in ("mlp", "cnn") if (w, "ctrain") in runs or (w, "pytorch") in runs]
    wls += sorted({w for (w, _) in runs} - set(wls))
    if tried:
        print("\n== PyTorch configurations tried (every one in every round): median ms/step over all timed steps;"
              " the fastest per workload is the PyTorch column below")
        rows = []
        for wl in wls:
            for i, (label, m, mn, n) in enumerate(tried.get(wl, [])):
                rows.append([wl, label[3:], fmt(m), fmt(mn), str(n), "<- used" if i == 0 else ""])
        print(table(["workload", "PyTorch configuration (OpenBLAS core, foreach, channels_last)", "median", "min",
                     "rounds", ""], rows))

    print("\n== what ran")
    for wl in wls:
        ct, pt = runs.get((wl, "ctrain"), []), runs.get((wl, "pytorch"), [])
        if ct:
            print(f"ctrain  {wl}: " + (ct[0]["env"][0] if ct[0]["env"] else "?"))
            if ct[0]["kernels"]:
                print(f"ctrain  {wl} kernels: {ct[0]['kernels']}")
        if pt:
            for e in pt[0]["env"]:
                print(f"pytorch {wl}: {e}")

    print("\n== result: ms per training step (forward + backward + optimizer), median over all timed steps of all rounds")
    rows = []
    for wl in wls:
        ct, pt = runs.get((wl, "ctrain"), []), runs.get((wl, "pytorch"), [])
        if wl in tried:
            print(f"pytorch {wl}: best configuration {tried[wl][0][0][3:]}")
        c, p = med(all_steps(ct)), med(all_steps(pt))
        cmin = min(all_steps(ct), default=float("nan"))
        pmin = min(all_steps(pt), default=float("nan"))
        ratio = p / c if c == c and p == p and c > 0 else float("nan")
        # paired: the two runs of one round saw about the same machine load
        ct_r = {r["round"]: med([s["step_ms"] for s in r["steps"]]) for r in ct}
        pt_r = {r["round"]: med([s["step_ms"] for s in r["steps"]]) for r in pt}
        paired = med([pt_r[k] / ct_r[k] for k in ct_r if k in pt_r and ct_r[k] > 0])
        rows.append([f"{wl}: {desc(wl)}", fmt(c), fmt(p),
                     f"{ratio:.3f}" if ratio == ratio else "n/a",
                     f"{paired:.3f}" if paired == paired else "n/a", fmt(cmin), fmt(pmin),
                     f"{len(all_steps(ct))}/{len(all_steps(pt))}"])
    print(table(["workload", "ctrain ms/step (median)", "PyTorch ms/step (median)",
                 "ratio PyTorch/ctrain (>1: ctrain faster)", "ratio, median of per-round ratios",
                 "ctrain min", "PyTorch min", "steps ct/pt"], rows))

    print("\n== memory: median over rounds, MiB (plan = ctrain's ct_plan_get_stats param + grad + buffer + activation"
          " + workspace + optimizer state; PyTorch: parameters + gradients + optimizer state, activations not"
          " counted; peak RSS = getrusage ru_maxrss of the whole process)")
    rows = []
    for wl in wls:
        ct, pt = runs.get((wl, "ctrain"), []), runs.get((wl, "pytorch"), [])

        def res(recs, key):
            xs = []
            for r in recs:
                try:
                    xs.append(float((r["result"] or {})[key]))
                except (KeyError, ValueError):
                    pass
            return xs

        if not any(res(ct, "peak_rss_mb") + res(pt, "peak_rss_mb")):
            continue
        npc, npp = res(ct, "n_params"), res(pt, "n_params")
        rows.append([f"{wl}: {desc(wl)}", f"{int(npc[0]):,}" if npc else "n/a", f"{int(npp[0]):,}" if npp else "n/a",
                     fmt(med(res(ct, "plan_mb"))), fmt(med(res(ct, "peak_rss_mb"))),
                     fmt(med(res(pt, "plan_mb"))), fmt(med(res(pt, "peak_rss_mb")))])
    if rows:
        print(table(["workload", "ctrain params", "PyTorch params", "ctrain plan MiB", "ctrain peak RSS MiB",
                     "PyTorch params+grads+state MiB", "PyTorch peak RSS MiB"], rows))

    rows = []
    for wl in wls:
        ct = runs.get((wl, "ctrain"), [])
        mf = [float((r["result"] or {}).get("mfu", "nan")) for r in ct]
        gf = [float((r["result"] or {}).get("gflops", "nan")) for r in ct]
        mf = [x for x in mf if x == x and x >= 0]
        gf = [x for x in gf if x == x and x >= 0]
        if mf:
            rows.append([f"{wl}: {desc(wl)}", f"{100 * med(mf):.1f}%", fmt(med(gf)) if gf else "n/a", str(len(mf))])
    if rows:
        print("\n== ctrain MFU per step (bench_step --mfu-steps: profiled steps after the timed ones; achieved FLOP/s "
              "over the peak of the unit that ran each op: FP32 FMA, AVX512-BF16 or AMX, as `ctrain info` prints)")
        print(table(["workload", "MFU (median over runs)", "achieved GFLOP/s", "runs"], rows))

    print("\n== phases: median ms (forward incl. loss | backward | optimizer update incl. zero_grad for PyTorch)")
    rows = []
    for wl in wls:
        for fw in ("ctrain", "pytorch"):
            recs = runs.get((wl, fw), [])
            if not recs:
                continue
            rows.append([f"{wl} {fw}", fmt(med(all_steps(recs, "fwd_ms"))), fmt(med(all_steps(recs, "bwd_ms"))),
                         fmt(med(all_steps(recs, "opt_ms"))), fmt(med(all_steps(recs))),
                         fmt(med(all_steps(recs, "cpu_ms")))])
    print(table(["run", "forward", "backward", "optimizer", "step (wall)", "step CPU time (all threads)"], rows))

    print("\n== per-round medians, ms/step [CPU cores other processes used meanwhile, from /proc/stat]")
    rows = []
    for wl in wls:
        for fw in ("ctrain", "pytorch"):
            recs = runs.get((wl, fw), [])
            if recs:
                rows.append([f"{wl} {fw}"] + [f"{fmt(med([s['step_ms'] for s in r['steps']]))} [{others(r):.2f}]" if others(r) >= 0
                                               else fmt(med([s["step_ms"] for s in r["steps"]]))
                                               for r in recs])
    n = max((len(r) - 1 for r in rows), default=0)
    rows = [r + [""] * (n + 1 - len(r)) for r in rows]
    print(table(["run"] + [f"r{i + 1}" for i in range(n)], rows))

    print(f"\n== by machine load: every run classed by the CPU other processes used during its timed steps"
          f" (quiet: <= {QUIET_CORES} cores; one core busy: >= {BUSY_CORES}); median ms/step over the runs in a class")
    rows = []
    for wl in wls:
        ct, pt = runs.get((wl, "ctrain"), []), runs.get((wl, "pytorch"), [])
        for cls, test in (("quiet", lambda o: 0 <= o <= QUIET_CORES), ("one core busy", lambda o: o >= BUSY_CORES)):
            cq = [s["step_ms"] for r in ct if test(others(r)) for s in r["steps"]]
            pq = [s["step_ms"] for r in pt if test(others(r)) for s in r["steps"]]
            c, p = med(cq), med(pq)
            rows.append([f"{wl}: {desc(wl)}", cls, fmt(c), fmt(p),
                         f"{p / c:.3f}" if c == c and p == p else "n/a",
                         f"{sum(1 for r in ct if test(others(r)))}/{sum(1 for r in pt if test(others(r)))}"])
    print(table(["workload", "load", "ctrain ms/step (median)", "PyTorch ms/step (median)", "ratio PyTorch/ctrain",
                 "runs ct/pt"], rows))

    print(f"\n== quiet rounds only: rounds where other processes used <= {QUIET_CORES} cores during both runs")
    rows = []
    for wl in wls:
        ct, pt = runs.get((wl, "ctrain"), []), runs.get((wl, "pytorch"), [])
        pt_by = {r["round"]: r for r in pt}
        quiet = [r["round"] for r in ct if r["round"] in pt_by and 0 <= others(r) <= QUIET_CORES
                 and 0 <= others(pt_by[r["round"]]) <= QUIET_CORES]
        cq = [s["step_ms"] for r in ct if r["round"] in quiet for s in r["steps"]]
        pq = [s["step_ms"] for r in pt if r["round"] in quiet for s in r["steps"]]
        c, p = med(cq), med(pq)
        rows.append([f"{wl}: {desc(wl)}", fmt(c), fmt(p),
                     f"{p / c:.3f}" if c == c and p == p else "n/a",
                     " ".join(f"r{q}" for q in quiet) or "none"])
    print(table(["workload", "ctrain ms/step (median)", "PyTorch ms/step (median)",
                 "ratio PyTorch/ctrain", "quiet rounds"], rows))

    for wl in wls:
        path = os.path.join(logdir, f"{wl}_perf.txt")
        if not os.path.exists(path):
            continue
        groups, total, event_ns = perf_breakdown(path)
        # CPU time of the profiled run per step: cpu-clock event count (ns) over
        # all steps it ran (1 warmup + timed); compile and setup are included.
        n_run = float("nan")
        oth = "?"
        run_log = os.path.join(logdir, f"{wl}_perf_run.log")
        if os.path.exists(run_log):
            with open(run_log) as f:
                for line in f:
                    if line.startswith("RESULT "):
                        d = kv(line)
                        n_run = int(d.get("steps_total", int(d["steps"]) + 1))
                        oth = d.get("others_cores", "?")
        cpu_ms = event_ns / 1e6 / n_run
        print(f"\n== ctrain {wl}: where the CPU time goes (perf, cpu-clock samples of one bench_step run,"
              f" all threads; {fmt(cpu_ms)} CPU ms per step in that run; other processes used {oth} cores)")
        rows = []
        other = 0.0
        for g, pct in groups:
            if pct < 0.5:
                other += pct
                continue
            rows.append([g, f"{pct:.1f}%", fmt(pct / 100 * cpu_ms)])
        if other:
            rows.append(["(everything under 0.5% each)", f"{other:.1f}%", ""])
        print(table(["kernel / place", "share of CPU samples", "est CPU ms/step"], rows))

    for wl in wls:
        dnnl_report(logdir, wl)


def dnnl_calls(path):
    """{(primitive, prop_kind, problem): (impl, [exec ms...])} and steps run, from ONEDNN_VERBOSE output."""
    calls = {}
    n_steps = 0
    if not os.path.exists(path):
        return calls, 0, "?"
    oth = "?"
    with open(path) as f:
        for line in f:
            if line.startswith("RESULT "):
                d = kv(line)
                n_steps = int(d.get("steps_total", int(d["steps"]) + 1))
                oth = d.get("others_cores", "?")
            if not line.startswith(("onednn_verbose,exec", "dnnl_verbose,exec")):
                continue
            p = line.rstrip("\n").split(",")
            # exec,cpu,<primitive>,<impl>,<prop>,<mds>,<attrs>,<aux>,<problem>,<ms>
            if len(p) < 11:
                continue
            prim, impl, prop, problem = p[3], p[4], p[5], p[-2]
            try:
                ms = float(p[-1])
            except ValueError:
                continue
            if prim == "reorder":
                problem = "(layout conversions)"
                prop = ""
            key = (prim, prop, problem)
            e = calls.setdefault(key, [set(), []])
            e[0].add(impl)
            e[1].append(ms)
    return calls, n_steps, oth


def dnnl_report(logdir, wl):
    ct, ct_steps, ct_oth = dnnl_calls(os.path.join(logdir, f"{wl}_ctrain_dnnl.txt"))
    pt, pt_steps, pt_oth = dnnl_calls(os.path.join(logdir, f"{wl}_pytorch_dnnl.txt"))
    if not ct and not pt:
        return
    print(f"\n== {wl}: oneDNN primitives (ONEDNN_VERBOSE, one run each: 'ms/step' = sum of exec times / steps run;"
          f" the same libdnnl serves both; PyTorch's Linear goes to OpenBLAS, not oneDNN;"
          f" other processes used {ct_oth} cores during ctrain's run, {pt_oth} during PyTorch's)")
    rows = []
    keys = sorted(set(ct) | set(pt), key=lambda k: (k[0] == "reorder", k[0], k[2], k[1]))
    for k in keys:
        row = [f"{k[0]} {k[1]} {k[2]}".replace("  ", " ")]
        for d, n in ((ct, ct_steps), (pt, pt_steps)):
            if k in d:
                impls, ms = d[k]
                row += ["/".join(sorted(impls)), f"{len(ms) / max(n, 1):.1f}", f"{med(ms):.2f}",
                        fmt(sum(ms) / max(n, 1))]
            else:
                row += ["-", "", "", ""]
        rows.append(row)
    print(table(["primitive prop problem", "ctrain impl", "calls/step", "median ms", "ms/step",
                 "PyTorch impl", "calls/step", "median ms", "ms/step"], rows))


def nthreads(recs):
    for r in recs:
        for e in r["env"]:
            m = re.search(r"threads=(\d+)", e)
            if m:
                return int(m.group(1))
    return 1


def tune_report(logdir):
    runs = load(logdir)
    print("\n== PyTorch variants: median ms/step over all rounds (min in brackets)")
    for wl in ("mlp", "cnn"):
        rows = []
        for (w, label), recs in sorted(runs.items()):
            if w != wl:
                continue
            core = next((kv(e).get("openblas_core") for e in recs[0]["env"] if "openblas_core" in e), "?")
            rows.append([label, core, fmt(med(all_steps(recs))), fmt(min(all_steps(recs), default=float("nan"))),
                         fmt(med(all_steps(recs, "fwd_ms"))), fmt(med(all_steps(recs, "bwd_ms"))),
                         fmt(med(all_steps(recs, "opt_ms"))),
                         " ".join(fmt(med([s["step_ms"] for s in r["steps"]])) for r in recs)])
        if rows:
            print(f"\n{wl}: {desc(wl)}")
            print(table(["variant", "openblas core", "step median", "min", "fwd", "bwd", "opt", "per-round medians"],
                        rows))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("main", "tune"):
        sys.exit(__doc__)
    (main_report if sys.argv[1] == "main" else tune_report)(sys.argv[2])
