#!/usr/bin/python3
"""bench/scale.py - scaling beyond this machine, by simulation (issue 32).

Four stages (default: all four, logs under build/bench-scale/<date>/):

  link      the link's latency and bandwidth: bench/pingpong (MPI ping-pong and
            allreduce sweep, build-bench/bench/pingpong) on one host over shared
            memory (Open MPI's sm/vader BTL, 2 and 4 ranks), and with one rank in each
            of two network namespaces joined by a veth pair over the tcp BTL
            (scripts/netns_mpirun.sh: mpirun with a plm_rsh_agent that runs the
            daemon with `ip netns exec`), at 1, 10 and 100 gbit and unshaped.
            Fits one-way time(bytes) = latency + bytes / bandwidth on the fastest
            of 5 rounds per size (small sizes -> latency, >= 512 KiB -> bandwidth).
  measure   compute and buckets: `ctrain train --profile` of each workload at 1, 2
            and 4 ranks x --threads 1, R rounds, with the same rows per rank (weak scaling);
            the GPTs also at tensor_parallel 2 (twice the rows) and pipeline_stages 2
            (8 micro-batches of a quarter of the rows: the same global batch);
            from the traces: step, forward, backward, optimizer and data time per
            step, and each gradient bucket's bytes and when backward made it
            ready (its allreduce's start, as a fraction of backward).
  netns     the check where the link decides: mlp and cnn at 2 ranks across the namespaces at 1 and 10 gbit,
            comm_progress hook (the default) and thread (same rows per rank; root), and solo 2 beside them
  model     the projection: step time = compute + what the communication does
            not hide.  DP: per bucket a ring allreduce 2(N-1)/N * bytes / bw +
            2(N-1) * latency, started when the bucket is ready (or after the one
            before it), overlapped with the rest of backward; ZeRO-2: the same
            bytes as reduce-scatter, plus an allgather of the parameters after the
            optimizer (not hidden); ZeRO-3: + an allgather of each layer's
            parameters in forward and again in backward (hidden behind compute up
            to its length); tensor parallel T (GPT): compute / T + 4 allreduces of
            the activations per block (forward 2, backward 2), not hidden;
            pipeline P (GPT, 1F1B, M = 4P micro-batches): compute / P * (M + P -
            1) / M + the activations' sends.  First the model is checked against the
            measured 2 and 4 ranks on this machine (shared memory; ranks beyond
            the cores are oversubscribed, so compute is scaled by ranks x
            threads / cores), then projected to 8, 16 and 64 ranks.

  bench/scale.py                       # all: ~40 min on 2 shared cores (gpt2 is most of it)
  bench/scale.py link                  # the link only (root for the namespaces)
  bench/scale.py model DIR             # the projection again from DIR's logs
  bench/scale.py selftest              # the model's arithmetic on hand-computed cases
  bench/scale.py --workloads "mlp gptchar" measure
Options: --workloads "mlp cnn gptchar gpt2" --ranks "8 16 64" --rounds R (measure: 3; --first-round K numbers them from K, to add rounds to DIR; the order of
1, 2, 4 ranks alternates by round, the median round is used) --dir DIR (the logs; default a new
build/bench-scale/<date>). CT=build/ctrain.
"""
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CT = os.environ.get("CT", "build/ctrain")
PINGPONG = "build-bench/bench/pingpong"
CORES = os.cpu_count() or 1
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")

# rows per rank, the ctrain train arguments, and (GPT) the shape for tensor / pipeline parallel
WORKLOADS = {
    "mlp": dict(rows=128, unit="samples", steps=16,
                args="--recipe recipes/mnist_mlp.json"),
    "cnn": dict(rows=128, unit="samples", steps=16,
                args="--recipe recipes/fashion_cnn.json"),
    "gptchar": dict(rows=8, unit="tokens", ctx=256, d=384, layers=6, steps=7,
                    args="--recipe recipes/gpt_char_small.json --set eval_every=0 --set eval_batches=1 --save-every 0"),
    "gpt2": dict(rows=2, unit="tokens", ctx=64, d=768, layers=12, steps=7,
                 args="--model gpt --set preset=gpt2-124m --set dataset=moby-dick --set tokenizer=gpt2 --set context=64 "
                      "--set optimizer.name=adamw --set clip_grad_norm=1 --dropout 0 --set eval_every=0 "
                      "--set eval_batches=1 --save-every 0"),
}
LINKS = ["shm", "1gbit", "10gbit", "100gbit", "unshaped"]
SEEDS = [("BERT-Large, 8 devices (seed)", "7.6x (380 samples/s)"),
         ("Swin-B, 8 devices (seed)", "7.1x (890 samples/s)"),
         ("BERT-Large, 128 devices, bucketing (seed)", "1820 -> 2470 samples/s (one allreduce -> buckets + overlap)")]


def sh(cmd, log, timeout=900):
    with open(log, "w") as f:
        f.write("$ " + cmd + "\n")
        f.flush()
        r = subprocess.run(cmd, shell=True, cwd=ROOT, env=ENV, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    return r.returncode


# ---------------------------------------------------------------- link
def run_link(d):
    if not os.path.exists(os.path.join(ROOT, PINGPONG)):
        subprocess.run("make -s -C bench pingpong", shell=True, cwd=ROOT, check=True)
    for link in LINKS:
        if link == "shm":
            for n in (2, 4):
                sh("timeout -k 5 300 nice mpirun --bind-to none -np %d %s --max-mb 32" % (n, PINGPONG),
                   os.path.join(d, "link-shm%d.txt" % n))
        else:
            rate = "1000gbit" if link == "unshaped" else link
            sh("timeout -k 5 300 nice scripts/netns_mpirun.sh -n 1 --rate %s -- %s --max-mb 32" % (rate, PINGPONG),
               os.path.join(d, "link-%s.txt" % link))
        print("  link %s measured" % link, file=sys.stderr)


def parse_link(path):
    pp, ar, note = {}, {}, ""
    for line in open(path):
        m = re.match(r"PP bytes=(\d+) us=([\d.]+) min_us=([\d.]+)", line)
        if m:
            pp[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
        m = re.match(r"AR np=\d+ bytes=(\d+) us=([\d.]+) min_us=([\d.]+)", line)
        if m:
            ar[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
        if line.startswith("netns: link"):
            note = re.sub(r"; \d+ rank\(s\) per namespace$", "", line.split(": ", 2)[2].strip())
    return pp, ar, note


def fit_link(pp):
    """latency (s) = the fastest small message; bandwidth (B/s) = least squares slope over >= 512 KiB"""
    lat = min(v[1] for b, v in pp.items() if b <= 128) * 1e-6
    big = [(b, v[1] * 1e-6) for b, v in pp.items() if b >= 512 * 1024]
    n = len(big)
    mx, my = sum(b for b, _ in big) / n, sum(t for _, t in big) / n
    slope = sum((b - mx) * (t - my) for b, t in big) / sum((b - mx) ** 2 for b, _ in big)
    return lat, 1.0 / slope


def links(d):
    out = {}
    for link in LINKS:
        p = os.path.join(d, "link-%s.txt" % (link + "2" if link == "shm" else link))
        if not os.path.exists(p):
            continue
        pp, ar, note = parse_link(p)
        if len(pp) < 4:
            continue
        lat, bw = fit_link(pp)
        out[link] = dict(lat=lat, bw=bw, note=note or "Open MPI sm (vader) BTL, one host", ar={2: ar})
        if link == "shm" and os.path.exists(os.path.join(d, "link-shm4.txt")):
            out[link]["ar"][4] = parse_link(os.path.join(d, "link-shm4.txt"))[1]
    return out


def ar_measured(table, nbytes):
    """the measured allreduce time (s, median round) at nbytes, log-log interpolated"""
    xs = sorted(table)
    if nbytes <= xs[0]:
        return table[xs[0]][0] * 1e-6
    for a, b in zip(xs, xs[1:]):
        if nbytes <= b:
            w = (math.log(nbytes) - math.log(a)) / (math.log(b) - math.log(a))
            return math.exp((1 - w) * math.log(table[a][0]) + w * math.log(table[b][0])) * 1e-6
    return table[xs[-1]][0] * 1e-6 * nbytes / xs[-1]


# ---------------------------------------------------------------- measure
def train_cmd(spec, rows, prof):
    return ("%s train %s --batch-size %d --max-steps %d --threads 1 --set log_every=1 --save-dir %s/ck --profile %s" %
            (CT, spec["args"], rows, spec["steps"], prof, prof))


def run_measure(d, names, rounds, first=1):
    """per round and workload: 1, 2 and 4 ranks (DP, same rows per rank), and 2 and 4 independent 1-rank
    processes at once (solo: the compute under the same sharing of the cores, without communication)"""
    for r in range(first, first + rounds):
        for w in names:
            spec = WORKLOADS[w]
            runs = [("np", 1), ("np", 2), ("np", 4), ("solo", 2), ("solo", 4)]
            if "d" in spec:  # the GPTs: tensor and pipeline parallel at 2 ranks too
                runs += [("tp", 2), ("pp", 2)]
            for kind, n in (runs if r % 2 else runs[::-1]):  # the order alternates by round (the load drifts)
                prof = os.path.join(d, "%s-%s%d-r%d" % (w, kind, n, r))
                if kind == "np":
                    launch = "" if n == 1 else "mpirun --bind-to none -np %d " % n
                    cmd = "timeout -k 5 900 nice " + launch + train_cmd(spec, spec["rows"] * n, prof)
                elif kind == "tp":  # one tensor group: the global batch of n ranks' rows, each rank 1/n of every layer
                    cmd = ("timeout -k 5 900 nice mpirun --bind-to none -np %d " % n
                           + train_cmd(spec, spec["rows"] * n, prof) + " --set tensor_parallel=%d" % n)
                elif kind == "pp":  # n stages, 4n micro-batches of rows / 4 (the same global batch, project()'s layout)
                    cmd = ("timeout -k 5 900 nice mpirun --bind-to none -np %d " % n
                           + train_cmd(spec, max(1, spec["rows"] // 4), prof)
                           + " --set pipeline_stages=%d --set micro_batches=%d" % (n, 4 * n))
                else:
                    cmd = " & ".join("timeout -k 5 900 nice " + train_cmd(spec, spec["rows"], "%s/p%d" % (prof, k))
                                     for k in range(n)) + "; wait"
                t0 = time.time()
                rc = sh(cmd, prof + ".log")
                print("  round %d: %s %s %d: rc %d, %.0f s" % (r, w, kind, n, rc, time.time() - t0), file=sys.stderr)


NETNS_RATES = ("1gbit", "10gbit")


def run_netns(d, names, rounds, first=1):
    """2 ranks across the two network namespaces (scripts/netns_mpirun.sh) at each of NETNS_RATES: the model's
    check where the link, not the cores, decides (mlp and cnn only: the GPTs take minutes per run there)"""
    for r in range(first, first + rounds):
        for w in [x for x in names if x in ("mlp", "cnn")]:
            spec = WORKLOADS[w]
            prof = os.path.join(d, "%s-nssolo2-r%d" % (w, r))  # the compute beside these runs (the load drifts)
            sh(" & ".join("timeout -k 5 900 nice " + train_cmd(spec, spec["rows"], "%s/p%d" % (prof, k))
                          for k in range(2)) + "; wait", prof + ".log")
            for rate in NETNS_RATES:
                for mode in ("hook", "thread"):  # comm_progress: the default, and the progress thread
                    prof = os.path.join(d, "%s-ns%s%s2-r%d" % (w, "" if mode == "hook" else "thread", rate, r))
                    cmd = ("timeout -k 10 900 nice scripts/netns_mpirun.sh -n 1 --rate %s -- " % rate
                           + train_cmd(spec, spec["rows"] * 2, prof) + " --set comm_progress=" + mode)
                    t0 = time.time()
                    rc = sh(cmd, prof + ".log")
                    print("  round %d: %s 2 ranks across namespaces at %s, comm_progress %s: rc %d, %.0f s" %
                          (r, w, rate, mode, rc, time.time() - t0), file=sys.stderr)


def parse_run(prof):
    """per-step means (s) of the profiled steps: step, fwd, bwd (span), opt, data; the buckets (bytes, ready fraction)"""
    path = os.path.join(prof, "trace.json")
    if not os.path.exists(path):
        return None
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "step")
    r = dict(step=[], fwd=[], bwd=[], opt=[], data=[], wait=[], buckets={})
    for s0, s1 in steps:
        inside = [e for e in ev if s0 <= e["ts"] < s1]
        bw = [e for e in inside if e.get("cat") == "op" and e["args"].get("phase") == "backward"]
        fw = [e for e in inside if e.get("cat") == "op" and e["args"].get("phase") == "forward"]
        if not bw:
            continue
        b0, b1 = min(e["ts"] for e in bw), max(e["ts"] + e["dur"] for e in bw)
        r["step"].append(s1 - s0)
        r["bwd"].append(b1 - b0)
        r["fwd"].append(sum(e["dur"] for e in fw))
        r["opt"].append(sum(e["dur"] for e in inside if e.get("cat") == "optimizer"))
        r["data"].append(sum(e["dur"] for e in inside if e.get("cat") == "data"))
        r["wait"].append(sum(e["dur"] for e in inside if e.get("cat") == "comm"))
        for e in ev:
            if e.get("cat") == "comm_bucket" and b0 - 1 <= e["ts"] <= b1 + 1e5 and e["ts"] < s1:
                k = e["args"]["bucket"]
                r["buckets"].setdefault(k, [e["args"]["bytes"], []])[1].append(min(1.0, (e["ts"] - b0) / (b1 - b0)))
                done = [x for x in bw if x["ts"] + x["dur"] <= e["ts"] + 1]  # the backward node that completed it
                r.setdefault("nodes", {})[k] = max(done, key=lambda x: x["ts"] + x["dur"])["args"].get("node", "?") \
                    if done else "?"
    out = {k: statistics.median(v) * 1e-6 for k, v in r.items() if k not in ("buckets", "nodes") and v}
    out["buckets"] = [(v[0], statistics.median(v[1])) for _, v in sorted(r["buckets"].items())]
    out["nodes"] = [r.get("nodes", {}).get(k, "?") for k in sorted(r["buckets"])]
    return out


# ---------------------------------------------------------------- model
def ring_ar(nbytes, n, lat, bw):
    return 0.0 if n < 2 else 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * lat


def ring_half(nbytes, n, lat, bw):  # reduce-scatter or allgather: half an allreduce
    return 0.0 if n < 2 else (n - 1) / n * nbytes / bw + (n - 1) * lat


def exposed(buckets, t_bwd, cost):
    """buckets (bytes, ready fraction of backward) reduced in order, each started when ready and after the one
    before; returns the time past the end of backward the last one completes"""
    end = 0.0
    for nbytes, frac in buckets:
        end = max(end, frac * t_bwd) + cost(nbytes)
    return max(0.0, end - t_bwd)


def dp_step(c, n, cost, overlap=True):
    t = c["compute"]
    if not overlap:
        return t + sum(cost(b) for b, _ in c["buckets"])
    return t + exposed(c["buckets"], c["bwd"], cost)


def project(c, w, n, lat, bw):
    """step seconds of each layout at n ranks (each rank on its own cores), same rows per rank"""
    grad = sum(b for b, _ in c["buckets"])
    ar = lambda b: ring_ar(b, n, lat, bw)
    half = lambda b: ring_half(b, n, lat, bw)
    out = {"DP, one allreduce after backward": c["compute"] + ar(grad) + 2 * (n - 1) * lat,
           "DP, buckets + overlap": dp_step(c, n, ar) + 2 * (n - 1) * lat}
    zc = dict(c, compute=c["compute"] - c.get("opt", 0.0) * (1 - 1 / n))  # the optimizer on 1/n of the parameters
    out["ZeRO-2"] = dp_step(zc, n, half) + half(grad) + 2 * (n - 1) * lat
    fwd_ag = half(grad)  # every layer's parameters gathered before its forward, prefetched behind compute
    out["ZeRO-3"] = (zc["compute"] + max(0.0, fwd_ag - c["fwd"]) + exposed(c["buckets"], c["bwd"], lambda b: half(b) * 2)
                     + 2 * (n - 1) * lat)
    spec = WORKLOADS[w]
    if "d" in spec:
        act = spec["rows"] * n * spec["ctx"] * spec["d"] * 4  # the global batch's activations at a block boundary
        # tensor parallel n: every rank computes 1/n of the global batch's work (n x one rank's rows)
        out["tensor parallel %d" % n] = c["compute"] + 4 * spec["layers"] * ring_ar(act, n, lat, bw)
        m = 4 * n
        out["pipeline %d (1F1B, %d micro-batches)" % (n, m)] = (c["compute"] * (m + n - 1) / m
                                                              + 2 * (m + n - 2) * (lat + act / m / bw))
    return out


def merged(d, w, kind, n, only=None):
    """the rounds' runs of workload w (kind np: n ranks; solo: n processes at once, each a trace): the median
    over the rounds (and processes) of each per-step median"""
    runs = []
    for f in sorted(os.listdir(d)):
        mm = re.fullmatch(r"%s-%s%d(-r(\d+))?" % (w, kind, n), f)
        if mm and (only is None or (mm.group(2) and int(mm.group(2)) in only)):
            paths = [os.path.join(d, f)] if not kind.endswith("solo") else [os.path.join(d, f, "p%d" % k) for k in range(n)]
            for path in paths:
                r = parse_run(path)
                if r and "step" in r:
                    runs.append(r)
    if not runs:
        return None
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k not in ("buckets", "nodes")}
    out["buckets"], out["nodes"] = runs[0]["buckets"], runs[0]["nodes"]
    out["rounds"] = len(runs)
    return out


def calib(d, w):
    runs = {n: merged(d, w, "np", n) for n in (1, 2, 4)}
    runs.update({-n: merged(d, w, "solo", n) for n in (2, 4)})
    # the namespace runs are compared with the solo runs of their own rounds (the load drifts between stages)
    paired = {int(m.group(1)) for m in (re.fullmatch(r"%s-nssolo2-r(\d+)" % w, f) for f in os.listdir(d)) if m} or None
    runs.update({rate: merged(d, w, "ns" + rate, 2, paired) for rate in NETNS_RATES})
    runs.update({"thread" + rate: merged(d, w, "nsthread" + rate, 2, paired) for rate in NETNS_RATES})
    runs["nssolo"] = merged(d, w, "nssolo", 2)
    runs["tp2"], runs["pp2"] = merged(d, w, "tp", 2), merged(d, w, "pp", 2)
    if not runs[1] or not (runs[2] or runs[4]):
        return None, runs
    c = dict(runs[1])
    c["compute"] = runs[1]["step"]
    c["buckets"], c["nodes"] = (runs[2] or runs[4])["buckets"], (runs[2] or runs[4])["nodes"]
    return c, runs


def model(d, names, ranks):
    L = links(d)
    cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
    print("== scaling by simulation (bench/scale.py), logs %s" % d)
    print("cpu: %s, %d cores; load average now %s" % (cpu, CORES, open("/proc/loadavg").read().split()[:3]))
    print("\n== the link (bench/pingpong: one-way = half a ping-pong round trip; fastest of 5 rounds per size)")
    print("| link | what | latency (us) | bandwidth (Gbit/s) | allreduce 2 ranks, 4 MiB (ms, median) |")
    print("|---|---|--:|--:|--:|")
    for k, v in L.items():
        print("| %s | %s | %.1f | %.2f | %.2f |" % (k, v["note"], v["lat"] * 1e6, v["bw"] * 8e-9,
                                                 ar_measured(v["ar"][2], 4 << 20) * 1e3))
    cal = {}
    print("\n== compute on this CPU (ctrain train --threads 1, 1 rank; medians of the profiled steps, ms)")
    print("| workload | rows/rank | step | forward | backward | optimizer | data | gradients (MiB) | buckets: MiB @ ready (fraction of backward), after node |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|---|")
    for w in names:
        c, runs = calib(d, w)
        if not c:
            print("| %s | (not measured: see %s/%s-np*.log) |" % (w, d, w))
            continue
        cal[w] = (c, runs)
        g = sum(b for b, _ in c["buckets"])
        print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %s |" % (
            w, WORKLOADS[w]["rows"], c["step"] * 1e3, c["fwd"] * 1e3, c["bwd"] * 1e3, c["opt"] * 1e3, c["data"] * 1e3,
            g / 2 ** 20, ", ".join("%.2f @ %.2f after %s" % (b / 2 ** 20, f, nd) for (b, f), nd in zip(c["buckets"], c["nodes"]))))
    print("\n== validation: projected against measured on this machine (shared memory, 1 thread per rank).")
    print("   compute at N ranks = N independent 1-rank processes at once (solo: the same sharing of the %d cores" % CORES)
    print("   and of the other jobs' load, no communication) + the buckets' allreduces: overlapped with backward from")
    print("   when each is ready (the model), by the measured allreduce sweep or the ring formula on the fitted link;")
    print("   and the same with no overlap (every bucket after backward)")
    print("| workload | ranks | measured ms/step | compute (solo N) | projected (overlap, measured allreduce) | error | projected (overlap, ring on fitted link) | error | projected (no overlap, measured allreduce) | error |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    errs, errs_serial = [], []
    shm = L.get("shm")
    for w, (c, runs) in cal.items():
        for n in (2, 4):
            m, solo = runs.get(n), runs.get(-n)
            if not m or not shm or n not in shm["ar"]:
                continue
            if not solo:
                print("| %s | %d | %.1f | (no solo run) |" % (w, n, m["step"] * 1e3))
                continue
            cc = dict(c, compute=solo["step"], bwd=solo["bwd"])
            meas = m["step"]
            p1 = dp_step(cc, n, lambda b: ar_measured(shm["ar"][n], b))
            p2 = dp_step(cc, n, lambda b: ring_ar(b, n, shm["lat"], shm["bw"]))
            p3 = dp_step(cc, n, lambda b: ar_measured(shm["ar"][n], b), overlap=False)
            e1, e2, e3 = p1 / meas - 1, p2 / meas - 1, p3 / meas - 1
            errs.append(abs(e1))
            errs_serial.append(abs(e3))
            print("| %s | %d | %.1f | %.1f | %.1f | %+.0f%% | %.1f | %+.0f%% | %.1f | %+.0f%% |" % (
                w, n, meas * 1e3, solo["step"] * 1e3, p1 * 1e3, 100 * e1, p2 * 1e3, 100 * e2, p3 * 1e3, 100 * e3))
    for w, (c, runs) in cal.items():
        for rate, mode in [(x, y) for x in NETNS_RATES for y in ("hook", "thread")]:
            m, solo, lk = runs.get(rate if mode == "hook" else "thread" + rate), runs.get("nssolo") or runs.get(-2), L.get(rate)
            if not m or not solo or not lk:
                continue
            cc = dict(c, compute=solo["step"], bwd=solo["bwd"])
            p1 = dp_step(cc, 2, lambda b: ar_measured(lk["ar"][2], b))
            p2 = dp_step(cc, 2, lambda b: ring_ar(b, 2, lk["lat"], lk["bw"]))
            p3 = dp_step(cc, 2, lambda b: ar_measured(lk["ar"][2], b), overlap=False)
            e1, e2, e3 = p1 / m["step"] - 1, p2 / m["step"] - 1, p3 / m["step"] - 1
            errs.append(abs(e1))
            errs_serial.append(abs(e3))
            print("| %s | 2 across namespaces, %s, comm_progress %s | %.1f | %.1f | %.1f | %+.0f%% | %.1f | %+.0f%% | %.1f | %+.0f%% |" % (
                w, rate, mode, m["step"] * 1e3, solo["step"] * 1e3, p1 * 1e3, 100 * e1, p2 * 1e3, 100 * e2, p3 * 1e3, 100 * e3))
    for w, (c, runs) in cal.items():  # the parallel layouts of the GPTs at 2 ranks (project()'s formulas)
        solo = runs.get(-2)
        spec = WORKLOADS[w]
        if not solo or not shm or "d" not in spec:
            continue
        act = spec["rows"] * 2 * spec["ctx"] * spec["d"] * 4
        for key, lay, name in (("tp2", "tensor parallel 2", "tensor parallel"),
                               ("pp2", "pipeline 2 (1F1B, 8 micro-batches)", "pipeline, 1F1B, 8 micro-batches")):
            m = runs.get(key)
            if not m:
                continue
            cc = dict(c, compute=solo["step"], bwd=solo["bwd"])
            p2 = project(cc, w, 2, shm["lat"], shm["bw"])[lay]
            if key == "tp2":  # the activations' allreduces from the measured sweep
                p1 = p3 = solo["step"] + 4 * spec["layers"] * ar_measured(shm["ar"][2], act)
            else:  # the sends are small against the bubble: the same formula either way
                p1 = p3 = p2
            e1, e2, e3 = p1 / m["step"] - 1, p2 / m["step"] - 1, p3 / m["step"] - 1
            errs.append(abs(e1))
            errs_serial.append(abs(e3))
            print("| %s | 2, %s | %.1f | %.1f | %.1f | %+.0f%% | %.1f | %+.0f%% | %.1f | %+.0f%% |" % (
                w, name, m["step"] * 1e3, solo["step"] * 1e3, p1 * 1e3, 100 * e1, p2 * 1e3, 100 * e2, p3 * 1e3,
                100 * e3))
    if errs:
        print("error, overlap model (solo compute + measured allreduce): largest %.0f%%, median %.0f%%; no-overlap model:"
              " largest %.0f%%, median %.0f%% (goal: within 20%%)" % (100 * max(errs), 100 * statistics.median(errs),
                                                                      100 * max(errs_serial), 100 * statistics.median(errs_serial)))
    print("\n== projection: scaling efficiency = throughput at N ranks / (N x one rank's); same rows per rank,")
    print("   each rank on its own cores (compute as measured at 1 rank x 1 thread); links as measured above,")
    print("   and 10 / 100 gbit also at their nominal rate with the veth's latency (the 'nominal' rows)")
    variants = [(k, v["lat"], v["bw"]) for k, v in L.items()]
    if "unshaped" in L:
        for rate in (10, 100):
            variants.append(("%d gbit nominal" % rate, L["unshaped"]["lat"], rate * 1e9 / 8))
    for w, (c, _) in cal.items():
        print("\n%s (%d %s per rank; one rank %.1f ms/step)" % (w, WORKLOADS[w]["rows"] * WORKLOADS[w].get("ctx", 1),
                                                              WORKLOADS[w]["unit"], c["step"] * 1e3))
        print("| link | layout | " + " | ".join("%d ranks" % n for n in ranks) + " |")
        print("|---|---|" + "--:|" * len(ranks))
        for k, lat, bw in variants:
            rows = {}
            for n in ranks:
                for lay, t in project(c, w, n, lat, bw).items():
                    rows.setdefault(re.sub(r"\d+ \(1F1B, \d+", "P (1F1B, 4P", re.sub(r"parallel \d+", "parallel N", lay)),
                                    []).append((t, n))
            for lay, ts in rows.items():
                print("| %s | %s | %s |" % (k, lay, " | ".join("%.1f ms, %.2fx (%.0f%%)" % (
                    t * 1e3, n * c["step"] / t, 100 * c["step"] / t) for t, n in ts)))
    print("\n== summary: DP with buckets + overlap, scaling efficiency (speedup) at " + ", ".join(map(str, ranks)) + " ranks")
    print("| workload | " + " | ".join(k for k, _, _ in variants) + " |")
    print("|---|" + "--:|" * len(variants))
    for w, (c, _) in cal.items():
        cells = []
        for _, lat, bw in variants:
            cells.append(" / ".join("%.0f%% (%.1fx)" % (100 * c["step"] / t, n * c["step"] / t) for n, t in
                                    ((n, project(c, w, n, lat, bw)["DP, buckets + overlap"]) for n in ranks)))
        print("| %s | %s |" % (w, " | ".join(cells)))
    print("\n== the seeds' published figures (docs/seeds.md), beside the projection")
    for a, b in SEEDS:
        print("- %s: %s" % (a, b))


def selftest():
    """the model's arithmetic on hand-computed cases (bench/scale.py selftest; exits 1 on a failure)"""
    fails = []

    def check(name, got, want, tol=1e-9):
        if abs(got - want) > tol * max(1.0, abs(want)):
            fails.append("%s: got %r, want %r" % (name, got, want))
    # ring allreduce of 8 MB over 4 ranks at 1 GB/s and 10 us: 2*3/4 * 8e6/1e9 + 6 * 10e-6 = 12.06 ms
    check("ring_ar", ring_ar(8e6, 4, 10e-6, 1e9), 12.06e-3)
    check("ring_ar 1 rank", ring_ar(8e6, 1, 10e-6, 1e9), 0.0)
    check("reduce-scatter", ring_half(8e6, 4, 10e-6, 1e9), 6.03e-3)
    # buckets ready at 0.5 and 1.0 of a 10 ms backward, 3 ms each: the first ends at 8, the second at 13 -> 3 exposed
    check("exposed", exposed([(1, 0.5), (1, 1.0)], 10e-3, lambda b: 3e-3), 3e-3)
    # a long first bucket delays the second: ready at 1 ms, done at 13; the second (ready at 10) 13 -> 16: 6 exposed
    check("exposed queued", exposed([(2, 0.1), (1, 1.0)], 10e-3, lambda b: 12e-3 if b == 2 else 3e-3), 6e-3)
    check("hidden", exposed([(1, 0.0)], 10e-3, lambda b: 5e-3), 0.0)
    # the link fit recovers 5 us and 2 GB/s from exact one-way times
    pp = {b: (0, (5e-6 + b / 2e9) * 1e6) for b in (8, 32, 128, 512 << 10, 2 << 20, 8 << 20)}
    lat, bw = fit_link(pp)
    check("fit latency", lat, 5e-6 + 8 / 2e9, 1e-6)
    check("fit bandwidth", bw, 2e9, 1e-6)
    table = {1024: (10.0, 9.0), 4096: (40.0, 36.0)}
    check("interpolated allreduce", ar_measured(table, 2048), 20e-6, 1e-6)
    for f in fails:
        print("FAIL " + f)
    print("bench/scale.py selftest: %d checks failed" % len(fails) if fails else "bench/scale.py selftest: all passed")
    return 1 if fails else 0


def main(argv):
    names, ranks, d, stages, rounds, first = list(WORKLOADS), [8, 16, 64], None, [], 3, 1
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__)
            return 0
        if a == "selftest":
            return selftest()
        if a == "--workloads":
            names = argv[i + 1].split()
            i += 1
        elif a == "--ranks":
            ranks = [int(x) for x in argv[i + 1].split()]
            i += 1
        elif a == "--rounds":
            rounds = int(argv[i + 1])
            i += 1
        elif a == "--first-round":
            first = int(argv[i + 1])
            i += 1
        elif a == "--dir":
            d = argv[i + 1]
            i += 1
        elif a in ("link", "measure", "netns", "model"):
            stages.append(a)
        elif stages == ["model"] and d is None:
            d = a
        else:
            print("bench/scale.py: unknown argument %s (--help)" % a, file=sys.stderr)
            return 2
        i += 1
    for w in names:
        if w not in WORKLOADS:
            print("bench/scale.py: unknown workload %s (%s)" % (w, " ".join(WORKLOADS)), file=sys.stderr)
            return 2
    stages = stages or ["link", "measure", "netns", "model"]
    d = d or os.path.join(ROOT, "build/bench-scale", time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    os.makedirs(d, exist_ok=True)
    if "link" in stages:
        run_link(d)
    if "measure" in stages:
        if not os.path.exists(os.path.join(ROOT, CT)):
            subprocess.run("nice make -j2 " + CT, shell=True, cwd=ROOT, check=True)
        run_measure(d, names, rounds, first)
    if "netns" in stages:
        run_netns(d, names, rounds, first)
    if "model" in stages:
        model(d, names, ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
