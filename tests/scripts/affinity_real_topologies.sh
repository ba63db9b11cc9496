#!/usr/bin/env bash
# Every real machine's topology under tests/data/real plans exactly as derive-plans.py
# (an independent reading of the XML with Python's xml.etree) says it should:
# saker-topo plan's rank, GPU, NUMA node, CPUs, CUDA_VISIBLE_DEVICES, NCCL_IB_HCA and
# UCX_NET_DEVICES, case by case. Also checks that the committed expectations are what
# the derivation script prints today (so the two cannot drift apart silently).
set -u
here=$(cd "$(dirname "$0")" && pwd)
real="$here/../data/real"
topo="${SAKER_BUILDDIR:-$PWD}/plugins/affinity/saker-topo/saker-topo"
[ -x "$topo" ] || { echo "SKIP: $topo not built"; exit 77; }
fail=0

if ! diff -u "$real/expected-plans.txt" <(/usr/bin/python3 "$real/derive-plans.py"); then
  echo "FAIL: expected-plans.txt differs from what derive-plans.py prints; rerun it"; fail=1
fi

fields='^(rank|gpu|numa|cpus|CUDA_VISIBLE_DEVICES|NCCL_IB_HCA|UCX_NET_DEVICES)='
check_case() {
  local file=$1 ntasks=$2 gpus=$3 cpuset=$4 expected=$5 args actual
  args=(plan --topology "$real/$file" --ntasks-per-node "$ntasks" --format env)
  [ -n "$gpus" ] && args+=(--gpus "$gpus")
  [ -n "$cpuset" ] && args+=(--cpuset "$cpuset")
  actual=$("$topo" "${args[@]}" 2>&1 | awk -v re="$fields" '{ l = ""; for (i = 1; i <= NF; i++) if ($i ~ re) l = l (l ? " " : "") $i; print l }')
  if [ "$actual" = "$expected" ]; then
    echo "ok: $file ntasks=$ntasks gpus=$gpus cpuset=$cpuset"
  else
    echo "FAIL: $file ntasks=$ntasks gpus=$gpus cpuset=$cpuset"; diff -u <(echo "$expected") <(echo "$actual"); fail=1
  fi
}

case_=() expected=''
while IFS= read -r line; do
  if [[ $line == "== "* ]]; then
    [ ${#case_[@]} -gt 0 ] && check_case "${case_[@]}" "$expected"
    read -r _ file ntasks gpus cpuset <<<"$line"
    case_=("$file" "${ntasks#ntasks=}" "${gpus#gpus=}" "${cpuset#cpuset=}")
    expected=''
  else
    expected+="${expected:+$'\n'}$line"
  fi
done <"$real/expected-plans.txt"
[ ${#case_[@]} -gt 0 ] && check_case "${case_[@]}" "$expected"
# Without --topology, plan discovers this machine.
if out=$("$topo" plan --ntasks-per-node 1 --format env 2>&1) && [[ $out == "rank=0 "* ]]; then
  echo "ok: plan without --topology discovers this machine"
else
  echo "FAIL: plan without --topology: $out"; fail=1
fi
exit $fail
