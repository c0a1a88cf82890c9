#!/usr/bin/env bash
# tests/slurm_test.sh - ctrain under Slurm (docs/distributed.md, "Slurm"): starts a single-node Slurm of its own
# (munged, slurmctld, slurmd from Debian's munge / slurmctld / slurmd, in the foreground, with a config, key,
# socket, state and spool in a temp dir, on two free ports; no systemd, no cgroups), then checks on a 640-image
# MNIST subset with a small MLP, 20 steps of global batch 32:
#   - `srun --mpi=pmix -n 2` trains as 2 ranks and ends with mpirun -np 2's checkpoint (weights and train state)
#     bit for bit, with the same per-step loss / accuracy / lr in the metrics log, rank 0 alone printing;
#   - `sbatch` of the docs' job script (srun --mpi=pmix inside) completes (scontrol show job: COMPLETED, exit
#     0:0) with the same checkpoint bit for bit; so does a job script with `mpirun` without -np;
#   - `srun --mpi=none` (MpiDefault here) and `--mpi=pmi2` fail (non-zero, Open MPI's "not built with SLURM's
#     PMI support") instead of running 2 separate one-process trainings (ct_comm_launched sees SLURM_STEP_ID);
#   - a rank killed under `srun --kill-on-bad-exit=1` ends the step within 30 s, non-zero.
# Every srun / sbatch / scontrol and every wait runs under `timeout -k`; the daemons run under `timeout` too
# (600 s) and are stopped by an EXIT trap (INT and TERM exit through it), which waits for the steps' slurmstepd,
# then ends (by pid) any process of this test still there: those with this test's tag in their environment
# (daemons, srun, tasks) or a file of its temp dir open (slurmstepd); the last check is that none is left.
# Skipped (a SKIP line, counted neither pass nor fail) without mpirun, without Slurm / munge (scripts/setup.sh
# installs them), when not root (slurmd launches tasks as the submitting user), or without srun's pmix plugin.
# usage: tests/slurm_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mpi_lib.sh"
mpi_preflight slurm_test.sh "Slurm tests"
CT=$(cd "$(dirname "$CT")" && pwd)/$(basename "$CT") # the sbatch jobs run in the temp dir

skip_all() {
  echo "  SKIP $1"
  echo "slurm_test.sh: 0 passed, 0 failed"
  exit 0
}
for c in munged slurmctld slurmd srun sbatch scontrol squeue scancel; do
  command -v $c >/dev/null 2>&1 ||
    skip_all "$c is not installed (scripts/setup.sh installs munge slurmctld slurmd slurm-client): no Slurm tests"
done
[ "$(id -u)" = 0 ] || skip_all "not root: slurmd must run as root to start tasks (SlurmUser=root here): no Slurm tests"

tmp=$(mktemp -d)
tag="$tmp" # CT_SLURM_TEST_TAG: every process this test starts (daemons, steps, tasks) carries it
export CT_SLURM_TEST_TAG="$tag"
chmod 755 "$tmp" # munged wants its socket's folders searchable by all
daemons=()

# our_procs: the pids of this test's processes: those whose environment carries its tag (read with bash builtins
# only, so that nothing the scan starts matches) and those with a file in the temp dir open (slurmstepd: it
# overwrites its environment with its title, and keeps the slurmd log open)
our_procs() {
  local p e
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = "$$" ] && continue
    while IFS= read -r -d '' e; do
      [ "$e" = "CT_SLURM_TEST_TAG=$tag" ] && { echo "$p"; break; }
    done 2>/dev/null <"/proc/$p/environ"
  done
  find /proc/[0-9]*/fd -maxdepth 1 -lname "$tmp/*" 2>/dev/null | cut -d/ -f3
}
# steps_left: this test's slurmstepd processes (a step's slurmstepd may outlive the job in squeue by seconds)
steps_left() {
  local p c
  for p in $(our_procs | sort -u); do
    IFS= read -r -d '' c 2>/dev/null <"/proc/$p/cmdline"
    [[ $c == slurmstepd* ]] && echo "$p"
  done
}
# steps_wait SECS: waits until no slurmstepd of this test is left; fails after SECS
steps_wait() {
  local i
  for i in $(seq $(($1 * 5))); do
    [ -z "$(steps_left)" ] && return 0
    sleep 0.2
  done
  return 1
}
# slurm_stop: cancel the jobs, let their steps end, stop the daemons, then end (TERM, then KILL) whatever of this
# test is still there
slurm_stop() {
  local i left
  if [ ${#daemons[@]} -gt 0 ] && [ -n "${SLURM_CONF:-}" ]; then
    timeout -k 2 10 scancel --quiet --partition=ct >/dev/null 2>&1
    for i in $(seq 50); do
      [ -z "$(timeout -k 2 5 squeue -h 2>/dev/null)" ] && break
      sleep 0.2
    done
    steps_wait 20
  fi
  [ ${#daemons[@]} -gt 0 ] && kill "${daemons[@]}" 2>/dev/null
  for i in $(seq 50); do
    left=$(our_procs)
    [ -z "$left" ] && break
    [ "$i" = 25 ] && kill $left 2>/dev/null
    sleep 0.2
  done
  left=$(our_procs)
  [ -n "$left" ] && kill -9 $left 2>/dev/null
  daemons=()
}
trap 'slurm_stop; rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port [OTHER]: a TCP port nobody uses (/proc/net/tcp{,6}) and not OTHER, from 20000-31999 (below Linux's
# ephemeral range, so that no client's port takes it before the daemon binds it)
free_port() {
  local p hex
  while :; do
    p=$((20000 + RANDOM % 12000))
    hex=$(printf ':%04X ' $p)
    grep -q "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null || [ "$p" = "${1:-}" ] || { echo $p; return; }
  done
}

# ---- munge: its own key and socket ---------------------------------------------------------------------------
mkdir -m 755 "$tmp/munge"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
chmod 600 "$tmp/munge/munge.key"
sock="$tmp/munge/munge.sock"
timeout -k 5 600 munged -F --key-file="$tmp/munge/munge.key" --socket="$sock" --pid-file="$tmp/munge/munged.pid" \
  --log-file="$tmp/munge/munged.log" --seed-file="$tmp/munge/munged.seed" >/dev/null 2>&1 &
daemons+=($!)
disown # no "Killed" line from bash if the stop has to kill it
if timeout -k 2 15 bash -c "until munge -n -S '$sock' 2>/dev/null | unmunge -S '$sock' >/dev/null 2>&1; do sleep 0.1; done"; then
  ok "munged runs with its own key and socket ($sock)"
else
  bad "munged did not start" "$(cat "$tmp/munge/munged.log" 2>&1)"
  summary slurm_test.sh
  exit 1
fi

# ---- slurmctld and slurmd: one node, the real CPUs and memory (slurmd -C) -------------------------------------
node=$(slurmd -C | head -1)       # NodeName=vm CPUs=2 Boards=1 ... RealMemory=24105
name=$(printf '%s' "$node" | sed -E 's/^NodeName=([^ ]+).*/\1/')
cpus=$(printf '%s' "$node" | sed -nE 's/.* CPUs=([0-9]+).*/\1/p')
# 2 tasks need 2 CPUs: on a 1-CPU machine the node claims 2 (config_overrides: slurmd believes the config)
[ "${cpus:-0}" -ge 2 ] || node="NodeName=$name CPUs=2 RealMemory=$(printf '%s' "$node" | sed -nE 's/.*RealMemory=([0-9]+).*/\1/p')"
p_ctld=$(free_port)
p_d=$(free_port "$p_ctld")
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/tmpfs"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=ctrain-test
SlurmctldHost=$name(127.0.0.1)
SlurmctldPort=$p_ctld
SlurmdPort=$p_d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
TmpFS=$tmp/tmpfs
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MinJobAge=600
$node State=UNKNOWN
PartitionName=ct Nodes=ALL Default=YES MaxTime=10 State=UP
EOF
export SLURM_CONF="$tmp/slurm.conf"
timeout -k 5 600 slurmctld -D -f "$SLURM_CONF" >"$tmp/slurmctld.out" 2>&1 &
daemons+=($!)
disown
timeout -k 5 600 slurmd -D -f "$SLURM_CONF" -N "$name" >"$tmp/slurmd.out" 2>&1 &
daemons+=($!)
disown
if timeout -k 2 30 bash -c 'until scontrol show node 2>/dev/null | grep -q "State=IDLE"; do sleep 0.2; done'; then
  ok "slurmctld and slurmd run: node $name idle in partition ct ($node)"
else
  bad "Slurm did not come up (node not idle in 30 s)" "$(cat "$tmp"/slurm*.out "$tmp"/slurm*.log 2>&1 | tail -20)"
  summary slurm_test.sh
  exit 1
fi
if ! timeout -k 2 10 srun --mpi=list 2>&1 | grep -qw pmix; then
  echo "  SKIP srun has no pmix plugin (slurm-wlm-basic-plugins ships mpi_pmix.so): no srun / sbatch runs"
  summary slurm_test.sh
  exit $?
fi

# ---- the reference: mpirun -np 2 ------------------------------------------------------------------------------
mnist_subset "$tmp/data" train 640
mnist_subset "$tmp/data" t10k 200
A=(--data-dir "$tmp/data" --hidden 32 --batch-size 32 --max-steps 20 --seed 5 --threads 1 --optimizer adamw
   --lr 0.003 --set log_every=5)
CK="$tmp/ck" # every run writes here (the recipe in the train state names the save dir), then is moved away
ckpt=step-000020
# same_ckpt NAME DIR: DIR's checkpoint is mpirun's, bit for bit
same_ckpt() {
  if [ -f "$2/$ckpt/model.safetensors" ] &&
     cmp -s "$tmp/mpirun/$ckpt/model.safetensors" "$2/$ckpt/model.safetensors" &&
     cmp -s "$tmp/mpirun/$ckpt/train_state.safetensors" "$2/$ckpt/train_state.safetensors"; then
    ok "$1 ends with mpirun -np 2's checkpoint, bit for bit (weights and train state)"
  else
    bad "$1: the checkpoint is not mpirun's" "$(ls -R "$2" 2>&1 | head -5; cmp "$tmp/mpirun/$ckpt/model.safetensors" \
      "$2/$ckpt/model.safetensors" 2>&1)"
  fi
}
# steps METRICS: the step lines without their timing fields
# the measured fields (throughput, MFU, peak memory, communication share, time) vary between runs
steps() { grep '"type":"step"' "$1" | sed -E 's/,"(samples_per_s|mfu|peak_mib|comm_share|time)":[^,}]*//g'; }

mrun "$tmp/mpirun.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" --save-dir "$CK" --report "$tmp/rep_mpirun"
rc=$?
mv "$CK" "$tmp/mpirun" 2>/dev/null
if [ "$rc" -eq 0 ] && [ -f "$tmp/mpirun/$ckpt/model.safetensors" ] && [ "$(steps "$tmp/rep_mpirun/metrics.jsonl" | wc -l)" -eq 20 ]; then
  ok "reference: mpirun -np 2, 20 steps"
else
  bad "mpirun reference (rc $rc)" "$(cat "$tmp/mpirun.log")"
fi

# ---- srun --mpi=pmix -n 2 -------------------------------------------------------------------------------------
SRUN=(srun --mpi=pmix -n 2 --kill-on-bad-exit=1)
mrun "$tmp/srun.log" 120 -- "${SRUN[@]}" "$CT" train "${A[@]}" --save-dir "$CK" --report "$tmp/rep_srun"
rc=$?
mv "$CK" "$tmp/srun" 2>/dev/null
if [ "$rc" -eq 0 ] && grep -q "data parallel: 2 ranks x 16 rows (global batch 32)" "$tmp/srun.log" &&
   [ "$(grep -c '^done:' "$tmp/srun.log")" -eq 1 ] && clean "srun" "$tmp/srun.log"; then
  ok "srun --mpi=pmix -n 2: 2 ranks x 16 rows, rank 0 alone prints the summary"
else
  bad "srun --mpi=pmix -n 2 (rc $rc)" "$(cat "$tmp/srun.log")"
fi
same_ckpt "srun --mpi=pmix -n 2" "$tmp/srun"
if [ -s "$tmp/rep_srun/metrics.jsonl" ] && [ "$(steps "$tmp/rep_srun/metrics.jsonl" | wc -l)" -eq 20 ] &&
   [ "$(steps "$tmp/rep_srun/metrics.jsonl")" = "$(steps "$tmp/rep_mpirun/metrics.jsonl")" ]; then
  ok "srun --mpi=pmix -n 2: the metrics log's 20 steps (loss, accuracy, lr) are mpirun's exactly"
else
  bad "srun: the metrics log's steps differ from mpirun's" "$(diff <(steps "$tmp/rep_mpirun/metrics.jsonl") \
    <(steps "$tmp/rep_srun/metrics.jsonl") 2>&1 | head -6)"
fi

# ---- sbatch: the job script of docs/distributed.md, and one with mpirun inside the allocation ----------------
# job_wait ID: polls scontrol show job until the job has ended (at most 120 s); prints its JobState and ExitCode
job_wait() {
  local i info
  for i in $(seq 600); do
    info=$(timeout -k 2 10 scontrol show job "$1" 2>&1)
    if ! printf '%s' "$info" | grep -qE "JobState=(PENDING|CONFIGURING|RUNNING|COMPLETING|SUSPENDED)"; then
      printf '%s' "$info" | grep -oE "(JobState|ExitCode)=[^ ]+" | tr '\n' ' '
      return
    fi
    sleep 0.2
  done
  echo "still running after 120 s"
}
# sbatch_job NAME SCRIPT: submits SCRIPT, waits, checks it completed, its output and its checkpoint
sbatch_job() {
  local name=$1 script=$2 id st out
  id=$(cd "$tmp" && timeout -k 2 20 sbatch --parsable "$script" 2>&1)
  if ! [[ $id =~ ^[0-9]+$ ]]; then
    bad "$name: sbatch failed" "$id"
    return
  fi
  st=$(job_wait "$id")
  mv "$CK" "$tmp/job$id" 2>/dev/null
  out="$tmp/ctrain-$id.out"
  if [[ $st == *"JobState=COMPLETED ExitCode=0:0"* ]] && [ "$(grep -c '^done:' "$out")" -eq 1 ] &&
     grep -q "data parallel: 2 ranks x 16 rows" "$out" && clean "$name" "$out"; then
    ok "$name: job $id completed ($st), 2 ranks, one summary in ctrain-$id.out"
  else
    bad "$name: job $id: $st" "$(cat "$out" 2>&1 | tail -12)"
  fi
  same_ckpt "$name" "$tmp/job$id"
}
cat >"$tmp/train.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=ctrain
#SBATCH --ntasks=2
#SBATCH --time=5
#SBATCH --output=ctrain-%j.out
srun --mpi=pmix --kill-on-bad-exit=1 $CT train ${A[*]} --save-dir $CK
EOF
sbatch_job "sbatch (srun --mpi=pmix inside)" "$tmp/train.sbatch"
sed -i "s|^srun .* $CT train|mpirun --bind-to none $CT train|" "$tmp/train.sbatch"
sbatch_job "sbatch (mpirun without -np inside)" "$tmp/train.sbatch"

# ---- srun without PMIx (Debian's Open MPI has no PMI-1/2 client): an error, not 2 separate trainings -------------------------------------------
for m in none pmi2; do
  mrun "$tmp/$m.log" 60 -- srun --mpi=$m -n 2 --kill-on-bad-exit=1 "$CT" train "${A[@]}" --save-dir "$tmp/$m"
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ! grep -q "^done:" "$tmp/$m.log" && [ ! -e "$tmp/$m/$ckpt" ] &&
     grep -q "not built with SLURM's PMI support" "$tmp/$m.log"; then
    ok "srun --mpi=$m -n 2 fails (exit $rc, Open MPI has no PMI client for it), no rank trains alone"
  else
    bad "srun --mpi=$m -n 2 (rc $rc): want a failure, no training" "$(grep -vE '^ ' "$tmp/$m.log" | head -12)"
  fi
done

# ---- a killed rank: --kill-on-bad-exit=1 ends the step -------------------------------------------------------
# rank 1 kills itself (SIGKILL) after 2 s of a run that would take minutes (100000 epochs of 40 steps)
start=$(date +%s)
mrun "$tmp/kill.log" 60 -- "${SRUN[@]}" bash -c '[ "$SLURM_PROCID" = 1 ] && (sleep 2; kill -9 $$) & exec "$@"' _ \
  "$CT" train "${A[@]}" --max-steps 0 --epochs 100000 --save-dir "$tmp/kill"
rc=$?
el=$(($(date +%s) - start))
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$el" -lt 30 ] && grep -qE "task 1: Killed" "$tmp/kill.log" &&
   ! grep -q "^done:" "$tmp/kill.log"; then
  ok "a killed rank under srun --kill-on-bad-exit=1: the step ends in ${el} s, exit $rc"
else
  bad "killed rank under srun (rc $rc after $el s)" "$(grep -vE '^ ' "$tmp/kill.log" | tail -8)"
fi
# its slurmstepd ends too (Slurm's PMIx plugin finalizes about 10 s after a task's abort)
start=$(date +%s)
if steps_wait 40; then
  ok "the killed step's slurmstepd ends ($(($(date +%s) - start)) s after the step)"
else
  bad "the killed step's slurmstepd is still there after 40 s" "$(tail -5 "$tmp/slurmd.log")"
fi

# ---- nothing left behind ----------------------------------------------------------------------------------------
start=$(date +%s)
slurm_stop
left=$(our_procs)
if [ -z "$left" ]; then
  ok "stopped in $(($(date +%s) - start)) s: no daemon, step or task of this test left"
else
  bad "processes left after stopping Slurm: $left" "$(ps -o pid,cmd -p "$(echo $left | tr ' ' ,)" 2>&1)"
fi
summary slurm_test.sh
