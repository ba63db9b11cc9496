#!/usr/bin/env bash
# scripts/slurm-compat and saker-cluster --slurm refuse what they cannot use, before they
# build or start anything: bad command lines, missing release sources, a prefix that holds
# no Slurm, Slurm programs missing from it, and plugins built for another Slurm release.
# No daemon, no build: stubs stand in for a Slurm prefix. Runs in about a second.
set -uo pipefail
src=${SAKER_SRCDIR:?run through make check}
compat=$src/scripts/slurm-compat
cluster=$src/scripts/saker-cluster
tmp=$(mktemp -d /tmp/saker-compat-cli.XXXXXX)
trap 'rm -rf -- "$tmp"' EXIT
pass=0 fail=0

# expect RC NEEDLE MSG -- CMD...: CMD exits RC and its output contains NEEDLE.
expect() {
  local rc=$1 needle=$2 msg=$3 out got
  shift 4
  out=$("$@" 2>&1) && got=0 || got=$?
  if [[ $got == "$rc" && $out == *"$needle"* ]]; then
    echo "ok - $msg"; pass=$((pass + 1))
  else
    echo "not ok - $msg (exit $got, expected $rc; expected to find '$needle')"
    printf '%s\n' "$out" | head -n 12 | sed 's/^/#   | /'
    fail=$((fail + 1))
  fi
}

# --- slurm-compat: the command line -----------------------------------------------------------
expect 0 "Usage: slurm-compat" "--help shows the usage" -- "$compat" --help
expect 0 "slurm-compat (Saker)" "--version names Saker's release" -- "$compat" --version
expect 2 "no Slurm version given" "no version is a usage error" -- "$compat"
for bad in 24.11 24 v24.11.7 "24.11.7;id" ../24.11.7 24.11.x ""; do
  expect 2 "is not a Slurm release number" "version '$bad' is refused" -- "$compat" --build-only "$bad"
done
expect 2 "unknown option --bogus" "an unknown option is refused" -- "$compat" --bogus 24.11.7
expect 2 "needs a value" "an option without its value is refused" -- "$compat" --cache
for bad in 0 -1 abc 1000; do
  expect 2 "--jobs $bad is invalid" "--jobs $bad is refused" -- "$compat" --jobs "$bad" 24.11.7
done
expect 2 "unsupported characters" "a cache path that cannot go into slurm.conf is refused" -- \
  "$compat" --build-only --cache "$tmp/with space" 24.11.7

# --- slurm-compat: the environment ------------------------------------------------------------
mkdir -p "$tmp/vendor" "$tmp/cache"
expect 3 "no release sources for Slurm 99.01.1" "a release without its tarball is refused, naming the file" -- \
  "$compat" --build-only --vendor "$tmp/vendor" --cache "$tmp/cache" 99.01.1
expect 3 "put slurm-99.01.1.tar.xz into $tmp/vendor" "... and saying where to put it" -- \
  "$compat" --build-only --vendor "$tmp/vendor" --cache "$tmp/cache" 99.01.1
# A tarball that does not match SHA256SUMS is never built.
printf 'not a tarball\n' >"$tmp/vendor/slurm-99.01.1.tar.xz"
printf '%064d  slurm-99.01.1.tar.xz\n' 0 >"$tmp/vendor/SHA256SUMS"
expect 1 "does not match its checksum" "a damaged tarball is refused" -- \
  "$compat" --build-only --vendor "$tmp/vendor" --cache "$tmp/cache" 99.01.1
[[ ! -e $tmp/cache/99.01.1 ]] && { echo "ok - nothing is installed from it"; pass=$((pass + 1)); } ||
  { echo "not ok - a prefix appeared for the damaged tarball"; fail=$((fail + 1)); }

# --- summarize-tests: a test that left no result is a failure --------------------------------
mkdir -p "$tmp/build/tests/integration"
printf ':test-result: PASS\n' >"$tmp/build/tests/integration/a.trs"
printf '# a: 3 passed, 0 failed\n' >"$tmp/build/tests/integration/a.log"
expect 1 "3 passed, 1 failed, 0 skipped" "summarize-tests counts a missing result as a failure" -- \
  "$src/scripts/summarize-tests" "$tmp/build" tests/integration/a.sh tests/integration/never_ran.sh

# --- saker-cluster --slurm ------------------------------------------------------------------------
if [[ $(id -u) -ne 0 ]]; then
  echo "# saker-cluster up needs root: its --slurm checks are not run"
else
  expect 2 "is not a directory" "--slurm of a missing directory is refused" -- \
    "$cluster" up --prefix "$tmp/c" --slurm "$tmp/nothing"
  mkdir -p "$tmp/empty"
  expect 2 "no Slurm under --slurm" "--slurm of a directory without sbin/slurmctld is refused" -- \
    "$cluster" up --prefix "$tmp/c" --slurm "$tmp/empty"
  # A stub Slurm 24.11.7: slurmctld -V answers, nothing else exists yet.
  fake=$tmp/slurm
  mkdir -p "$fake/sbin" "$fake/bin"
  printf '#!/bin/sh\necho "slurm 24.11.7"\n' >"$fake/sbin/slurmctld"
  chmod +x "$fake/sbin/slurmctld"
  expect 1 "no Slurm plugins under --slurm" "a prefix without Slurm's plugin directory is refused" -- \
    "$cluster" up --prefix "$tmp/c" --slurm "$fake"
  mkdir -p "$fake/lib/slurm" && : >"$fake/lib/slurm/auth_munge.so"
  expect 1 "Slurm program(s) missing under --slurm $fake: slurmd slurmstepd srun" \
    "Slurm programs missing from the prefix are named (never taken from /usr)" -- \
    "$cluster" up --prefix "$tmp/c" --slurm "$fake"
  for p in slurmd slurmstepd; do cp "$fake/sbin/slurmctld" "$fake/sbin/$p"; done
  for p in srun sbatch sinfo scontrol squeue; do cp "$fake/sbin/slurmctld" "$fake/bin/$p"; done
  # Plugins of a build tree configured for Debian's 22.05.
  bt=$tmp/build22
  mkdir -p "$bt/plugins/spank/.libs" "$bt/plugins/job_submit/.libs"
  : >"$bt/plugins/spank/.libs/spank_saker.so"
  : >"$bt/plugins/job_submit/.libs/job_submit_saker.so"
  printf '#define SAKER_SLURM_VERSION "22.05.8"\n' >"$bt/config.h"
  expect 2 "were built for Slurm 22.05.8, but this cluster runs Slurm 24.11.7" \
    "plugins built for another release are refused before anything starts" -- \
    "$cluster" up --prefix "$tmp/c" --port-base 25010 --slurm "$fake" --build-dir "$bt"
  [[ ! -e $tmp/c ]] && { echo "ok - the refused cluster left no prefix behind"; pass=$((pass + 1)); } ||
    { echo "not ok - $tmp/c was created although up refused"; fail=$((fail + 1)); }
  expect 2 "were built for Slurm 22.05.8" "SAKER_CLUSTER_SLURM is the default for --slurm" -- \
    env SAKER_CLUSTER_SLURM="$fake" "$cluster" up --prefix "$tmp/c" --port-base 25010 --build-dir "$bt"
  expect 0 "for Slurm 24.11.7 ($fake)" "saker-cluster --version names the Slurm of SAKER_CLUSTER_SLURM" -- \
    env SAKER_CLUSTER_SLURM="$fake" "$cluster" --version
fi

echo "$pass passed, $fail failed"
((fail == 0))
