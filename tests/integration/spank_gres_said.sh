#!/usr/bin/env bash
# spank_saker.so says gres.conf's disagreements with the topology at warning level once a
# day per node, not at every step (issue 30): a test cluster's fake GPUs wrote the same
# four warnings into slurmd's log for every step of every job. The first step on a node
# warns, the next ones say it at debug level only, a changed gres.conf warns again, and
# the note of what was said is root's (slurmd's spool), so a user cannot silence it.
# Driven through bench/spank_step_harness (slurmstepd's calls, one step per process).
source "$(dirname "$0")/lib.sh"
it_require_root
harness=$SAKER_BUILDDIR/bench/spank_step_harness
so=$SAKER_BUILDDIR/plugins/spank/.libs/spank_saker.so
[[ -x $harness ]] || { echo "spank_gres_said: $harness is not built (make check builds it)" >&2; exit 1; }
it_tmpdir
s=$IT_TMP
mkdir -p "$s/spool" "$s/etc"
echo "ProctrackType=proctrack/linuxproc" >"$s/etc/slurm.conf"
# This machine has no NVIDIA GPU: each File= names one its topology lacks.
echo "NodeName=saker1 Name=gpu File=/dev/nvidia[0-1]" >"$s/etc/gres.conf"
export SLURMD_NODENAME=saker1 HARNESS_SPOOL=$s/spool HARNESS_CONF=$s/etc/slurm.conf HARNESS_JOB_ID=1
export HARNESS_JOB_SLURMD_NODENAME=saker1  # the step's environment names the node, as slurmd sets it
export SAKER_LOG_LEVEL=debug  # so the harness shows what slurmd would log with SlurmdDebug=debug
# slurmstepd's log levels as the harness prints them: "harness info: warning: saker: ..."
# (log::warn) and "harness debug: ..." (log::debug).
warned() { grep -c "harness info: warning: saker: gres.conf disagrees" <<<"$IT_OUT" || true; }
debugged() { grep -c "harness debug: .*gres.conf disagrees.*said at warning level earlier today" <<<"$IT_OUT" || true; }

assert_rc 0 "a step on a node whose gres.conf disagrees runs" -- "$harness" "$so" step state-dir="$s/state"
first=$(warned)
((first == 2)) && it_pass "the first step warns once per disagreement (2)" ||
  it_fail "the first step warns once per disagreement (2): $first"
assert_contains "$IT_OUT" "saker-topo check-gres $s/etc/gres.conf" "the warning names the check to run"
marker=$s/spool/saker-gres-said
[[ -f $marker && $(stat -c '%U %a' "$marker") == "root 600" ]] && it_pass "what was said is noted in slurmd's spool, root's, 0600" ||
  it_fail "what was said is noted in slurmd's spool, root's, 0600: $(ls -l "$marker" 2>&1)"

for n in 2 3; do
  assert_rc 0 "step $n runs" -- "$harness" "$so" step state-dir="$s/state"
  [[ $(warned) == 0 ]] && it_pass "step $n does not warn again" || it_fail "step $n does not warn again: $(warned) warnings"
  [[ $(debugged) == 2 ]] && it_pass "step $n says it at debug level" || it_fail "step $n says it at debug level: $(debugged)"
done

echo "NodeName=saker1 Name=gpu File=/dev/nvidia[0-2]" >"$s/etc/gres.conf"
assert_rc 0 "a step after gres.conf changed runs" -- "$harness" "$so" step state-dir="$s/state"
[[ $(warned) == 3 ]] && it_pass "a changed gres.conf warns again (3 disagreements)" ||
  it_fail "a changed gres.conf warns again (3 disagreements): $(warned)"

# A day-old note is said again (the note's time, not a timing in this test).
printf '%s %s' "$(($(date +%s) - 25 * 3600))" "$(cut -d' ' -f2 "$marker")" >"$marker"
assert_rc 0 "a step a day after the warning runs" -- "$harness" "$so" step state-dir="$s/state"
[[ $(warned) == 3 ]] && it_pass "once a day it warns again" || it_fail "once a day it warns again: $(warned)"

# A note the daemon did not write (here: another owner's) is not believed, and not reused.
chown saker-alice "$marker" 2>/dev/null || { useradd -M saker-alice 2>/dev/null; chown saker-alice "$marker"; }
assert_rc 0 "a step with a note it cannot trust runs" -- "$harness" "$so" step state-dir="$s/state"
[[ $(warned) == 3 ]] && it_pass "a note owned by another user is not believed: it warns" ||
  it_fail "a note owned by another user is not believed: it warns: $(warned)"
it_finish
