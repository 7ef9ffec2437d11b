#!/usr/bin/env bash
# Simulated hosts on one machine, for testing runs across several nodes
# without a cluster: each host is a network namespace (zt-h0, zt-h1, ...)
# with its own address on a private bridge, and every process Open MPI
# starts there sees its own hostname, so a rank "on zt-h1" reaches the
# others over TCP as it would on a real node. Needs root (CAP_NET_ADMIN and
# CAP_SYS_ADMIN: network and UTS namespaces), iproute2 and Open MPI 4.
#
# usage: scripts/simhosts.sh COMMAND
#   check             exit 0 if this machine can run simulated hosts, else
#                     print why and exit 77 (the test suites' skip status)
#   up N              create N hosts zt-h0..zt-h{N-1} (removing old ones first)
#   down              remove every host, link and the bridge, killing what
#                     still runs in the hosts; safe when half created or gone
#   hosts             the hosts that are up, one a line
#   hostfile [SLOTS]  a hostfile for them ("zt-h0 slots=2"; SLOTS default 2)
#   agent HOST CMD... run CMD in HOST's namespace, as ssh would: Open MPI's
#                     rsh launcher calls it
#   mpirun ARGS...    mpirun across the hosts that are up, SLOTS ranks each
#                     (env ZT_SIMHOSTS_SLOTS, default 2), with the settings below,
#                     through scripts/launch.sh (which ends mpirun once the job
#                     is over, even with a host's link down)
#   link-down HOST    pull HOST's cable: its packets are dropped, no error
#   link-up HOST      plug it back in
#
# The network: bridge zt-br0 in the root namespace holds 10.213.0.254/24 (so
# that mpirun, which stays in the root namespace, reaches the daemons);
# host i is 10.213.0.(i+1) on its eth0, a veth whose other end zt-hI-r is a
# port of the bridge; loopback is up in each.
#
# `simhosts.sh mpirun -np 4 CMD` runs exactly:
#   scripts/launch.sh --host zt-h0:2,zt-h1:2 \
#     --mca plm_rsh_agent "scripts/simhosts.sh agent" --mca plm_rsh_no_tree_spawn 1 \
#     --mca pml ob1 --mca btl self,vader,tcp \
#     --mca btl_tcp_if_include 10.213.0.0/24 --mca oob_tcp_if_include 10.213.0.0/24 \
#     -np 4 CMD
# (the agent path made absolute; Open MPI splits it at spaces, so the
# checkout's path must have none). Why each one:
# - plm_rsh_agent: the launcher calls "AGENT HOST orted ..." for every host;
#   the agent joins the arguments into one shell command as ssh does and runs
#   it under `ip netns exec HOST unshare --uts` after `hostname HOST`, so
#   orted and its ranks see the simulated host's name (gethostname,
#   MPI_Get_processor_name). The host names need no resolving: the launcher
#   hands them to the agent, and the daemons call back to mpirun's address.
#   orted is found on the PATH the agent inherits; no --prefix is needed when
#   Open MPI is installed system-wide.
# - plm_rsh_no_tree_spawn: without it the daemon on zt-h0 would launch the
#   one on zt-h1 through the agent from inside zt-h0's namespaces.
# - pml ob1: Debian's Open MPI prefers UCX where it is built, which ignores
#   the btl settings.
# - btl self,vader,tcp: between hosts only TCP can work (each host is another
#   network namespace; Open MPI places ranks by host name, so it never tries
#   shared memory across them); within one host vader is what a real node
#   uses, so it stays.
# - btl_tcp_if_include, oob_tcp_if_include: the bridge's subnet, the one
#   network every host and mpirun share (the hosts have nothing else but
#   loopback, which would mislead the peers).
#
# ZT_SIMHOSTS_ID=K (1 to 250) gives a separate set: hosts ztK-h0, ..., bridge
# ztK-br, subnet 10.213.K.0/24, so that two suites on one machine (each
# build tree configures its own K) never take down or reach the other's
# hosts. Unset, the names are the ones above.
set -euo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
ID=${ZT_SIMHOSTS_ID:-}
if [ -n "$ID" ]; then
  if ! [[ $ID =~ ^[0-9]+$ ]] || [ "$ID" -lt 1 ] || [ "$ID" -gt 250 ]; then
    echo "simhosts.sh: ZT_SIMHOSTS_ID must be from 1 to 250, got '$ID'" >&2
    exit 2
  fi
  PREFIX=zt$ID-h BRIDGE=zt$ID-br NET=10.213.$ID
else
  PREFIX=zt-h BRIDGE=zt-br0 NET=10.213.0
fi
SUBNET=$NET.0/24

die() {
  echo "simhosts.sh: $*" >&2
  exit 1
}

# Whether capability bit `bit` is in this process's effective set.
have_cap() {
  local eff
  eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status 2>/dev/null) || return 1
  [ -n "$eff" ] && (((0x$eff >> $1) & 1))
}

# Prints why simulated hosts cannot run here and returns 1, or returns 0.
why_not() {
  local cmd
  for cmd in ip unshare hostname mpirun orted; do
    command -v "$cmd" >/dev/null 2>&1 || {
      echo "$cmd is not installed (iproute2, util-linux, Open MPI)"
      return 1
    }
  done
  if [ "$(id -u)" -ne 0 ]; then
    echo "not root (network namespaces need CAP_NET_ADMIN, hostnames CAP_SYS_ADMIN)"
    return 1
  fi
  have_cap 12 || { echo "no CAP_NET_ADMIN (a container without --cap-add NET_ADMIN?)"; return 1; }
  have_cap 21 || { echo "no CAP_SYS_ADMIN (needed for network and UTS namespaces)"; return 1; }
  if [ ! -e /proc/self/ns/net ] || [ ! -e /proc/self/ns/uts ]; then
    echo "the kernel has no network or UTS namespaces"
    return 1
  fi
  # A throwaway namespace proves the rest without touching the root one.
  local probe=zt-probe-$$ err
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "cannot create a network namespace: ${err:-ip netns add failed}"
    return 1
  fi
  err=$( {
    ip -n "$probe" link add zt-probe-br type bridge &&
      ip -n "$probe" link add zt-probe-a type veth peer name zt-probe-b &&
      ip netns exec "$probe" unshare --uts sh -c 'hostname zt-probe'
  } 2>&1) || {
    ip netns del "$probe" 2>/dev/null || true
    echo "namespaces exist but ${err:-bridge, veth or UTS namespace failed}"
    return 1
  }
  ip netns del "$probe"
}

check() {
  local why
  if ! why=$(why_not); then
    echo "simhosts.sh: cannot run simulated hosts: $why" >&2
    exit 77
  fi
}

# The hosts that are up, in order of their number.
hosts() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+\$" |
    sed "s/^$PREFIX//" | sort -n | sed "s/^/$PREFIX/" || true
}

host_arg() {
  [[ ${1:-} =~ ^${PREFIX}[0-9]+$ ]] || die "not a simulated host name: '${1:-}' (expected ${PREFIX}N)"
  ip netns list | awk '{print $1}' | grep -qx -- "$1" || die "$1 is not up (simhosts.sh up N)"
}

down() {
  local ns pids link
  for ns in $(hosts); do
    # orted and ranks left behind (a test killed mid-run) keep a namespace alive
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      # shellcheck disable=SC2086 # one pid a word
      kill -TERM $pids 2>/dev/null || true
      sleep 0.5
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      # shellcheck disable=SC2086
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  done
  # links whose namespace was never made or whose peer is still here
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -E "^${PREFIX}[0-9]+-[rn]\$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link del "$BRIDGE"
  fi
}

up() {
  local n=${1:-}
  if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 200 ]; then
    die "up N: N from 1 to 200, got '$n'"
  fi
  check
  down
  trap 'echo "simhosts.sh: up failed, removing what was made" >&2; down' ERR
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$PREFIX$i
    ip netns add "$ns"
    ip link add "$ns-r" type veth peer name "$ns-n"
    ip link set "$ns-n" netns "$ns"
    ip -n "$ns" link set "$ns-n" name eth0
    ip -n "$ns" addr add "$NET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip link set "$ns-r" master "$BRIDGE" up
  done
  trap - ERR
}

hostfile() {
  local slots=${1:-2} h
  for h in $(hosts); do
    echo "$h slots=$slots"
  done
}

agent() {
  local host=${1:-}
  host_arg "$host"
  shift
  [ $# -gt 0 ] || die "agent HOST CMD...: no command"
  # As ssh does: the words are joined into one command for the host's shell.
  # shellcheck disable=SC2016 # expanded by that shell
  exec ip netns exec "$host" unshare --uts -- sh -c 'hostname "$0" && eval "$*"' "$host" "$@"
}

run_mpirun() {
  local slots=${ZT_SIMHOSTS_SLOTS:-2} list h
  list=$(hosts | sed "s/\$/:$slots/" | paste -sd, -)
  [ -n "$list" ] || die "no simulated hosts are up (simhosts.sh up N)"
  exec "$(dirname "$SELF")/launch.sh" --host "$list" \
    --mca plm_rsh_agent "$SELF agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl self,vader,tcp \
    --mca btl_tcp_if_include "$SUBNET" --mca oob_tcp_if_include "$SUBNET" "$@"
}

link_set() {
  host_arg "${2:-}"
  ip link set "$2-r" "$1"
}

case ${1:-} in
  check) check ;;
  up) up "${2:-}" ;;
  down) down ;;
  hosts) hosts ;;
  hostfile) hostfile "${2:-2}" ;;
  agent) shift; agent "$@" ;;
  mpirun) shift; run_mpirun "$@" ;;
  link-down) link_set down "${2:-}" ;;
  link-up) link_set up "${2:-}" ;;
  *) sed -n '/^# usage:/,/^#$/p' "$SELF" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
