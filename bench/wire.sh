#!/usr/bin/env bash
# wire.sh: an emulated wire for bench_allreduce --wire (root). A veth pair joins this
# network namespace (sk-wa, 10.177.24.1/24) and namespace NS (sk-wb, 10.177.24.2/24),
# and both ends are shaped with tc tbf to RATE, so that each direction of the pair runs
# at most at RATE, as a full-duplex link between two nodes does.
#   bench/wire.sh up RATE [NS]   e.g. up 10gbit; NS defaults to coll-b
#   bench/wire.sh down [NS]
#   bench/wire.sh check          can this kernel shape rate, and add delay?
# Then: bench_allreduce --wire 10.177.24.1,coll-b=10.177.24.2
# Delay needs sch_netem; where the kernel lacks it (CONFIG_NET_SCH_NETEM unset and no
# modules, as on the machine of saker-comm(3)), `up` says so and shapes rate only, and
# the benchmark's model adds the link latency instead.
set -euo pipefail
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "wire.sh: $*" >&2; exit 1; }
cmd=${1:-}
ns=coll-b
a=sk-wa b=sk-wb

# A qdisc kind works here if it can be added to a throwaway dummy-free device: try on a
# veth pair of our own and remove it.
can_qdisc() {
  ip link add sk-probe-a type veth peer name sk-probe-b 2>/dev/null || return 1
  local ok=0
  # shellcheck disable=SC2086
  tc qdisc add dev sk-probe-a root $1 2>/dev/null && ok=1
  ip link del sk-probe-a 2>/dev/null || true
  ((ok))
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
    [[ $rate =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]] || die "RATE must be a tc rate such as 10gbit or 25gbit, not '${rate}' (usage: wire.sh up RATE [NS])"
    ns=${3:-$ns}
    (($(id -u) == 0)) || die "needs root (it adds a network namespace, a veth pair and qdiscs)"
    ip link show "$a" >/dev/null 2>&1 && die "$a exists already: run 'wire.sh down' first"
    ip netns list | grep -qw "$ns" || ip netns add "$ns"
    ip link add "$a" type veth peer name "$b"
    ip link set "$b" netns "$ns"
    ip addr add 10.177.24.1/24 dev "$a"
    ip -n "$ns" addr add 10.177.24.2/24 dev "$b"
    ip link set "$a" up
    ip -n "$ns" link set "$b" up
    ip -n "$ns" link set lo up
    # burst: at least what the rate sends between two timer ticks (4 ms at HZ=250),
    # else tbf cannot reach its rate; latency: how long a packet may queue.
    delay=""
    if can_qdisc "netem delay 20us"; then delay=yes; fi
    for side in "" "-n $ns"; do
      dev=$a
      [[ -n $side ]] && dev=$b
      # shellcheck disable=SC2086
      if [[ -n $delay ]]; then
        tc $side qdisc add dev "$dev" root handle 1: netem delay 10us
        tc $side qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst 8mb latency 50ms
      else
        tc $side qdisc add dev "$dev" root tbf rate "$rate" burst 8mb latency 50ms
      fi
    done
    echo "wire.sh: $a (10.177.24.1) <-> $b in netns $ns (10.177.24.2), each direction at $rate${delay:+, +20 us round trip}"
    [[ -n $delay ]] || echo "wire.sh: no sch_netem in this kernel: rate shaped, no delay added (the model adds it)"
    ;;
  down)
    ns=${2:-$ns}
    ip link del "$a" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    ;;
  *) die "unknown command '$cmd' (up RATE [NS] | down [NS] | check)" ;;
esac
