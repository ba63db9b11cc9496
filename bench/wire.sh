#!/usr/bin/env bash
# wire.sh: emulated wires for bench_allreduce --wire (root). N "nodes", each a network
# namespace sk-n0..sk-n(N-1) with address 10.177.24.(1+i)/24, hang off one bridge in this
# namespace (sk-br, 10.177.24.254) through a veth pair each; both ends of every pair are
# shaped with tc tbf to RATE, so each node sends and receives at most RATE at once, as a
# node with a full-duplex link to a switch does.
#   bench/wire.sh up RATE [N]   e.g. up 10gbit (N: 2 to 8 nodes, default 2)
#   bench/wire.sh down
#   bench/wire.sh check         can this kernel shape rate, and add delay?
# `up` prints the --wire argument for bench_allreduce, e.g.
#   bench_allreduce --wire sk-n0=10.177.24.1,sk-n1=10.177.24.2
# Delay needs sch_netem; where the kernel lacks it (CONFIG_NET_SCH_NETEM unset and no
# modules, as on the machine of saker-comm(3)), `up` says so and shapes rate only, and
# the benchmark's model adds the link latency instead.
set -euo pipefail
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "wire.sh: $*" >&2; exit 1; }
cmd=${1:-}
bridge=sk-br

# Whether a qdisc kind can be added here: tried on a throwaway veth pair.
can_qdisc() {
  ip link add sk-probe-a type veth peer name sk-probe-b 2>/dev/null || return 1
  local ok=0
  # shellcheck disable=SC2086
  tc qdisc add dev sk-probe-a root $1 2>/dev/null && ok=1
  ip link del sk-probe-a 2>/dev/null || true
  ((ok))
}

# Shapes dev (in namespace ns, "" = here) to rate; with netem, +10 us each way first.
shape() {
  local ns=$1 dev=$2 rate=$3 delay=$4
  local -a in_ns=()
  [[ -n $ns ]] && in_ns=(-n "$ns")
  # burst: at least what the rate sends between two timer ticks (4 ms at HZ=250), else
  # tbf cannot reach its rate; latency: how long a packet may wait in the queue.
  if [[ -n $delay ]]; then
    tc "${in_ns[@]}" qdisc add dev "$dev" root handle 1: netem delay 10us
    tc "${in_ns[@]}" qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst 8mb latency 50ms
  else
    tc "${in_ns[@]}" qdisc add dev "$dev" root tbf rate "$rate" burst 8mb latency 50ms
  fi
}

down() {
  local i
  for i in $(seq 0 7); do
    ip link del "sk-h$i" 2>/dev/null || true
    ip netns del "sk-n$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}

case $cmd in
  -h | --help | "") usage; [[ -n $cmd ]]; exit $? ;;
  check)
    (($(id -u) == 0)) || die "needs root (it adds a veth pair and qdiscs)"
    can_qdisc "tbf rate 10gbit burst 8mb latency 50ms" && echo "rate: tbf works" || echo "rate: tbf is missing (no CONFIG_NET_SCH_TBF)"
    can_qdisc "netem delay 20us" && echo "delay: netem works" || echo "delay: netem is missing (CONFIG_NET_SCH_NETEM unset or not loadable): rate only"
    ;;
  up)
    rate=${2:-}
    n=${3:-2}
    [[ $rate =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]] || die "RATE must be a tc rate such as 10gbit or 25gbit, not '${rate}' (usage: wire.sh up RATE [N])"
    [[ $n =~ ^[2-8]$ ]] || die "N must be 2 to 8 nodes, not '$n' (usage: wire.sh up RATE [N])"
    (($(id -u) == 0)) || die "needs root (it adds network namespaces, veth pairs, a bridge and qdiscs)"
    ip link show "$bridge" >/dev/null 2>&1 && die "$bridge exists already: run 'wire.sh down' first"
    delay=""
    can_qdisc "netem delay 20us" && delay=yes
    trap 'down' ERR
    ip link add "$bridge" type bridge
    ip addr add 10.177.24.254/24 dev "$bridge"
    ip link set "$bridge" up
    arg=""
    for ((i = 0; i < n; i++)); do
      ns=sk-n$i host=sk-h$i node=sk-v$i addr=10.177.24.$((1 + i))
      ip netns add "$ns"
      ip link add "$host" type veth peer name "$node"
      ip link set "$node" netns "$ns"
      ip link set "$host" master "$bridge"
      ip link set "$host" up
      ip -n "$ns" addr add "$addr/24" dev "$node"
      ip -n "$ns" link set "$node" up
      ip -n "$ns" link set lo up
      shape "" "$host" "$rate" "$delay"   # towards the node: what it receives
      shape "$ns" "$node" "$rate" "$delay" # from the node: what it sends
      arg+="${arg:+,}$ns=$addr"
    done
    echo "wire.sh: $n nodes (netns sk-n0..sk-n$((n - 1)), 10.177.24.1..$n) on bridge $bridge, each sending and receiving at $rate${delay:+, +20 us round trip}"
    [[ -n $delay ]] || echo "wire.sh: no sch_netem in this kernel: rate shaped, no delay added (the model adds it)"
    echo "wire.sh: bench_allreduce --wire $arg"
    ;;
  down) down ;;
  *) die "unknown command '$cmd' (up RATE [N] | down | check)" ;;
esac
