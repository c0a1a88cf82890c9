#!/usr/bin/python3
"""bench/e2e_report.py DIR - the tables of one bench/e2e.sh run from its logs:
per workload, the per-epoch (GPT: per eval interval) times of ctrain and
PyTorch side by side (medians over rounds), the training time, the process
wall time, the final test accuracy (GPT: val loss) and the ratio PyTorch /
ctrain; then one summary table.

ctrain: DIR/<wl>_ctrain_r<k>.jsonl (the run's metrics_file: "eval" and "done"
records, times in seconds since training started). PyTorch:
DIR/<wl>_torch_r<k>.log ("E2E eval ..." / "E2E done ..." lines, the same
clock). Both: DIR/<wl>_<side>_r<k>.log.wall (process wall time, own CPU
time (user + sys: on a shared machine the work done, spin-waiting included), the cores other processes used meanwhile). An epoch's time includes its
evaluation on both sides."""
import glob
import json
import os
import re
import statistics
import sys

WL_ORDER = ["mlp", "cnn", "gpt", "resnet18"]


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def read_wall(path):
    try:
        with open(path) as f:
            line = f.read().strip()
        return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:]) if k != "load_end"}
    except (OSError, ValueError):
        return {}


def read_ctrain(path):
    ev, done = [], None
    try:
        with open(path) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if j.get("type") == "eval":
                    ev.append((j["step"], j["time"], j.get("test_loss"), j.get("test_acc")))
                elif j.get("type") == "done":
                    done = (j["steps"], j["time"], j.get("test_loss"), j.get("test_acc"))
    except OSError:
        return None
    return ev, done


def read_torch(path):
    ev, done = [], None
    try:
        with open(path) as f:
            for line in f:
                m = re.match(r"E2E (eval|done) (.*)", line)
                if not m:
                    continue
                kv = dict(x.split("=") for x in m.group(2).split())
                acc = float(kv["test_acc"])
                rec = (int(kv.get("step", kv.get("steps", 0))), float(kv["time"]), float(kv["test_loss"]),
                       None if acc != acc else acc)
                if m.group(1) == "eval":
                    ev.append(rec)
                else:
                    done = rec
    except OSError:
        return None
    return ev, done


def intervals(ev):
    out, prev = [], 0.0
    for _, t, _, _ in ev:
        out.append(t - prev)
        prev = t
    return out


def fmt(x, spec="%.1f"):
    return "-" if x is None else spec % x


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else "%.2f" % (a / b)


def final_metric(done, is_gpt):
    if not done:
        return None
    return done[2] if is_gpt else (100.0 * done[3] if done[3] is not None else None)


def main():
    d = sys.argv[1]
    wls = sorted({os.path.basename(p).split("_")[0] for p in glob.glob(os.path.join(d, "*_r*.log"))},
                 key=lambda w: WL_ORDER.index(w) if w in WL_ORDER else 99)
    summary = []
    for wl in wls:
        is_gpt = wl == "gpt"
        sides = {}
        for side, reader, ext in (("ctrain", read_ctrain, ".jsonl"), ("pytorch", read_torch, ".log")):
            runs = []
            for p in sorted(glob.glob(os.path.join(d, "%s_%s_r*.log" % (wl, "ctrain" if side == "ctrain" else "torch")))):
                res = reader(p[:-4] + ext)
                if res is None or res[1] is None:
                    continue
                runs.append(dict(ev=res[0], done=res[1], wall=read_wall(p + ".wall")))
            sides[side] = runs
        c, t = sides["ctrain"], sides["pytorch"]
        cmd = ""
        try:
            with open(os.path.join(d, wl + ".cmd")) as f:
                cmd = f.read().strip()
        except OSError:
            pass
        unit = "eval interval" if is_gpt else "epoch"
        print("\n== %s  (%s; %d ctrain / %d PyTorch run(s); medians over runs)" % (wl, cmd, len(c), len(t)))
        n = max([len(r["ev"]) for r in c + t] or [0])
        print("| %s | steps | ctrain s | PyTorch s | PyTorch/ctrain |" % unit)
        print("|---|---|---|---|---|")
        for i in range(n):
            ci = med([intervals(r["ev"])[i] for r in c if len(r["ev"]) > i])
            ti = med([intervals(r["ev"])[i] for r in t if len(r["ev"]) > i])
            st = next((r["ev"][i][0] for r in c + t if len(r["ev"]) > i), 0)
            print("| %d | %d | %s | %s | %s |" % (i + 1, st, fmt(ci), fmt(ti), ratio(ti, ci)))
        ct_tr, pt_tr = med([r["done"][1] for r in c]), med([r["done"][1] for r in t])
        ct_w, pt_w = med([r["wall"].get("wall") for r in c]), med([r["wall"].get("wall") for r in t])
        ct_m, pt_m = med([final_metric(r["done"], is_gpt) for r in c]), med([final_metric(r["done"], is_gpt) for r in t])
        ct_o, pt_o = med([r["wall"].get("others_cores") for r in c]), med([r["wall"].get("others_cores") for r in t])
        mname = "val loss" if is_gpt else "test acc %"
        mfmt = "%.4f" if is_gpt else "%.2f"
        print("| training (train + evals) | | %s | %s | %s |" % (fmt(ct_tr), fmt(pt_tr), ratio(pt_tr, ct_tr)))
        print("| process wall (start to exit) | | %s | %s | %s |" % (fmt(ct_w), fmt(pt_w), ratio(pt_w, ct_w)))
        ct_cpu, pt_cpu = med([r["wall"].get("cpu") for r in c]), med([r["wall"].get("cpu") for r in t])
        print("| process CPU time (user + sys) | | %s | %s | %s |" % (fmt(ct_cpu), fmt(pt_cpu), ratio(pt_cpu, ct_cpu)))
        print("| final %s | | %s | %s | |" % (mname, fmt(ct_m, mfmt), fmt(pt_m, mfmt)))
        if len(c) > 1 or len(t) > 1:
            print("| final %s per run | | %s | %s | |" % (mname, " ".join(fmt(final_metric(r["done"], is_gpt), mfmt) for r in c),
                                                        " ".join(fmt(final_metric(r["done"], is_gpt), mfmt) for r in t)))
        print("| other processes (cores, median) | | %s | %s | |" % (fmt(ct_o, "%.2f"), fmt(pt_o, "%.2f")))
        summary.append((wl, mname, mfmt, ct_tr, pt_tr, ct_w, pt_w, ct_m, pt_m))
    print("\n== summary (seconds, medians; ratio = PyTorch / ctrain, > 1: ctrain faster)")
    print("| workload | ctrain training | PyTorch training | ratio | ctrain wall | PyTorch wall | wall ratio | "
          "final metric | ctrain | PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for wl, mname, mfmt, ct_tr, pt_tr, ct_w, pt_w, ct_m, pt_m in summary:
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" %
              (wl, fmt(ct_tr), fmt(pt_tr), ratio(pt_tr, ct_tr), fmt(ct_w), fmt(pt_w), ratio(pt_w, ct_w), mname,
               fmt(ct_m, mfmt), fmt(pt_m, mfmt)))


if __name__ == "__main__":
    main()
