#!/usr/bin/env bash
# OpenLineage RunEvents through real Slurm (issue 30 §3): with openlineage-dir= in
# plugstack.conf, spank_saker.so writes a START event for every step when it starts and a
# COMPLETE or FAIL event when it ends, with the datasets job_submit admitted as inputs and
# the checkpoints the step left in $SAKER_CKPT_DIR as outputs; each node of a step writes
# its own, under the step's one run id. Jobs run as lib.sh's ordinary test user; a second
# user (saker-mallory) tries to read and plant events.
#
# The events are checked structurally (openlineage_check.py), and against OpenLineage's
# published JSON schema when SAKER_OPENLINEAGE_SCHEMA names a copy of it (not kept here).
source "$(dirname "$0")/lib.sh"
it_require_root
it_tmpdir
WRITER=$SAKER_BUILDDIR/tests/integration/ckpt_writer
CKPT=$SAKER_BUILDDIR/ckpt/saker-ckpt/saker-ckpt
CHECK="/usr/bin/python3 $SAKER_SRCDIR/tests/integration/openlineage_check.py"
for f in "$WRITER" "$CKPT"; do
  [[ -x $f ]] || { echo "SKIP: $IT_NAME needs $f (make tests/integration/ckpt_writer ckpt/saker-ckpt/saker-ckpt)" >&2; exit 77; }
done
MALLORY=saker-mallory
id -u $MALLORY >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin $MALLORY || { echo "SKIP: cannot create $MALLORY" >&2; exit 77; }
# The site's collector reads the events through the directory's group.
getent group saker-lineage >/dev/null || groupadd saker-lineage || { echo "SKIP: cannot create group saker-lineage" >&2; exit 77; }

ol=$IT_TMP/openlineage
mkdir -m 0750 "$ol" && chgrp saker-lineage "$ol"
policy=$IT_TMP/policy.yaml
cp "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml" "$policy"
it_cluster_up --nodes 2 --gpus-per-node 0 --cpus-per-node 2 --policy "$policy" \
  --partitions "cpu-ae=saker[1-2]" --spank-args "openlineage-dir=$ol openlineage-namespace=slurm://it"
scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae >/dev/null
# The events state the head of the controller's audit log (job_submit_saker's, beside slurm.conf).
audit_log=$IT_PREFIX/etc/saker-audit.log
sed -i "s|openlineage-dir=|attest-audit-log=$audit_log openlineage-dir=|" "$IT_PREFIX/etc/plugstack.conf"
it_jobs_as_user
work=$IT_PREFIX/work
mkdir -p "$work" && chown "$IT_USER:" "$work" && chmod 0700 "$work"
# field FILE EXPR: a Python expression over the event `e`, printed.
field() { /usr/bin/python3 -c 'import json,re,sys; e=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
ev() { echo "$ol/job-$1.$2.${4:-saker1}.$3.json"; }  # ev JOB STEP TYPE [NODE]
# Single-node jobs run on saker1 (-w), so that their events' names are known.

# --- a job that trains and saves a checkpoint: START and COMPLETE for its batch step and its step 0.
job=$(sbatch --parsable -p cpu-ae -w saker1 --dataset=imagenet@2012 -J train-ol -o "$IT_PREFIX/ol-%j.out" \
  --export=ALL,SAKER_CKPT_DIR="$work/run1" --wrap "srun $WRITER \$SAKER_CKPT_DIR 10")
assert_eq COMPLETED "$(it_job_wait "$job" 60)" "job $job saves a checkpoint"
it_wait_for 30 "the controller's audit log has a sealed head" test -s "$audit_log.head"
ckpt=$work/run1/ckpt-000000000010.h5
it_wait_for 30 "the batch step's end event is written" test -e "$(ev "$job" batch COMPLETE)"
for s in batch 0; do
  for t in START COMPLETE; do
    assert_rc 0 "step $s has its $t event" -- test -f "$(ev "$job" $s $t)"
  done
  start=$(ev "$job" $s START) end=$(ev "$job" $s COMPLETE)
  assert_eq "$(field "$start" "e['run']['runId']")" "$(field "$end" "e['run']['runId']")" "step $s: START and COMPLETE share the run id"
  assert_eq "slurm://it $IT_USER.train-ol.$s" "$(field "$end" "e['job']['namespace'] + ' ' + e['job']['name']")" \
    "step $s: the job is the site's namespace and USER.JOBNAME.STEP"
  assert_eq "[('imagenet', '2012')]" "$(field "$start" "[(d['name'], d['facets']['version']['datasetVersion']) for d in e['inputs']]")" \
    "step $s: START names the admitted dataset imagenet@2012 as input"
  assert_eq "[]" "$(field "$start" "e['outputs']")" "step $s: START has no outputs yet"
  assert_eq "['$ckpt']" "$(field "$end" "[o['name'] for o in e['outputs']]")" "step $s: COMPLETE names the checkpoint as output"
  assert_eq "$job $s ae 1 0" "$(field "$end" "' '.join(str(e['run']['facets']['saker_slurm'][k]) for k in ('jobId','stepId','zone','tasks','failedTasks'))")" \
    "step $s: the Slurm facet states job, step, zone and tasks"
done
# Each output carries the checkpoint's SHA-256: the subject of saker-ckpt provenance's in-toto
# statement, as OpenLineage's dataset version (sha256:HEX) and in the checkpoint facet.
subject() { "$CKPT" provenance "$1" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["subject"][0]["digest"]["sha256"])'; }
digests="e['outputs'][0]['facets']['version']['datasetVersion'] + ' ' + e['outputs'][0]['outputFacets']['saker_checkpoint']['sha256']"
sub=$(subject "$ckpt")
for s in batch 0; do
  assert_eq "sha256:$sub $sub" "$(field "$(ev "$job" $s COMPLETE)" "$digests" 2>&1)" \
    "step $s: COMPLETE states the checkpoint's in-toto subject digest as its version"
done
assert_eq "" "$(field "$(ev "$job" 0 COMPLETE)" "e['run']['facets']['saker_slurm'].get('outputsNote', '')")" \
  "and every checkpoint was read: no note"
assert_eq "$audit_log" "$(field "$(ev "$job" 0 COMPLETE)" "e['run']['facets']['saker_slurm']['auditLog']")" \
  "the Slurm facet names the controller's audit log"
assert_eq True "$(field "$(ev "$job" 0 COMPLETE)" "bool(re.fullmatch('[0-9]+:[0-9a-f]{64}', e['run']['facets']['saker_slurm']['auditHead']))")" \
  "the Slurm facet states the audit log's head"

# --- a failing job: its batch step and the failing step give FAIL; the step that saved, COMPLETE.
fjob=$(sbatch --parsable -p cpu-ae -w saker1 --dataset=imagenet@2012 -J fails -o "$IT_PREFIX/ol-%j.out" \
  --export=ALL,SAKER_CKPT_DIR="$work/run2" --wrap "srun $WRITER \$SAKER_CKPT_DIR 5; srun false; exit 3")
assert_eq FAILED "$(it_job_wait "$fjob" 60)" "job $fjob fails"
it_wait_for 30 "its batch step's FAIL event is written" test -e "$(ev "$fjob" batch FAIL)"
assert_rc 0 "step 0 (it saved) COMPLETE" -- test -f "$(ev "$fjob" 0 COMPLETE)"
assert_rc 0 "step 1 (false) FAIL" -- test -f "$(ev "$fjob" 1 FAIL)"
assert_eq "[]" "$(field "$(ev "$fjob" 1 FAIL)" "e['outputs']")" "step 1 names no output: the checkpoint, even of the same second, was step 0's"
assert_rc 1 "and no COMPLETE for the failed batch step" -- test -e "$(ev "$fjob" batch COMPLETE)"
assert_eq "a task on saker1: exit code 3" "$(field "$(ev "$fjob" batch FAIL)" "e['run']['facets']['errorMessage']['message']")" \
  "the FAIL event's errorMessage facet says why"
assert_eq "['$work/run2/ckpt-000000000005.h5']" "$(field "$(ev "$fjob" batch FAIL)" "[o['name'] for o in e['outputs']]")" \
  "a failed step still names the checkpoints it left"
sub=$(subject "$work/run2/ckpt-000000000005.h5")
assert_eq "sha256:$sub $sub" "$(field "$(ev "$fjob" batch FAIL)" "$digests" 2>&1)" "with their SHA-256"

# --- a step on two nodes: each node reports its part, under the one run id of the step.
assert_rc 0 "a step on saker1 and saker2" -- srun -p cpu-ae --dataset=imagenet@2012 -N2 -n2 bash -c 'echo "id=$SLURM_JOB_ID"'
two=$(sed -n 's/^id=//p' <<<"$IT_OUT" | head -1)
for n in saker1 saker2; do
  it_wait_for 10 "$n wrote its COMPLETE event" test -e "$(ev "$two" 0 COMPLETE $n)"
done
assert_eq "$(field "$(ev "$two" 0 START saker1)" "e['run']['runId']")" "$(field "$(ev "$two" 0 COMPLETE saker2)" "e['run']['runId']")" \
  "both nodes' events share the step's run id"
assert_eq "saker2 saker[1-2] 1" "$(field "$(ev "$two" 0 COMPLETE saker2)" "' '.join(str(e['run']['facets']['saker_slurm'][k]) for k in ('node','nodes','tasks'))")" \
  "saker2's event names itself, the job's nodes and its own task"
assert_contains "$(field "$(ev "$two" 0 COMPLETE saker1)" "e['run']['facets']['saker_slurm'].get('outputsNote', '')")" \
  "SAKER_CKPT_DIR was not set" "a step without a checkpoint directory says its outputs are unknown"
# (rank 1 ends only once rank 0 saved: each node lists when its own tasks end)
assert_rc 0 "a step on two nodes that saves a checkpoint" -- srun -p cpu-ae --dataset=imagenet@2012 -N2 -n2 \
  --export=ALL,SAKER_CKPT_DIR="$work/two" bash -c "if [ \$SLURM_PROCID = 0 ]; then $WRITER \$SAKER_CKPT_DIR 7 >/dev/null;
    else for i in \$(seq 300); do [ -e \$SAKER_CKPT_DIR/ckpt-000000000007.h5 ] && break; sleep 0.1; done; fi; echo id=\$SLURM_JOB_ID"
two_ck=$(sed -n 's/^id=//p' <<<"$IT_OUT" | head -1)
for n in saker1 saker2; do
  it_wait_for 10 "$n wrote its COMPLETE event" test -e "$(ev "$two_ck" 0 COMPLETE $n)"
done
sub=$(subject "$work/two/ckpt-000000000007.h5")
assert_eq "sha256:$sub $sub" "$(field "$(ev "$two_ck" 0 COMPLETE saker1)" "$digests" 2>&1)" "the step's first node reads the checkpoint"
assert_eq "['$work/two/ckpt-000000000007.h5'] {}" \
  "$(field "$(ev "$two_ck" 0 COMPLETE saker2)" "str([o['name'] for o in e['outputs']]) + ' ' + str(e['outputs'][0].get('facets', {}))")" \
  "the other node lists it without reading it again"
assert_contains "$(field "$(ev "$two_ck" 0 COMPLETE saker2)" "e['run']['facets']['saker_slurm']['outputsNote']")" \
  "in the end event of the step's first node" "and says where its digest is"
assert_rc 1 "another step's run id differs" -- \
  test "$(field "$(ev "$two" 0 START saker1)" "e['run']['runId']")" = "$(field "$(ev "$job" 0 START)" "e['run']['runId']")"

# --- a requeued job runs its steps again as new runs (Slurm's restart count).
rjob=$(sbatch --parsable -p cpu-ae -w saker1 --requeue --dataset=imagenet@2012 -J requeued -o /dev/null \
  --wrap 'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 120; fi')
it_wait_for 30 "job $rjob's first run started" test -e "$(ev "$rjob" batch START)"
scontrol requeue "$rjob"
it_wait_for 30 "its first run's end is FAIL (killed by the requeue)" test -e "$(ev "$rjob" batch FAIL)"
assert_eq COMPLETED "$(it_job_wait "$rjob" 90)" "job $rjob runs again and completes"
r1=$ol/job-$rjob.batch.saker1.r1
it_wait_for 30 "the second run's COMPLETE event is written" test -e "$r1.COMPLETE.json"
assert_eq 1 "$(field "$r1.START.json" "e['run']['facets']['saker_slurm']['restartCount']")" "it states restart 1"
assert_eq "$(field "$r1.START.json" "e['run']['runId']")" "$(field "$r1.COMPLETE.json" "e['run']['runId']")" \
  "the second run's START and COMPLETE share a run id"
assert_rc 1 "which is not the first run's" -- \
  test "$(field "$r1.START.json" "e['run']['runId']")" = "$(field "$(ev "$rjob" batch START)" "e['run']['runId']")"

# --- all of them are OpenLineage RunEvents.
assert_rc 0 "every event passes the structural check${SAKER_OPENLINEAGE_SCHEMA:+ and the published OpenLineage schema}" -- $CHECK "$ol"/*.json
assert_not_contains "$IT_OUT" "invalid" "none is invalid"
assert_contains "$IT_OUT" "Saker facets validated against provenance/openlineage-facets.json" "Saker's facets match Saker's schema for them (python3-jsonschema, from scripts/install-deps)"
it_log "$(grep '^facets:' <<<"$IT_OUT")"
it_log "$(grep '^schema:' <<<"$IT_OUT")"
echo '{"eventType":"START","eventTime":"yesterday","run":{"runId":"x"},"job":{"namespace":"n"}}' >"$IT_TMP/bad.json"
assert_rc 1 "the check itself refuses a malformed event" -- $CHECK "$IT_TMP/bad.json"
sed 's/"zone":"ae"/"zone":7/' "$(ev "$job" 0 START)" >"$IT_TMP/badfacet.json"
assert_rc 1 "and a Saker facet that breaks its schema" -- $CHECK "$IT_TMP/badfacet.json"
assert_contains "$IT_OUT" "saker_slurm: 7 is not of type 'string'" "naming the field"

# --- the directory and its files: the site's collector group reads, no one else reads or plants.
assert_eq "640 root saker-lineage" "$(stat -c '%a %U %G' "$(ev "$job" 0 START)")" "events are 0640, root's, group the directory's"
for u in "$IT_USER" $MALLORY; do
  assert_rc 1 "$u cannot read an event" -- setpriv --reuid="$u" --regid="$u" --clear-groups cat "$(ev "$job" 0 START)"
  assert_rc 2 "$u cannot list the directory" -- setpriv --reuid="$u" --regid="$u" --clear-groups ls "$ol"
  assert_rc 1 "$u cannot plant a file there" -- setpriv --reuid="$u" --regid="$u" --clear-groups touch "$ol/job-999.0.saker1.START.json"
done
assert_rc 0 "the job's user cannot read it from inside a job either" -- \
  srun -p cpu-ae -w saker1 -N1 -n1 bash -c "cat $(ev "$job" 0 START) >/dev/null 2>&1 && echo READ; true"
assert_not_contains "$IT_OUT" "READ" "(read refused)"

# --- outputs are listed as the job's user: a root-only directory named as SAKER_CKPT_DIR leaks nothing.
mkdir -m 0700 "$IT_TMP/rootonly" && touch "$IT_TMP/rootonly/ckpt-000000000001.h5" && chown "$IT_USER:" "$IT_TMP/rootonly/ckpt-000000000001.h5"
assert_rc 0 "a step naming a root-only SAKER_CKPT_DIR runs" -- \
  srun -p cpu-ae -w saker1 -N1 -n1 --export=ALL,SAKER_CKPT_DIR="$IT_TMP/rootonly" bash -c 'echo "id=$SLURM_JOB_ID"'
sid=$(ev "$(sed -n 's/^id=//p' <<<"$IT_OUT")" 0 COMPLETE)
it_wait_for 10 "its end event is written" test -e "$sid"
assert_eq "[]" "$(field "$sid" "e['outputs']")" "no outputs from a directory the user cannot read"
assert_contains "$(field "$sid" "e['run']['facets']['saker_slurm']['outputsNote']")" "Permission denied" "and the note says why"

# --- a directory others may write is refused: no events, slurmd's log names it; a planted link is not followed.
chmod 0777 "$ol"
echo precious >"$IT_TMP/victim"
assert_rc 0 "a step with a world-writable event directory still runs" -- srun -p cpu-ae -w saker1 -N1 -n1 true
it_wait_for 10 "slurmd's log names the directory and the fix" grep -q "OpenLineage: START of step .*$ol.*chmod 0750" "$IT_PREFIX"/log/slurmd-saker*.log
chmod 0750 "$ol"
n_before=$(ls "$ol" | wc -l)
pjob=$(sbatch --parsable --hold -p cpu-ae -w saker1 -J planted -o /dev/null --wrap true)
ln -s "$IT_TMP/victim" "$ol/job-$pjob.batch.saker1.START.json"  # as if an earlier admin mistake let it in
scontrol release "$pjob"
assert_eq COMPLETED "$(it_job_wait "$pjob" 60)" "job $pjob runs beside a planted link"
it_wait_for 30 "its events are written beside the link" test -e "$ol/job-$pjob.batch.saker1.START.2.json"
assert_eq precious "$(cat "$IT_TMP/victim")" "the link's target is untouched"
it_finish
