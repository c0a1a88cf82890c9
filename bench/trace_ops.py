#!/usr/bin/python3
"""bench/trace_ops.py - ms per step by (op, phase, kernel) from profiler traces,
side by side, one column per trace: where a step's time goes, and what a change did.

  BENCH_MFU_TRACE=/tmp/a.json build-bench/bench/bench_step --workload gptchar --precision bf16 --quiet
  (change, rebuild)
  BENCH_MFU_TRACE=/tmp/b.json build-bench/bench/bench_step --workload gptchar --precision bf16 --quiet
  bench/trace_ops.py /tmp/a.json /tmp/b.json

Each trace's op events are summed per (op, phase, kernel) and divided by the
number of recorded steps (the `step` argument of the op events); the line before
the total sums every op but the GEMMs and the attention (issue 32's element-wise measure). Single runs
on a shared machine are noisy: compare ops within one run, or repeat."""
import collections
import json
import sys


def per_step(path):
    with open(path) as f:
        d = json.load(f)
    events = d["traceEvents"] if isinstance(d, dict) else d
    steps, total = set(), collections.defaultdict(float)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "op":
            continue
        a = e.get("args", {})
        steps.add(a.get("step"))
        total[(a.get("op", e.get("name", "?")), a.get("phase", ""), a.get("kernel", ""))] += e.get("dur", 0) / 1000
    n = max(1, len(steps))
    return {k: v / n for k, v in total.items()}


def main(paths):
    if not paths:
        sys.exit(__doc__)
    tables = [per_step(p) for p in paths]
    keys = sorted(set().union(*tables), key=lambda k: -max(t.get(k, 0) for t in tables))
    print("%-44s" % "op / phase / kernel (ms per step)" + "".join("%14s" % p.split("/")[-1][:13] for p in paths))
    for k in keys:
        print("%-44s" % " / ".join(k) + "".join("%14.2f" % t.get(k, 0) for t in tables))
    # issue 32's element-wise measure: every op but the GEMMs (matmul*, linear*, gemm*) and the attention
    gemm = ("matmul", "linear", "gemm", "attention")
    print("%-44s" % "non-GEMM, non-attention" +
          "".join("%14.2f" % sum(v for k, v in t.items() if not k[0].startswith(gemm)) for t in tables))
    print("%-44s" % "all ops" + "".join("%14.2f" % sum(t.values()) for t in tables))


if __name__ == "__main__":
    main(sys.argv[1:])
