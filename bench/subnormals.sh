#!/usr/bin/env bash
# bench/subnormals.sh - the demo (recipes/mnist_mlp.json) trained to the end with subnormals flushed (the default,
# flush_subnormals: true) and kept (false, PyTorch's default), alternating, ROUNDS times each: per-epoch seconds,
# the slowest epoch over the first, the whole run's seconds, the final test accuracy, and the median ratio.
#   bench/subnormals.sh [--rounds N] [--recipe FILE] [--threads N] [-- extra ctrain train arguments]
# ROUNDS=3 RECIPE=recipes/mnist_mlp.json THREADS=0 (all cores) CT=build/ctrain.
# Logs of every run: build/bench-subnormals/<date>/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} RECIPE=${RECIPE:-recipes/mnist_mlp.json} THREADS=${THREADS:-0} CT=${CT:-build/ctrain}
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
  --rounds) ROUNDS=$2; shift 2 ;;
  --recipe) RECIPE=$2; shift 2 ;;
  --threads) THREADS=$2; shift 2 ;;
  --) shift; EXTRA=("$@"); break ;;
  -h | --help) sed -n '2,/^# Logs/p' "$0"; exit 0 ;;
  *) echo "bench/subnormals.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
[ -x "$CT" ] || make -j"$(nproc)" BUILD=build build/ctrain >/dev/null
LOG=build/bench-subnormals/$(date +%Y%m%d-%H%M%S)
mkdir -p "$LOG"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $("$CT" info | grep -m1 'kernel ISA')"
echo "recipe $RECIPE, threads $THREADS, $ROUNDS round(s), flushed and kept alternating; logs in $LOG"
for r in $(seq 1 "$ROUNDS"); do
  for f in true false; do
    "$CT" train --recipe "$RECIPE" --threads "$THREADS" --set flush_subnormals=$f --save-dir "$LOG/run-$r-$f" \
      --save-every 0 "${EXTRA[@]}" >"$LOG/$r-$f.log" 2>&1 || { echo "run $r flush=$f failed: $LOG/$r-$f.log"; tail -3 "$LOG/$r-$f.log"; exit 1; }
  done
done
/usr/bin/python3 - "$LOG" "$ROUNDS" <<'PY'
import re, statistics, sys
log, rounds = sys.argv[1], int(sys.argv[2])
def parse(path):
    ep, total, acc = [], None, None
    for line in open(path):
        m = re.match(r"epoch \d+/\d+ .*?test acc ([0-9.]+)%\s+([0-9.]+) s", line)
        if m: ep.append(float(m.group(2))); acc = m.group(1)
        m = re.match(r"done: \d+ steps in ([0-9.]+) s", line)
        if m: total = float(m.group(1))
    return ep, total, acc
rows = {f: [parse(f"{log}/{r}-{f}.log") for r in range(1, rounds + 1)] for f in ("true", "false")}
for f, name in (("true", "flushed (default)"), ("false", "kept (flush_subnormals: false)")):
    print(f"\n{name}")
    for r, (ep, total, acc) in enumerate(rows[f], 1):
        print(f"  round {r}: epochs " + " ".join(f"{e:.1f}" for e in ep) +
              f"  slowest/first {max(ep) / ep[0]:.2f}  total {total:.1f} s  test acc {acc}%")
med = {f: statistics.median(t for _, t, _ in rows[f]) for f in rows}
sl = {f: statistics.median(max(e) / e[0] for e, _, _ in rows[f]) for f in rows}
print(f"\nmedian total: flushed {med['true']:.1f} s, kept {med['false']:.1f} s: {med['false'] / med['true']:.2f}x faster flushed")
print(f"median slowest epoch / first: flushed {sl['true']:.2f}, kept {sl['false']:.2f}")
accs = {f: {a for _, _, a in rows[f]} for f in rows}
print("final test accuracy: flushed " + "/".join(sorted(accs['true'])) + "%, kept " + "/".join(sorted(accs['false'])) + "%")
PY
