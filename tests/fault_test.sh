#!/usr/bin/env bash
# tests/fault_test.sh - faults from outside a run, with a tiny MLP recipe
# (640 MNIST images, 80 steps, a checkpoint every 2):
#   1. SIGKILL at random points, several per test run, each a few
#      checkpoints after the last (so that most kills land): at a random step or
#      checkpoint phase (CTRAIN_TEST_CRASH), inside the checkpoint's own
#      writes, fsyncs and renames (strace -e inject=...:signal=KILL:when=N),
#      and at a random wall-clock moment. After every kill `latest` names a
#      complete step directory; resumed to the end, the final weights and
#      train state equal the uninterrupted run's bit for bit (cmp). The
#      points come from a seed: CT_FAULT_SEED=N replays a run (the seed is
#      printed first); CT_FAULT_KILLS sets how many kills (default 8).
#   2. A checkpoint directory on a full filesystem (a 1 MiB tmpfs): the save
#      that does not fit fails with the file and "No space left on device",
#      leaves no temporary directory, and the last checkpoint resumes to the
#      same weights as the uninterrupted run. Without permission to mount:
#      a SKIP line (neither pass nor fail).
#   3. Damaged checkpoint files: a byte changed at fixed and seeded places,
#      and truncations, of model.safetensors and train_state.safetensors
#      (E70002 naming the file), of `latest`, and of a GPT checkpoint's
#      tokenizer.vocab (ctrain sample).
#   4. A learning rate that blows up: FP32 stops with E40020 naming the step
#      (the metrics log's last step + 1), as a non-finite loss or as a loss
#      past divergence_factor x the first; FP16's loss scaler skips the step
#      (an overflow line in the metrics log, the scale backs off).
# usage: tests/fault_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
EXPECT_TIMEOUT=120
tmp=$(mktemp -d)
mnt=$tmp/full
cleanup() {
  if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" 2>/dev/null || umount -l "$mnt"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

seed=${CT_FAULT_SEED:-$(($(date +%s%N) / 1000 % 1000000007))}
echo "fault_test: seed $seed (replay with CT_FAULT_SEED=$seed $0 $CT)"
# a 31-bit LCG in the shell itself (not $RANDOM: subshells reseed it); rnd N sets r to 0..N-1
lcg=$seed
rnd() {
  lcg=$(((lcg * 1103515245 + 12345) % 2147483648))
  r=$(((lcg >> 8) % $1))
}
ahead() { rnd $(($1 < 4 ? $1 : 4)); } # r in 0..min(N, 4)-1

# run LOG -- command... : runs with a time limit, output to LOG, sets rc (no "Killed" notice)
run() {
  local log=$1
  shift 2
  ( timeout -k 5 120 "$@" >"$log" 2>&1; exit $? ) 2>/dev/null
  rc=$?
}

if [ ! -f data/mnist/train-images-idx3-ubyte ] || [ ! -f data/mnist/t10k-images-idx3-ubyte ]; then
  echo "  FAIL data/mnist is missing: run scripts/setup.sh"
  echo "fault_test.sh: 0 passed, 1 failed"
  exit 1
fi

# ---- a small MNIST subset (as in resume_test.sh) -------------------------------------------
be32() { printf '%b' "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"; }
subset() { # split count
  local d=$tmp/data
  mkdir -p "$d"
  { printf '\x00\x00\x08\x03'; be32 "$2"; be32 28; be32 28; tail -c +17 "data/mnist/$1-images-idx3-ubyte" | head -c $(($2 * 784)); } >"$d/$1-images-idx3-ubyte"
  { printf '\x00\x00\x08\x01'; be32 "$2"; tail -c +9 "data/mnist/$1-labels-idx1-ubyte" | head -c "$2"; } >"$d/$1-labels-idx1-ubyte"
}
subset train 640
subset t10k 128

# 20 batches an epoch, 4 epochs: 80 steps, checkpoints at 2, 4, ..., 80 (the end)
TOTAL=80
END=step-0000$TOTAL
K=(--hidden 16 --dropout 0.1 --batch-size 32 --epochs 4 --seed 7 --threads 1 --optimizer adamw --lr 0.003
   --set warmup_steps=3 --save-every 2 --keep 2 --quiet)
# Every run saves to $R (the recipe in train_state names save_dir and data_dir): a
# finished run is moved aside. Resumes pass the paths again.
R=$tmp/run
PATHS=(--data-dir "$tmp/data" --save-dir "$R")

t0=$(date +%s%N)
run "$tmp/ref.log" -- "$CT" train "${K[@]}" "${PATHS[@]}"
ref_ms=$((($(date +%s%N) - t0) / 1000000))
mv "$R" "$tmp/ref"
if [ "$rc" -eq 0 ] && [ -f "$tmp/ref/$END/model.safetensors" ]; then
  ok "reference run: $TOTAL steps in $ref_ms ms"
else
  bad "reference run (rc $rc)" "$(cat "$tmp/ref.log")"
fi

# ---- 1. SIGKILL at random points, then resume ----------------------------------------------

# latest_ok NAME: `latest` (if any) names a step directory holding both files; sets cur to its step
latest_ok() {
  cur=0
  [ -e "$R/latest" ] || return 0
  local name
  name=$(cat "$R/latest" 2>/dev/null)
  if [[ "$name" =~ ^step-0*([0-9]+)$ ]] && [ -f "$R/$name/model.safetensors" ] && [ -f "$R/$name/train_state.safetensors" ]; then
    cur=${BASH_REMATCH[1]}
  else
    bad "$1: latest names '$name', not a complete step directory " "$(ls -la "$R" "$R/$name" 2>&1)"
    return 1
  fi
}

have_strace=0
strace -f -qq -o /dev/null true >/dev/null 2>&1 && have_strace=1
[ $have_strace -eq 1 ] || echo "  note: strace cannot trace here: kills inside writes use the CTRAIN_TEST_CRASH hooks only"
kills=${CT_FAULT_KILLS:-8}
kinds=(written write wall hook fsync write rename wall)
rnd ${#kinds[@]}
off=$r
killed=0 finished=0 partial=0 described=()
for ((i = 0; i < kills && !finished; i++)); do
  kind=${kinds[$(((i + off) % ${#kinds[@]}))]}
  if [ $have_strace -eq 0 ] && [[ $kind =~ ^(write|fsync|rename)$ ]]; then kind=written; fi
  latest_ok "before kill $((i + 1))" || break
  [ "$cur" -ge $TOTAL ] && break # the last kill came after the end of the run
  if [ -e "$R/latest" ]; then args=(--resume "$R" "${PATHS[@]}"); else args=("${K[@]}" "${PATHS[@]}"); fi
  pre=(env)
  case $kind in
    written | hook)
      if [ "$kind" = written ]; then
        phase=written
        ahead $(((TOTAL - cur) / 2))
        at=$((cur + 2 + 2 * r)) # one of the next 4 saves
      else
        rnd 3
        phase=$(printf '%s' "step renamed latest" | cut -d' ' -f$((r + 1)))
        if [ "$phase" = step ]; then ahead $((TOTAL - cur)); at=$((cur + 1 + r)); else ahead $(((TOTAL - cur) / 2)); at=$((cur + 2 + 2 * r)); fi
      fi
      what="CTRAIN_TEST_CRASH=$phase:$at"
      pre=(env "CTRAIN_TEST_CRASH=$phase:$at")
      ;;
    write | fsync | rename)
      # about 11 writes, 6 fsyncs and 2 renames a checkpoint (--quiet): within the next 3-4
      case $kind in write) rnd 40 ;; fsync) rnd 20 ;; rename) rnd 7 ;; esac
      n=$((r + 1))
      what="strace: SIGKILL at $kind #$n"
      # LeakSanitizer cannot run under ptrace: no leak check in a traced run (it is killed anyway)
      pre=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" strace -f -qq -o /dev/null -e trace="$kind"
           -e inject="$kind":signal=KILL:when="$n")
      ;;
    wall)
      rnd $((ref_ms / 4 + 1))
      what="kill -9 after ${r} ms"
      ;;
  esac
  log=$tmp/kill$i.log
  # a step directory an earlier killed run already renamed into place (before `latest` moved) is
  # saved again by the resumed run: a kill before the new one's rename must leave the old one as it was
  pre_at=
  [ "$kind" = written ] && pre_at=$(md5sum "$R/step-$(printf %06d "$at")/train_state.safetensors" 2>/dev/null | cut -d' ' -f1)
  if [ "$kind" = wall ]; then
    ( exec "$CT" train "${args[@]}" >"$log" 2>&1 ) &
    pid=$!
    sleep "$(printf '%d.%03d' $((r / 1000)) $((r % 1000)))"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    rc=$?
  else
    run "$log" -- "${pre[@]}" "$CT" train "${args[@]}"
  fi
  described+=("$what: rc $rc")
  if [ "$rc" -eq 137 ]; then
    killed=$((killed + 1))
  elif [ "$rc" -eq 0 ] && grep -q "^done: $TOTAL steps" "$log"; then
    finished=1 # the kill point came after the end of the run
  else
    bad "kill $((i + 1)) ($what): rc $rc, want 137 (killed) or 0 (finished first)" "$(cat "$log")"
    break
  fi
  # a kill inside a checkpoint's writes leaves at most an invisible .tmp- directory
  if compgen -G "$R/.tmp-*" >/dev/null; then partial=$((partial + 1)); fi
  if [ "$kind" = written ] && [ "$rc" -eq 137 ]; then
    now_at=$(md5sum "$R/step-$(printf %06d "$at")/train_state.safetensors" 2>/dev/null | cut -d' ' -f1)
    if compgen -G "$R/.tmp-*/train_state.safetensors" >/dev/null && [ "$now_at" = "$pre_at" ] &&
      [ "$(cat "$R/latest" 2>/dev/null)" != "step-$(printf %06d "$at")" ]; then
      ok "killed after writing checkpoint $at, before its rename: only a .tmp- directory holds it"
    else
      bad "kill at written:$at: the unrenamed checkpoint is visible or missing" "$(ls -la "$R")"
    fi
  fi
  latest_ok "after kill $((i + 1)) ($what)" || break
done
printf '  %s\n' "${described[@]}"
[ "$killed" -ge $((kills < 6 ? kills : 6)) ] && ok "$killed kills landed ($partial left a partial checkpoint behind)" ||
  bad "only $killed of $kills kills landed"
latest_ok "before the last resume"
if [ -e "$R/latest" ]; then args=(--resume "$R" "${PATHS[@]}"); else args=("${K[@]}" "${PATHS[@]}"); fi
run "$tmp/final.log" -- "$CT" train "${args[@]}"
if [ "$rc" -eq 0 ] && grep -qE "^done: $TOTAL steps|the run had ended" "$tmp/final.log"; then ok "resumed to the end after the kills"; else bad "the last resume (rc $rc)" "$(cat "$tmp/final.log")"; fi
same=1
for f in model.safetensors train_state.safetensors; do
  cmp -s "$tmp/ref/$END/$f" "$R/$END/$f" || { same=0; bad "after the kills $f differs from the uninterrupted run (seed $seed)" "$(cmp "$tmp/ref/$END/$f" "$R/$END/$f" 2>&1)"; }
done
[ $same -eq 1 ] && ok "after the kills: final weights and train state identical to the uninterrupted run (cmp)"
left=$(cd "$R" && ls -A | grep -vE '^(latest|step-[0-9]{6})$' | tr '\n' ' ')
n=$(ls -d "$R"/step-* 2>/dev/null | wc -l)
if cat "$log" "$tmp/final.log" | grep -q "checkpoint: step $TOTAL .*(end of run)"; then
  [ -z "$left" ] && [ "$n" -le 2 ] && ok "no temporary files left, $n step directories (keep 2)" || bad "left in the save dir: '$left', $n step directories" "$(ls -la "$R")"
else # killed after the end's `latest`, before its pruning: a resume of an ended run saves (and prunes) nothing
  echo "  note: the run had ended at the last kill; the save dir keeps $n step directories${left:+ and $left}"
fi
mv "$R" "$tmp/killed"

# ---- 2. a full filesystem -------------------------------------------------------------------
mkdir -p "$mnt"
if mount -t tmpfs -o size=1m,mode=0755 ctrain-fault-test "$mnt" 2>/dev/null; then
  F=$mnt/run # checkpoints of about 160 KB each, all kept: the 7th does not fit
  run "$tmp/full.log" -- "$CT" train "${K[@]}" --keep 0 --data-dir "$tmp/data" --save-dir "$F"
  msg=$(tr '\n' ' ' <"$tmp/full.log")
  if [ "$rc" -eq 1 ] && [[ $msg =~ E70001.*cannot\ write\ \'$F/\.tmp-[A-Za-z0-9]+/(model|train_state)\.safetensors\':\ No\ space\ left\ on\ device ]]; then
    ok "full disk: E70001 names the file and 'No space left on device'"
  else
    bad "full disk (rc $rc)" "$(cat "$tmp/full.log")"
  fi
  last=$(cat "$F/latest" 2>/dev/null)
  left=$(cd "$F" && ls -A | grep -vE '^(latest|step-[0-9]{6})$' | tr '\n' ' ')
  [[ $last =~ ^step-0*([1-9][0-9]*)$ ]] && [ -z "$left" ] && ok "full disk: latest names $last, no temporary files left" ||
    bad "full disk: latest '$last', left '$left'" "$(ls -la "$F")"
  # disk already full when the next save starts: the model file (written first) fails
  cat /dev/zero >"$mnt/filler" 2>/dev/null
  run "$tmp/full2.log" -- "$CT" train --resume "$F" --data-dir "$tmp/data" --save-dir "$F"
  msg=$(tr '\n' ' ' <"$tmp/full2.log")
  left=$(cd "$F" && ls -A | grep -vE '^(latest|step-[0-9]{6})$' | tr '\n' ' ')
  if [ "$rc" -eq 1 ] && [[ $msg =~ E70001.*\'$F/\.tmp-[A-Za-z0-9]+(/model\.safetensors)?\'.*No\ space\ left\ on\ device ]] &&
    [ -z "$left" ] && [ "$(cat "$F/latest")" = "$last" ]; then
    ok "full disk from the start of a save: a clear E70001, latest still $last, nothing left behind"
  else
    bad "full disk at the start of a save (rc $rc, left '$left')" "$(cat "$tmp/full2.log")"
  fi
  # the last checkpoint is whole: resumed elsewhere, it ends with the uninterrupted run's weights
  run "$tmp/full3.log" -- "$CT" train --resume "$F" --data-dir "$tmp/data" --save-dir "$tmp/after_full"
  if [ "$rc" -eq 0 ] && cmp -s "$tmp/ref/$END/model.safetensors" "$tmp/after_full/$END/model.safetensors"; then
    ok "full disk: $last resumes to the uninterrupted run's final weights"
  else
    bad "full disk: resume from $last (rc $rc)" "$(cat "$tmp/full3.log")"
  fi
  umount "$mnt" || bad "cannot unmount $mnt"
else
  echo "  SKIP full filesystem: cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)"
fi

# ---- 3. damaged checkpoint files ------------------------------------------------------------
S=$tmp/ref/$END
# damaged NAME FILE -- command...: the command exits 1 with E70002 (or E70001 for latest) naming FILE
damaged() {
  local name=$1 file=$2
  shift 3
  local out rc2
  out=$(timeout -k 5 120 "$@" 2>&1)
  rc2=$?
  if [ "$rc2" -eq 1 ] && printf '%s' "$out" | tr '\n' ' ' | grep -qE "E7000[12] [A-Z_]+: .*'$file'" &&
    ! printf '%s' "$out" | grep -q Sanitizer; then
    ok "$name"
  else
    bad "$name (rc $rc2, want 1 and E70002 naming '$file')" "$out"
  fi
}
flip() { # FILE OFFSET: changes the byte at OFFSET to another value
  local b
  b=$(od -An -tu1 -j"$2" -N1 "$1" | tr -d ' ')
  rnd 255
  printf "\\x$(printf %02x $((b ^ (r + 1))))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
C=$tmp/damaged
for f in model.safetensors train_state.safetensors; do
  size=$(stat -c %s "$S/$f")
  hl=$(od -An -tu4 -N4 "$S/$f" | tr -d ' ') # the header length (little-endian u64; < 4 GiB)
  offs="0 7 8 $((8 + hl / 2)) $((8 + hl)) $((size - 1))"
  for _ in 1 2 3; do rnd "$size"; offs="$offs $r"; done
  for o in $offs; do
    rm -rf "$C" && cp -r "$S" "$C" && flip "$C/$f" "$o"
    damaged "$f: byte $o of $size changed" "$C/$f" -- "$CT" train --resume "$C" --data-dir "$tmp/data" --save-dir "$tmp/unused"
  done
  for t in 0 7 8 $((8 + hl - 1)) $((8 + hl)) $((size / 2)) $((size - 1)); do
    rm -rf "$C" && cp -r "$S" "$C" && truncate -s "$t" "$C/$f"
    damaged "$f: cut to $t of $size bytes" "$C/$f" -- "$CT" train --resume "$C" --data-dir "$tmp/data" --save-dir "$tmp/unused"
  done
done
# latest: garbage, empty, or naming a step that is not there
rm -rf "$C" && cp -r "$tmp/ref" "$C"
printf 'step-0000x0\n' >"$C/latest"
damaged "latest: garbage" "$C/latest" -- "$CT" train --resume "$C" --data-dir "$tmp/data" --save-dir "$tmp/unused"
: >"$C/latest"
damaged "latest: empty" "$C/latest" -- "$CT" train --resume "$C" --data-dir "$tmp/data" --save-dir "$tmp/unused"
printf 'step-000039\n' >"$C/latest"
damaged "latest: names a missing step" "$C/latest" -- "$CT" train --resume "$C" --data-dir "$tmp/data" --save-dir "$tmp/unused"
[ -f "$C/$END/model.safetensors" ] && cmp -s "$C/$END/model.safetensors" "$S/model.safetensors" &&
  ok "a failed resume leaves the checkpoint as it was" || bad "a failed resume changed the checkpoint"

# a GPT checkpoint's tokenizer.vocab (read by ctrain sample): the vocabulary is a sorted
# byte list; one byte changed so that it stays sorted, and the last byte cut off.
# The train state records its size and CRC32: both are E70002 naming the file.
G=(--model gpt --set dataset=moby-dick --set n_layer=1 --set d_model=16 --set n_head=2 --set context=16
   --batch-size 4 --max-steps 4 --set eval_every=4 --set eval_batches=1 --threads 1 --quiet)
if [ -f data/text/moby-dick.txt ]; then
  run "$tmp/gpt.log" -- "$CT" train "${G[@]}" --save-dir "$tmp/gpt"
  V=$tmp/gpt/step-000004/tokenizer.vocab
  if [ "$rc" -eq 0 ] && [ -s "$V" ]; then
    ok "tiny GPT checkpoint with tokenizer.vocab"
    mapfile -t bytes < <(od -An -v -tu1 "$V" | tr -s ' ' '\n' | grep -v '^$')
    gap=-1
    for ((j = 1; j < ${#bytes[@]}; j++)); do
      if [ $((bytes[j] - bytes[j - 1])) -ge 2 ]; then gap=$j; break; fi
    done
    rm -rf "$C" && cp -r "$tmp/gpt/step-000004" "$C"
    printf "\\x$(printf %02x $((bytes[gap] - 1)))" | dd of="$C/tokenizer.vocab" bs=1 seek="$gap" conv=notrunc 2>/dev/null
    damaged "vocab byte $gap changed, still sorted" \
      "$C/tokenizer.vocab" -- "$CT" sample --checkpoint "$C" --prompt a --tokens 4
    rm -rf "$C" && cp -r "$tmp/gpt/step-000004" "$C" && truncate -s $((${#bytes[@]} - 1)) "$C/tokenizer.vocab"
    damaged "vocab cut by one byte" \
      "$C/tokenizer.vocab" -- "$CT" sample --checkpoint "$C" --prompt a --tokens 4
  else
    bad "tiny GPT run (rc $rc)" "$(cat "$tmp/gpt.log")"
  fi
else
  bad "data/text/moby-dick.txt is missing: run scripts/setup.sh"
fi

# ---- 4. a learning rate that blows up ---------------------------------------------------------
H=(--data-dir "$tmp/data" --hidden 16 --batch-size 32 --epochs 2 --seed 7 --threads 1 --schedule constant --set log_every=1)
run "$tmp/lr32.log" -- "$CT" train "${H[@]}" --optimizer adamw --lr 1000 --metrics "$tmp/lr32.jsonl"
last=$(grep -o '"type":"step","step":[0-9]*' "$tmp/lr32.jsonl" 2>/dev/null | tail -n 1 | grep -o '[0-9]*$')
if [ "$rc" -eq 1 ] && [ -n "$last" ] && [ "$last" -lt 40 ] && grep -qE "E40020 .*the loss (became -?(nan|inf)|[0-9.e+]+ at step [0-9]+ .*training diverged)" "$tmp/lr32.log"; then
  ok "fp32, lr 1000: stops with E40020 after $last completed steps"
  want=$((last + 1))
  grep -qE "E40020 .* at step $want " "$tmp/lr32.log" && ok "fp32, lr 1000: the error names step $want" ||
    bad "fp32, lr 1000: $last steps completed, so the error should name step $want" "$(grep E40020 "$tmp/lr32.log")"
else
  bad "fp32, lr 1000 (rc $rc, last logged step '$last')" "$(tail -n 5 "$tmp/lr32.log")"
fi
run "$tmp/lr16.log" -- "$CT" train "${H[@]}" --optimizer sgd --lr 1000 --precision fp16 --metrics "$tmp/lr16.jsonl"
ov=$(grep -m1 '"type":"amp","step":[0-9]*,"event":"overflow"' "$tmp/lr16.jsonl" 2>/dev/null)
s=$(printf '%s' "$ov" | grep -o '"step":[0-9]*' | grep -o '[0-9]*')
if [ -n "$s" ] && [ "$rc" -lt 2 ] && printf '%s' "$ov" | grep -q '"first_nonfinite":"[a-z0-9_.]*"'; then
  # the step line of the overflow step shows the backed-off scale: half the previous step's
  sc0=$(grep -o "\"type\":\"step\",\"step\":$((s - 1)),.*\"loss_scale\":[0-9.e+]*" "$tmp/lr16.jsonl" | grep -o '"loss_scale":[0-9.e+]*' | cut -d: -f2)
  sc1=$(grep -o "\"type\":\"step\",\"step\":$s,.*\"loss_scale\":[0-9.e+]*" "$tmp/lr16.jsonl" | grep -o '"loss_scale":[0-9.e+]*' | cut -d: -f2)
  if [ -n "$sc0" ] && [ -n "$sc1" ] && awk -v a="$sc0" -v b="$sc1" 'BEGIN { exit !(b * 2 == a) }'; then
    ok "fp16, lr 1000: the scaler skips step $s (overflow in the metrics log, scale $sc0 -> $sc1)"
  else
    bad "fp16, lr 1000: overflow at step $s but the scale went '$sc0' -> '$sc1'" "$(grep -E "\"step\":($((s - 1))|$s)," "$tmp/lr16.jsonl")"
  fi
else
  bad "fp16, lr 1000: no overflow event in the metrics log (rc $rc)" "$(tail -n 5 "$tmp/lr16.log"; head -n 5 "$tmp/lr16.jsonl" 2>&1)"
fi

if grep -l "Sanitizer" "$tmp"/*.log >/dev/null 2>&1; then
  bad "a sanitizer report in the run logs" "$(grep -h -A5 "Sanitizer" "$tmp"/*.log | head -20)"
else
  ok "no sanitizer report in any run log"
fi
echo "fault_test: seed $seed"
summary fault_test.sh
