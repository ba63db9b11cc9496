#!/usr/bin/env bash
# A classification's transit: encrypt (saker-policy.yaml(5)) through real Slurm: spank_saker
# puts the requirement into the tasks of a job admitted with such data, libsaker_comm then
# seals the ranks' traffic, and a task that asks for less is refused, naming the policy.
# A job on public data keeps the default (auth).
source "$(dirname "$0")/lib.sh"
it_require_root
it_tmpdir

# The sample two-zone policy, its restricted classification also demanding encrypted transit.
policy=$IT_TMP/policy.yaml
sed 's|^\(    \)encrypt_checkpoints: true|&\n\1transit: encrypt|' "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml" >"$policy"
assert_rc 0 "the policy with transit: encrypt loads" -- grep -q '^    transit: encrypt' "$policy"
policy_bin="$SAKER_BUILDDIR/policies/saker-policy/saker-policy"
assert_rc 0 "saker-policy explain says what the policy demands" -- \
  "$policy_bin" explain --policy "$policy" --user alice --account medical --partition cpu-ae --dataset patients@v3
assert_contains "$IT_OUT" "transit: encrypt (required by the datasets' classification)" "explain: encrypt for patients"
assert_rc 0 "explain of public data" -- "$policy_bin" explain --policy "$policy" --user alice --dataset imagenet@2012
assert_contains "$IT_OUT" "transit: auth" "explain: the default for imagenet"

it_cluster_up --nodes 2 --gpus-per-node 0 --cpus-per-node 2 --policy "$policy" \
  --partitions "cpu-ae=saker[1-2]"
it_jobs_as_user
scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae >/dev/null
selftest="$SAKER_BUILDDIR/tests/integration/comm_selftest"
# All "nodes" share this machine: peers reach each other on loopback.
export SAKER_COMM_ADDR=127.0.0.1 SAKER_STORE_HOST=127.0.0.1 SAKER_COMM_TIMEOUT=30
restricted=(-A medical -p cpu-ae --dataset=patients@v3)

assert_rc 0 "a task of a job on patients@v3 starts" -- srun "${restricted[@]}" -N1 -n1 env
assert_contains "$IT_OUT" "SAKER_COMM_TRANSIT_REQUIRED=encrypt" "its environment carries the requirement"
assert_contains "$IT_OUT" "SAKER_COMM_TRANSIT=encrypt" "and the mode, since the task set none"

assert_rc 0 "2 ranks on 2 nodes of a job on patients@v3" -- \
  srun "${restricted[@]}" --mpi=pmi2 -N2 -n2 env -u SAKER_COMM_TRANSIT "$selftest"
assert_eq 2 "$(grep -c 'comm-selftest ok.* transit encrypt' <<<"$IT_OUT")" "both ranks ran sealed and agree"

assert_rc 1 "a task that asks for auth on patients@v3 is refused" -- \
  srun "${restricted[@]}" --mpi=pmi2 -N2 -n2 env SAKER_COMM_TRANSIT=auth "$selftest"
assert_contains "$IT_OUT" "this job's traffic must be encrypted, but SAKER_COMM_TRANSIT=auth" "the error names the mode"
assert_contains "$IT_OUT" "transit: encrypt" "... the policy's reason"
assert_contains "$IT_OUT" "saker-run --transit=encrypt" "... and the fix"
assert_not_contains "$IT_OUT" "comm-selftest ok" "no rank ran in the weaker mode"

assert_rc 0 "a job on public data" -- srun -p cpu-ae --dataset=imagenet@2012 --mpi=pmi2 -N2 -n2 "$selftest"
assert_eq 2 "$(grep -c 'comm-selftest ok.* transit auth' <<<"$IT_OUT")" "keeps the default, auth"
assert_rc 0 "whose tasks carry no requirement" -- srun -p cpu-ae --dataset=imagenet@2012 -N1 -n1 env
assert_not_contains "$IT_OUT" "SAKER_COMM_TRANSIT_REQUIRED" "no SAKER_COMM_TRANSIT_REQUIRED there"
it_finish
