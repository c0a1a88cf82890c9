#!/usr/bin/env bash
# scripts/netns_mpirun.sh - two "hosts" on one machine: runs an mpirun job
# with its ranks split over two network namespaces joined by a veth pair, so
# that they talk over TCP through a (shaped) link as on two hosts.
#
#   scripts/netns_mpirun.sh [-n RANKS_PER_HOST] [--rate 10gbit] [--delay 50us] -- PROGRAM ARGS...
#
# creates namespaces A and B (10.77.X.1 and 10.77.X.2), shapes both ends of
# the link with `tc netem` (default 10gbit and 50us each way, like 10 GbE;
# without netem in the kernel, `tc tbf` limits the rate only),
# then runs, inside A,
#   mpirun -H 10.77.X.1:N,10.77.X.2:N -np 2N --mca plm_rsh_agent AGENT
#          --mca btl self,tcp --mca btl_tcp_if_include 10.77.X.0/24 ... PROGRAM ARGS...
# where AGENT stands in for ssh: it starts Open MPI's daemon for host
# 10.77.X.2 with `ip netns exec B`. Ranks 0..N-1 run in A, N..2N-1 in B.
# The namespaces are removed on exit (trap). Prints "netns: link ..." (the
# shaping, or why there is none: a kernel without the netem qdisc runs the
# link unshaped) on stderr, then the job's output; exits with mpirun's code.
# Exit 77 (and a line starting "SKIP") when this cannot run: not root, no
# `ip netns`, no veth, no mpirun.
#
# From a bench script: CT_NETNS_RATE / CT_NETNS_DELAY set the defaults, and
# any mpirun option goes before the program, e.g.
#   scripts/netns_mpirun.sh -n 1 -- --report-bindings build/ctrain train --recipe r.json
set -u
per=1
rate=${CT_NETNS_RATE:-10gbit}
delay=${CT_NETNS_DELAY:-50us}
while [ $# -gt 0 ]; do
  case "$1" in
    -n) per=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: $0 [-n RANKS_PER_HOST] [--rate 10gbit] [--delay 50us] -- [MPIRUN OPTIONS] PROGRAM ARGS..." >&2
  exit 2
fi
skip() { echo "SKIP netns: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (ip netns, veth, tc)"
command -v ip >/dev/null 2>&1 || skip "iproute2 ('ip') is not installed"
command -v mpirun >/dev/null 2>&1 || skip "mpirun is not installed"

id=$$
sub=$((id % 200 + 20))
A=ctns${id}a B=ctns${id}b VA=ctv${id}a VB=ctv${id}b
IPA=10.77.$sub.1 IPB=10.77.$sub.2
work=$(mktemp -d)
cleanup() {
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; exit 130' INT TERM

ip netns add "$A" 2>"$work/err" && ip netns add "$B" 2>>"$work/err" || skip "ip netns add failed: $(cat "$work/err")"
ip link add "$VA" type veth peer name "$VB" 2>"$work/err" || skip "no veth pair: $(cat "$work/err")"
ip link set "$VA" netns "$A" && ip link set "$VB" netns "$B" &&
  ip -n "$A" addr add "$IPA/24" dev "$VA" && ip -n "$B" addr add "$IPB/24" dev "$VB" &&
  ip -n "$A" link set "$VA" up && ip -n "$B" link set "$VB" up &&
  ip -n "$A" link set lo up && ip -n "$B" link set lo up || skip "could not configure the veth pair"

link="unshaped"
if command -v tc >/dev/null 2>&1; then
  if tc -n "$A" qdisc add dev "$VA" root netem rate "$rate" delay "$delay" 2>"$work/err" &&
     tc -n "$B" qdisc add dev "$VB" root netem rate "$rate" delay "$delay" 2>>"$work/err"; then
    link="$rate, $delay each way (tc netem)"
  elif tc -n "$A" qdisc add dev "$VA" root tbf rate "$rate" burst 256kb latency 10ms 2>>"$work/err" &&
       tc -n "$B" qdisc add dev "$VB" root tbf rate "$rate" burst 256kb latency 10ms 2>>"$work/err"; then
    # no netem in this kernel (seen here): the token bucket still limits the rate; no added delay
    link="$rate each way (tc tbf; no delay: tc netem is not available here)"
  else
    link="unshaped: tc netem and tbf are not available here ($(head -1 "$work/err"))"
  fi
else
  link="unshaped: tc is not installed"
fi
echo "netns: link $IPA ($A) <-> $IPB ($B): $link; $per rank(s) per namespace" >&2

# the ssh stand-in: "AGENT [ssh options] HOST COMMAND..." runs COMMAND in HOST's namespace
cat >"$work/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in
  $IPA) ns=$A ;;
  $IPB) ns=$B ;;
  *) echo "netns agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
chmod +x "$work/agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ip netns exec "$A" mpirun --bind-to none -H "$IPA:$per,$IPB:$per" -np $((2 * per)) \
  --mca plm_rsh_agent "$work/agent" --mca btl self,tcp \
  --mca btl_tcp_if_include "10.77.$sub.0/24" --mca oob_tcp_if_include "10.77.$sub.0/24" "$@" &
pid=$! # in the background, so a TERM (timeout) reaches the trap at once and the namespaces go
wait "$pid"
