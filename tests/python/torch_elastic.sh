#!/usr/bin/env bash
# hvd.elastic (issue 32 §3): a Horovod elastic script, only its import changed
# (tests/python/elastic_check.py), under saker-run --local:
#  - a killed rank: saker-run restarts the ranks, they restore the last persisted commit,
#    the reset callbacks run, and the run ends with the uninterrupted run's parameters;
#  - a HorovodInternalError (a collective the ranks disagree on): run() restores the last
#    commit in process, runs the reset callbacks, and ends with the uninterrupted parameters;
#  - a resize notice ($SAKER_RESIZE_NOTICE, as saker-run writes it): every rank stops at
#    the same commit with exit 75; the state resumes at 3 ranks unchanged (the reset
#    callback prints the committed parameters), and the ElasticSampler neither repeats
#    nor skips a sample over the whole run;
#  - SIGTERM: exit 75 with a committed state; the run resumes at the same size to the
#    uninterrupted hash, and at another size (3 -> 2) without repeating or skipping samples;
#  - a resize notice planted by another user, or naming the current size, is ignored;
#  - a DDP script preempted at 2 ranks resumes at 3 from its checkpoint;
#  - on one rank (tests/python/elastic_unit_check.py): names of the persisted datasets, the
#    notice's rules, restore() of attributes, an LR scheduler committed and resumed.
source "$(dirname "$0")/../integration/lib.sh"
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "SKIP: $py cannot import torch (apt-get install python3-torch)"; exit 77; }
export PYTHONPATH="$SAKER_BUILDDIR/python${PYTHONPATH:+:$PYTHONPATH}"
run="$SAKER_BUILDDIR/launcher/saker-run/saker-run"
script="$SAKER_SRCDIR/tests/python/elastic_check.py"
tmp=$(mktemp -d /tmp/saker-elastic-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/python_for_build.sh"
py=$(python_for_build "$py" "$tmp")
export SAKER_COMM_TIMEOUT=60

# hash_of OUTPUT RANK: the parameter hash RANK printed at the end.
hash_of() { sed -n "s|^rank $2/[0-9]* params \([0-9a-f]*\)\$|\1|p" <<<"$1" | tail -1; }
# same_on_ranks OUTPUT N: N ranks printed one final hash, the same.
same_on_ranks() { [[ $(grep -c '^rank [0-9]*/[0-9]* params ' <<<"$1") == "$2" &&
                     $(grep '^rank [0-9]*/[0-9]* params ' <<<"$1" | awk '{print $4}' | sort -u | wc -l) == 1 ]]; }
# count PATTERN OUTPUT: lines matching.
count() { grep -c -- "$1" <<<"$2"; }

# The pieces on one rank: persisted names, the notice's rules, restore() of attributes;
# an LR scheduler's state committed, stopped by a notice, resumed into the script's object.
unit="$SAKER_SRCDIR/tests/python/elastic_unit_check.py"
assert_rc 0 "hvd.elastic's pieces, 1 rank" -- "$run" --local -n 1 --max-restarts 0 -- $py "$unit" pieces
assert_contains "$IT_OUT" "elastic unit ok: pieces" "flatten/unflatten, notice rules, restore()"
assert_rc 0 "a scheduler, uninterrupted" -- "$run" --local -n 1 --max-restarts 0 --ckpt-dir "$tmp/u1" -- $py "$unit" resume
plain=$(grep -o 'elastic unit ok: resume, weight .*' <<<"$IT_OUT")
assert_rc 75 "a scheduler, stopped by a notice after 3 steps" -- "$run" --local -n 1 --max-restarts 0 --ckpt-dir "$tmp/u2" -- \
  env SAKER_RESIZE_NOTICE="$tmp/unotice" $py "$unit" commit
rm -f "$tmp/unotice"
assert_rc 0 "a scheduler, resumed" -- "$run" --local -n 1 --max-restarts 0 --ckpt-dir "$tmp/u2" -- \
  env SAKER_RESIZE_NOTICE="$tmp/unotice" $py "$unit" resume
assert_contains "$IT_OUT" "resumed from commit 3 (" "the commit of step 3 is restored"
assert_contains "$IT_OUT" "$plain" "the scheduler (epoch 5, lr 0.025) and the weights are the uninterrupted run's"
# Without --ckpt-dir commits go to $TMPDIR/saker-elastic-UID/RUN_ID: one another user made
# first (to read or plant commits) is refused, naming it.
if id saker-mallory >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin saker-mallory 2>/dev/null; then
  mkdir -m 1777 "$tmp/shared-tmp"
  mkdir -m 0700 "$tmp/shared-tmp/saker-elastic-$(id -u)"
  chown saker-mallory "$tmp/shared-tmp/saker-elastic-$(id -u)"
  assert_rc 1 "a directory for node-local commits that another user made" -- env TMPDIR="$tmp/shared-tmp" \
    "$run" --local -n 1 --max-restarts 0 -- $py "$unit" resume
  assert_contains "$IT_OUT" "refusing $tmp/shared-tmp/saker-elastic-$(id -u) for the elastic state: owner uid $(id -u saker-mallory)" \
    "is refused, naming it and its owner"
fi

assert_rc 0 "uninterrupted, 2 ranks" -- "$run" --local -n 2 --max-restarts 0 -- $py "$script"
ref=$IT_OUT
same_on_ranks "$ref" 2 && it_pass "both ranks end with the same parameters" || it_fail "ranks differ: $ref"
assert_contains "$ref" "sampler ok: 2 epochs, each of 48 samples taken once" "every sample once per epoch"
assert_eq 0 "$(count 'reset callback' "$ref")" "no reset without a restart"
assert_rc 0 "the same run again" -- "$run" --local -n 2 --max-restarts 0 -- $py "$script"
assert_eq "$(hash_of "$ref" 0)" "$(hash_of "$IT_OUT" 0)" "bitwise repeatable run to run"

# A killed rank: rank 1 dies after 7 batches, before its 7th commit.
assert_rc 0 "rank 1 killed after 7 batches; saker-run restarts the ranks" -- env ELASTIC_KILL=1:7 \
  "$run" --local -n 2 --max-restarts 1 --ckpt-dir "$tmp/kill" -- $py "$script"
out=$IT_OUT
assert_contains "$out" "killing myself after 7 batches" "the rank was killed"
# Commits are written in the background, one at a time: when saker-run stops rank 0,
# commit 5 is on disk at least (commit 6 waited for it), and 7 at most.
grep -Eq '^saker.torch.elastic: resumed from commit [567] \(' <<<"$out" &&
  it_pass "the restart restores the last commit written" || it_fail "no 'resumed from commit 5/6/7' in: $out"
assert_eq 1 "$(count '^rank 0 at epoch 0 batch 3 params' "$out")" "the restart does not run the committed batches again"
assert_eq 2 "$(count 'reset callback, size 2' "$out")" "the reset callback ran on both ranks"
assert_contains "$out" "sampler ok: 2 epochs" "no sample repeated or skipped"
same_on_ranks "$out" 2 && it_pass "both ranks agree after the restart" || it_fail "ranks differ: $out"
assert_eq "$(hash_of "$ref" 0)" "$(hash_of "$out" 0)" "killed and restored: the uninterrupted run's parameters, bitwise"
[[ -z $(find "$tmp/kill/elastic" -type f ! -perm 0600) && $(stat -c %a "$tmp/kill/elastic") == 700 ]] &&
  it_pass "commits are 0600 files in a 0700 directory" || it_fail "commit modes: $(ls -la "$tmp/kill/elastic")"

# A HorovodInternalError after batch 10, committing every 4 batches: back to batch 8.
assert_rc 0 "a collective the ranks disagree on, in process" -- env ELASTIC_MISMATCH=10 \
  "$run" --local -n 2 --max-restarts 0 -- $py "$script" --batches-per-commit 4
out=$IT_OUT
assert_contains "$out" "the ranks disagree (root differs: rank 0 0, rank 1 1)" "the mismatch raised HorovodInternalError"
assert_contains "$out" "restoring the last commit and synchronizing again" "run() restores"
assert_eq "$(sed -n 's|^rank 0 at epoch 0 batch 8 params \([0-9a-f]*\)$|\1|p' <<<"$out" | head -1)" \
  "$(sed -n 's|^rank 0: reset callback, size 2, params \([0-9a-f]*\)$|\1|p' <<<"$out")" \
  "the reset callback sees the parameters of the last commit (batch 8), not of batch 10"
assert_eq 2 "$(count '^rank 0 at epoch 0 batch 9 params' "$out")" "batches 9 and 10 run again"
assert_contains "$out" "sampler ok: 2 epochs" "no sample repeated or skipped"
assert_eq "$(hash_of "$ref" 0)" "$(hash_of "$out" 0)" "restored in process: the uninterrupted run's parameters, bitwise"

# A resize notice after 12 batches (a multiple of 3: the rest divides evenly at 3 ranks).
# Only rank 0 sees it (as when saker-run's run directory is local to rank 0's node): rank 1
# must stop at the same commit all the same. A rank that went on alone would wait for ever
# in its next allreduce, so --timeout (generous) turns that into a failure, not a hang.
notice="$tmp/notice"
assert_rc 75 "a resize notice: every rank stops with 75" -- env ELASTIC_NOTICE=12:3 \
  "$run" --local -n 2 --max-restarts 0 --timeout 300 --grace 5 --ckpt-dir "$tmp/grow" -- \
  bash -c 'export SAKER_RESIZE_NOTICE=$1; [[ $RANK == 0 ]] || SAKER_RESIZE_NOTICE=$1.elsewhere; exec "${@:2}"' \
  _ "$notice" $py "$script"
out=$IT_OUT
assert_contains "$out" "saker-run asks for 3 ranks (resize notice): commit 12 persisted in $tmp/grow/elastic" \
  "the commit that saw the notice is persisted"
assert_eq 0 "$(grep -c '^rank [0-9]*/[0-9]* params ' <<<"$out")" "no rank went on past the notice"
committed=$(sed -n 's|^rank 0 at epoch 0 batch 12 params \([0-9a-f]*\)$|\1|p' <<<"$out")
rm -f "$notice"
assert_rc 0 "resumed at 3 ranks" -- \
  "$run" --local -n 3 --max-restarts 0 --ckpt-dir "$tmp/grow" -- env SAKER_RESIZE_NOTICE="$notice" $py "$script"
out=$IT_OUT
assert_contains "$out" "resumed from commit 12 (" "the 3 ranks restore the notice's commit"
assert_contains "$out" "saved by 2 rank(s); now 3" "saved by 2 ranks, resumed by 3"
assert_eq 3 "$(count 'reset callback, size 3' "$out")" "the reset callback ran on the 3 ranks"
assert_eq "$committed" "$(sed -n 's|^rank 0: reset callback, size 3, params \([0-9a-f]*\)$|\1|p' <<<"$out")" \
  "the state is kept: rank 0 restores the parameters it had at commit 12"
assert_contains "$out" "sampler ok: 2 epochs, each of 48 samples taken once" \
  "over 2 then 3 ranks, the ElasticSampler neither repeats nor skips a sample"
same_on_ranks "$out" 3 && it_pass "the 3 ranks end alike" || it_fail "ranks differ: $out"

# The notice names the current size, or another user planted it: no restart.
echo 2 >"$notice"
assert_rc 0 "a notice naming the current size changes nothing" -- \
  "$run" --local -n 2 --max-restarts 0 -- env SAKER_RESIZE_NOTICE="$notice" $py "$script"
assert_eq "$(hash_of "$ref" 0)" "$(hash_of "$IT_OUT" 0)" "the run is the uninterrupted one"
if id saker-mallory >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin saker-mallory 2>/dev/null; then
  echo 3 >"$notice"
  chown saker-mallory "$notice"
  assert_rc 0 "a notice another user owns is ignored" -- \
    "$run" --local -n 2 --max-restarts 0 -- env SAKER_RESIZE_NOTICE="$notice" $py "$script"
  assert_contains "$IT_OUT" "ignoring the resize notice $notice: not a regular file of uid" "and said so"
  assert_eq "$(hash_of "$ref" 0)" "$(hash_of "$IT_OUT" 0)" "the run is the uninterrupted one"
else
  echo "note: cannot create the user saker-mallory (not root?): the planted-notice case is not run"
fi
rm -f "$notice"

# SIGTERM to saker-run after 9 batches: committed state, 75; resumed at the same size.
assert_rc 75 "SIGTERM: the ranks commit and exit 75" -- env ELASTIC_SIGTERM=9 \
  "$run" --local -n 2 --max-restarts 0 --ckpt-dir "$tmp/term" -- $py "$script"
assert_contains "$IT_OUT" "a rank received SIGTERM (forwarded by saker-run): commit" "the stop names the signal"
assert_rc 0 "resumed after SIGTERM, 2 ranks" -- "$run" --local -n 2 --max-restarts 0 --ckpt-dir "$tmp/term" -- $py "$script"
assert_contains "$IT_OUT" "resumed from commit" "the run resumes from the commit"
assert_eq 0 "$(count '^rank 0 at epoch 0 batch 3 params' "$IT_OUT")" "and does not run the committed batches again"
assert_eq "$(hash_of "$ref" 0)" "$(hash_of "$IT_OUT" 0)" "after SIGTERM: the uninterrupted run's parameters, bitwise"

# SIGTERM at 3 ranks, resumed at 2 (a shrink by restarting at another -n).
assert_rc 75 "SIGTERM at 3 ranks" -- env ELASTIC_SIGTERM=5 \
  "$run" --local -n 3 --max-restarts 0 --ckpt-dir "$tmp/shrink" -- $py "$script"
assert_rc 0 "resumed at 2 ranks" -- "$run" --local -n 2 --max-restarts 0 --ckpt-dir "$tmp/shrink" -- $py "$script"
assert_contains "$IT_OUT" "now 2)" "3 ranks' commit resumed by 2"
assert_contains "$IT_OUT" "sampler ok: 2 epochs, each of 48 samples taken once" "3 then 2 ranks: no sample repeated or skipped"
# A torch.distributed script (DDP over the saker backend, saker.torch.checkpoint) gets
# torchrun's kind of restart: preempted at 2 ranks, run again at 3, it reads WORLD_SIZE=3
# from saker-run's environment and resumes from the checkpoint the 2 ranks wrote.
ex="$SAKER_SRCDIR/examples/torch"
assert_rc 75 "DDP: preempted at 2 ranks" -- env SAKER_EXAMPLE_PREEMPT=7 \
  "$run" --local -n 2 --ckpt-dir "$tmp/ddp" -- $py "$ex/train_ddp.py" --steps 12
assert_rc 0 "DDP: run again at 3 ranks" -- "$run" --local -n 3 --ckpt-dir "$tmp/ddp" -- $py "$ex/train_ddp.py" --steps 12
assert_contains "$IT_OUT" "resharded from world size 2" "the 3 ranks load the 2 ranks' checkpoint"
assert_contains "$IT_OUT" "resumed from step 8" "from the emergency checkpoint"
same_on_ranks "$IT_OUT" 3 && it_pass "the 3 ranks (WORLD_SIZE=3) end alike" || it_fail "ranks differ: $IT_OUT"
# saker-run's resize notice stops a torch.distributed script too (exit_if_preempted reads
# it): at 2 ranks, a notice naming 3 stops it at the first step boundary, no signal needed.
echo 3 >"$tmp/ddp-notice"
assert_rc 75 "DDP: the resize notice stops 2 ranks" -- \
  "$run" --local -n 2 --ckpt-dir "$tmp/ddp-grow" -- env SAKER_RESIZE_NOTICE="$tmp/ddp-notice" $py "$ex/train_ddp.py" --steps 12
assert_contains "$IT_OUT" "stopped by saker-run's resize notice (world size 3): emergency checkpoint of step 1" \
  "at the first step boundary, naming the notice"
assert_rc 0 "DDP: relaunched at 3 ranks" -- \
  "$run" --local -n 3 --ckpt-dir "$tmp/ddp-grow" -- env SAKER_RESIZE_NOTICE="$tmp/ddp-notice" $py "$ex/train_ddp.py" --steps 12
assert_contains "$IT_OUT" "resumed from step 1" "the 3 ranks resume from it (a notice naming their size is no request)"
it_finish
