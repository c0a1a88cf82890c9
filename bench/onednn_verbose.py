#!/usr/bin/python3
"""bench/onednn_verbose.py - oneDNN's own per-call times, summed by primitive, direction and shape, for one
or more logs side by side (ctrain and PyTorch call the same library, so this compares their convolutions
kernel for kernel).

    ONEDNN_VERBOSE=1 build/ctrain train --recipe R --set max_steps=6 ... > ct.log 2>&1
    ONEDNN_VERBOSE=1 /usr/bin/python3 bench/e2e_torch.py --recipe R --set max_steps=6 ... > pt.log 2>&1
    bench/onednn_verbose.py ct.log pt.log [--mb mb128] [--impl]

Per row: calls and total ms in each log; --mb keeps only convolutions of that minibatch (the training
batch, leaving out a smaller last evaluation batch); --impl also prints each row's implementations and
layouts (e.g. brgconv:avx512_core vs jit:avx512_core)."""
import collections
import sys


def load(path, mb):
    rows = collections.defaultdict(lambda: [0, 0.0, set()])
    with open(path, errors="replace") as f:
        for line in f:
            if not line.startswith(("onednn_verbose,exec", "dnnl_verbose,exec")):
                continue
            p = line.strip().split(",")
            if len(p) < 10:
                continue
            prim, impl, prop, fmt, shape = p[3], p[4], p[5], p[6], p[-2]
            try:
                ms = float(p[-1])
            except ValueError:
                continue
            if prim == "convolution" and mb and not shape.startswith(mb + "_"):
                continue
            key = (prim, prop, shape if prim == "convolution" else "")
            r = rows[key]
            r[0] += 1
            r[1] += ms
            r[2].add(impl + " " + fmt.replace("blocked:", ""))
    return rows


def main(argv):
    mb, show_impl, paths = None, False, []
    it = iter(argv)
    for a in it:
        if a == "--mb":
            mb = next(it, None)
        elif a == "--impl":
            show_impl = True
        elif a.startswith("-"):
            sys.exit(__doc__)
        else:
            paths.append(a)
    if not paths:
        sys.exit(__doc__)
    logs = [load(p, mb) for p in paths]
    keys = sorted(set().union(*logs), key=lambda k: -sum(l[k][1] for l in logs if k in l))
    print("%-12s %-17s %-62s" % ("primitive", "direction", "shape") +
          "".join(" | %5s %10s" % ("calls", "ms") for _ in logs))
    for k in keys:
        print("%-12s %-17s %-62s" % (k[0][:12], k[1][:17], k[2][:62]) +
              "".join(" | %5d %10.1f" % (l[k][0], l[k][1]) if k in l else " | %5d %10.1f" % (0, 0) for l in logs))
        if show_impl:
            for i, l in enumerate(logs):
                for s in sorted(l[k][2]) if k in l else []:
                    print("      log %d: %s" % (i + 1, s))
    print("%-93s" % "total" + "".join(" | %5d %10.1f" % (sum(r[0] for r in l.values()), sum(r[1] for r in l.values()))
                                      for l in logs))


if __name__ == "__main__":
    main(sys.argv[1:])
