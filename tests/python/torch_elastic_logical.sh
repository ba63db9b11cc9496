#!/usr/bin/env bash
# hvd.elastic.LogicalWorkers (issue 32 §2, saker.torch's opt-in): the same script with 4
# logical workers ends with the same parameter bits on 1, 2, 3 and 4 ranks (saker-run
# --local: shared memory, and the TCP ring), and through hvd.elastic.run resized from 4
# ranks to 2 by saker-run's resize notice, while the way a Horovod script trains (plain)
# ends with other bits on 2 and 4 ranks; 5 ranks for 4 workers are refused, naming both.
source "$(dirname "$0")/../integration/lib.sh"
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "SKIP: $py cannot import torch (apt-get install python3-torch)"; exit 77; }
export PYTHONPATH="$SAKER_BUILDDIR/python${PYTHONPATH:+:$PYTHONPATH}"
run="$SAKER_BUILDDIR/launcher/saker-run/saker-run"
script="$SAKER_SRCDIR/tests/python/torch_elastic_logical_check.py"
tmp=$(mktemp -d /tmp/saker-logical-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/python_for_build.sh"
py=$(python_for_build "$py" "$tmp")
export SAKER_COMM_TIMEOUT=60

# hashes OUTPUT MODE: the distinct final hashes the ranks printed, and how many ranks did
# (matched anywhere in a line: two ranks' lines may reach saker-run's output as one).
finals() { grep -o "rank [0-9]*/[0-9]* $2 params [0-9a-f]\{32\}" <<<"$1"; }
hashes() { finals "$1" "$2" | awk '{ print $5 }' | sort -u | tr '\n' ' '; }
ranks_done() { finals "$1" "$2" | wc -l; }

assert_rc 0 "4 logical workers on 1 rank" -- "$run" --local -n 1 --max-restarts 0 -- $py "$script" 4 logical
want=$(hashes "$IT_OUT" logical)
[[ $want =~ ^[0-9a-f]{32}\ $ ]] && it_pass "one rank printed one hash ($want)" || it_fail "one rank printed '$want', not one hash"
for n in 2 3 4; do
  assert_rc 0 "4 logical workers on $n ranks" -- "$run" --local -n "$n" --max-restarts 0 -- $py "$script" 4 logical
  assert_eq "$n" "$(ranks_done "$IT_OUT" logical)" "every one of the $n ranks finished"
  assert_eq "$want" "$(hashes "$IT_OUT" logical)" "4 logical workers on $n ranks end with the 1-rank bits"
done
assert_rc 0 "4 logical workers on 3 ranks over the TCP ring" -- env SAKER_COMM_TRANSPORT=ring \
  "$run" --local -n 3 --max-restarts 0 -- $py "$script" 4 logical
assert_eq "$want" "$(hashes "$IT_OUT" logical)" "over the TCP ring too"

# Inside hvd.elastic.run, committed every 5 steps: uninterrupted on 4 ranks; then resized
# by a notice after step 10 (every rank stops at that commit, exit 75) and resumed on 2.
assert_rc 0 "elastic, uninterrupted on 4 ranks" -- "$run" --local -n 4 --max-restarts 0 --ckpt-dir "$tmp/e1" -- \
  $py "$script" 4 elastic
assert_eq "$want" "$(hashes "$IT_OUT" elastic)" "elastic on 4 ranks ends with the 1-rank bits"
notice=$tmp/notice
assert_rc 75 "elastic on 4 ranks, a resize notice naming 2 after step 10" -- env LOGICAL_NOTICE=10:2 \
  "$run" --local -n 4 --max-restarts 0 --ckpt-dir "$tmp/e2" -- env SAKER_RESIZE_NOTICE="$notice" $py "$script" 4 elastic
assert_eq 0 "$(ranks_done "$IT_OUT" elastic)" "no rank went on past the notice"
rm -f "$notice"
# Asked for L = 2 now: the committed L (4, in the TorchState) wins.
assert_rc 0 "resumed on 2 ranks" -- "$run" --local -n 2 --max-restarts 0 --ckpt-dir "$tmp/e2" -- \
  env SAKER_RESIZE_NOTICE="$notice" $py "$script" 2 elastic
assert_contains "$IT_OUT" "resumed from commit 2 (" "from the notice's commit (the second, at step 10)"
assert_contains "$IT_OUT" "saved by 4 rank(s); now 2" "saved by 4 ranks, resumed by 2"
assert_eq 2 "$(ranks_done "$IT_OUT" elastic)" "both ranks finished"
assert_eq "$want" "$(hashes "$IT_OUT" elastic)" "4 -> notice -> 2 ends with the uninterrupted run's bits"

# The control: trained as a Horovod script trains, the bits follow the world size.
assert_rc 0 "plain on 2 ranks" -- "$run" --local -n 2 --max-restarts 0 -- $py "$script" 4 plain
plain2=$(hashes "$IT_OUT" plain)
assert_rc 0 "plain on 4 ranks" -- "$run" --local -n 4 --max-restarts 0 -- $py "$script" 4 plain
[[ -n $plain2 && $plain2 != "$(hashes "$IT_OUT" plain)" ]] && it_pass "plain training ends with other bits on 2 and 4 ranks (the comparison can fail)" ||
  it_fail "plain training gave the same bits on 2 and 4 ranks: the comparison above proves nothing"

assert_rc 1 "5 ranks for 4 logical workers" -- "$run" --local -n 5 --max-restarts 0 -- $py "$script" 4 logical
assert_contains "$IT_OUT" "5 ranks for 4 logical workers" "refused, naming both"
it_finish
