#!/usr/bin/env bash
# Job attestations and checkpoint provenance through real Slurm (issue 30): spank_saker.so
# signs each step's attestation with the site's Ed25519 key in slurmstepd; the task reads it
# (SAKER_ATTESTATION) but cannot write, replace or forge it; every checkpoint libsaker_ckpt
# writes carries it; saker-ckpt provenance prints the in-toto/SLSA statement and --verify
# checks the chain against the public key. The job's user (lib.sh's ordinary test user, here
# "alice") and a second user (saker-mallory) attack it.
source "$(dirname "$0")/lib.sh"
it_require_root
it_tmpdir
WRITER=$SAKER_BUILDDIR/tests/integration/ckpt_writer
CKPT=$SAKER_BUILDDIR/ckpt/saker-ckpt/saker-ckpt
for f in "$WRITER" "$CKPT"; do
  [[ -x $f ]] || { echo "SKIP: $IT_NAME needs $f (make tests/integration/ckpt_writer ckpt/saker-ckpt/saker-ckpt)" >&2; exit 77; }
done
# The jobs run as lib.sh's test user (it_jobs_as_user): saker-alice is the attack suite's.
ALICE=$IT_USER MALLORY=saker-mallory
for u in $ALICE $MALLORY; do
  id -u "$u" >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin "$u" || { echo "SKIP: cannot create $u" >&2; exit 77; }
done

# The site key: root's, 0600. Its public half is what anyone verifies with.
keys=$IT_TMP/keys
mkdir -m 0700 "$keys"
openssl genpkey -algorithm ed25519 -out "$keys/site.key" 2>/dev/null && chmod 0600 "$keys/site.key"
openssl pkey -in "$keys/site.key" -pubout -out "$IT_TMP/site.pub" 2>/dev/null
openssl genpkey -algorithm ed25519 -out "$IT_TMP/forger.key" 2>/dev/null
chmod 0644 "$IT_TMP/forger.key" "$IT_TMP/site.pub"

policy=$IT_TMP/policy.yaml
cp "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml" "$policy"
it_cluster_up --nodes 2 --gpus-per-node 0 --cpus-per-node 2 --policy "$policy" \
  --partitions "cpu-ae=saker[1-2]" --spank-args "attest-key=$keys/site.key attest-dir=$IT_TMP/attest"
scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae >/dev/null
# The controller's audit log (job_submit_saker's, beside slurm.conf) is on this machine: the
# attestations state its head. slurmstepd reads plugstack.conf afresh for every step.
audit_log=$IT_PREFIX/etc/saker-audit.log
sed -i "s|attest-dir=|attest-audit-log=$audit_log attest-dir=|" "$IT_PREFIX/etc/plugstack.conf"
it_jobs_as_user
work=$IT_PREFIX/work
mkdir -p "$work" && chown $ALICE: "$work" && chmod 0700 "$work"
job_out() { cat "$IT_PREFIX/prov-$1.out" 2>/dev/null; }

# --- a step gets its attestation; what it states came from slurmctld, not from the task.
assert_rc 0 "a step of a job on imagenet@2012 runs" -- \
  srun -p cpu-ae --dataset=imagenet@2012 -N1 -n1 bash -c 'echo "path=$SAKER_ATTESTATION"; cat "$SAKER_ATTESTATION"'
att_path=$(sed -n 's/^path=//p' <<<"$IT_OUT")
assert_contains "$att_path" "$IT_TMP/attest/saker" "SAKER_ATTESTATION names the node's attestation directory"
assert_contains "$IT_OUT" "saker-attestation 1" "the task can read its attestation"
payload=$(sed -n 's/^payload //p' <<<"$IT_OUT" | base64 -d)
assert_contains "$payload" "user=$ALICE" "it states the job's user"
assert_contains "$payload" "partition=cpu-ae" "... the partition"
assert_contains "$payload" "zone=ae" "... the node's zone"
assert_contains "$payload" "dataset=imagenet	2012	" "... and the admitted dataset with the policy's revision"
assert_contains "$payload" "audit_log=$audit_log" "... and the controller's audit log"
# Its head, once job_submit has written one (it appends off slurmctld's RPC path):
it_wait_for 30 "the controller's audit log has a sealed head" test -s "$audit_log.head"
assert_rc 0 "a later step" -- srun -p cpu-ae -N1 -n1 bash -c 'sed -n "s/^payload //p" "$SAKER_ATTESTATION" | base64 -d'
head=$(sed -n 's/^audit_head=//p' <<<"$IT_OUT")
assert_rc 0 "states a head ($head) that is a record of that log" -- \
  grep -q "^{\"id\":${head%%:*},.*\"hash\":\"${head#*:}\"}" "$audit_log"

# --- the job's datasets come from what job_submit admitted, not from the step's flags.
assert_rc 0 "a step declaring another dataset on srun inside an allocation" -- \
  salloc -p cpu-ae --dataset=imagenet@2012 -N1 srun --dataset=imagenet@2011 bash -c 'base64 -d <<<"$(sed -n "s/^payload //p" "$SAKER_ATTESTATION")"'
assert_contains "$IT_OUT" "dataset=imagenet	2012" "the attestation names the admitted dataset"
assert_not_contains "$IT_OUT" "imagenet	2011" "and not what the step declared by flag"

# --- attacks from inside the job (the job's user).
assert_rc 0 "the task tries to rewrite, replace and list its attestation" -- \
  srun -p cpu-ae -N1 -n1 bash -c 'echo x >>"$SAKER_ATTESTATION" && echo WROTE; mv "$SAKER_ATTESTATION" /tmp/x 2>/dev/null && echo MOVED;
    echo x >"$(dirname "$SAKER_ATTESTATION")/job-1.0.att" 2>/dev/null && echo PLANTED; ls "$(dirname "$SAKER_ATTESTATION")" >/dev/null 2>&1 && echo LISTED;
    stat -c "%U %a" "$SAKER_ATTESTATION"; true'
assert_not_contains "$IT_OUT" "WROTE" "the task cannot write its attestation"
assert_not_contains "$IT_OUT" "MOVED" "... nor move it away"
assert_not_contains "$IT_OUT" "PLANTED" "... nor plant another in the directory"
assert_not_contains "$IT_OUT" "LISTED" "... nor list other jobs' attestations"
assert_contains "$IT_OUT" "root 440" "it is root's, mode 0440"

# --- checkpoints carry it: a run, its resume, and a fine-tune in another job.
ckdir=$work/run1
job1=$(sbatch --parsable -p cpu-ae --dataset=imagenet@2012 -o "$IT_PREFIX/prov-%j.out" \
  --wrap "srun $WRITER $ckdir 10 --lineage extra@1 && srun $WRITER $ckdir 20")
assert_eq COMPLETED "$(it_job_wait "$job1" 60)" "job $job1 saves two checkpoints"
job2=$(sbatch --parsable -p cpu-ae --dataset=imagenet@2012 -o "$IT_PREFIX/prov-%j.out" --wrap "srun $WRITER $ckdir 30 --resume")
assert_eq COMPLETED "$(it_job_wait "$job2" 60)" "job $job2 resumes from the newest and saves"
job3=$(sbatch --parsable -p cpu-ae --dataset=imagenet@2012 -o "$IT_PREFIX/prov-%j.out" \
  --wrap "srun $WRITER $work/finetune 1 --from $ckdir/ckpt-000000000020.h5")
assert_eq COMPLETED "$(it_job_wait "$job3" 60)" "job $job3 fine-tunes from job $job1's checkpoint"
c10=$ckdir/ckpt-000000000010.h5 c20=$ckdir/ckpt-000000000020.h5 c30=$ckdir/ckpt-000000000030.h5
ft=$work/finetune/ckpt-000000000001.h5

assert_rc 0 "saker-ckpt provenance prints the statement" -- "$CKPT" provenance "$c10"
st=$IT_OUT
assert_rc 0 "it is JSON" -- python3 -c 'import json,sys; json.loads(sys.argv[1])' "$st"
assert_contains "$st" '"_type":"https://in-toto.io/Statement/v1"' "an in-toto Statement v1"
assert_contains "$st" '"predicateType":"https://slsa.dev/provenance/v1"' "with a SLSA Provenance v1 predicate"
assert_contains "$st" "\"sha256\":\"$(sha256sum "$c10" | cut -d' ' -f1)\"" "the subject is the checkpoint's SHA-256"
assert_contains "$st" "\"jobId\":\"$job1\"" "the attested job"
assert_not_contains "$st" "arrayJobId" "not an array task"
assert_contains "$st" '"name":"dataset:imagenet@2012","uri":"saker-dataset:imagenet@2012","annotations":{"enforced":true' \
  "the enforced dataset"
assert_contains "$st" '"name":"dataset:extra@1","uri":"saker-dataset:extra@1","annotations":{"enforced":false' \
  "the --lineage dataset, apart"
assert_contains "$st" "\"name\":\"code:$WRITER\"" "the code"
assert_rc 0 "the resume names its parent" -- "$CKPT" provenance "$c30"
assert_contains "$IT_OUT" "\"sha256\":\"$(sha256sum "$c20" | cut -d' ' -f1)\"},\"annotations\":{\"runId\"" "by the digest of step 20"
assert_contains "$IT_OUT" "\"jobId\":\"$job2\"" "and its own job"

# --- a 4-trial sweep (saker-sweep, one job array) warm-started from a base checkpoint that
# was trained on pretrain@1 (by flag): ASHA with rungs of 1 and 2 steps, the best half goes
# on. The trials' program loads nothing (a stand-in for one that reads only the weights):
# what they descend from is what saker-sweep states in SAKER_CKPT_PARENTS, its own (the
# base, exported for submit) and, for a promoted trial's next rung, its rung-0 checkpoint.
# Traced both ways: saker-ckpt find from the dataset down to every trial, and
# provenance --verify from each trial up to the base.
SWEEP=$SAKER_BUILDDIR/sweep/saker-sweep/saker-sweep
jb=$(sbatch --parsable -p cpu-ae --dataset=imagenet@2012 -o "$IT_PREFIX/prov-%j.out" \
  --wrap "srun $WRITER $work/base 5 --lineage pretrain@1")
assert_eq COMPLETED "$(it_job_wait "$jb" 60)" "job $jb saves the sweep's base"
base=$(sha256sum "$work/base/ckpt-000000000005.h5" | cut -d' ' -f1)
mkdir -p "$work/sw"
echo "$WRITER \"\$1\" \"\$2\" >/dev/null && echo \"step=\$2 loss=\$3\" >>\"\$4\"" >"$work/sw/trial.sh"
printf '%s\n' "version: 1" "name: prov" "checkpoints: $work/sweepck" \
  "command: [bash, $work/sw/trial.sh, '{ckpt_dir}', '{budget}', '{q}', '{metrics}']" \
  "space: {q: {grid: [4, 1, 3, 2]}}" "metric: {name: loss}" "budget: {steps: 2}" \
  "early_stopping: {rule: asha, min_steps: 1, reduction: 2}" \
  "slurm: {concurrency: 4, datasets: [imagenet@2012], options: [-p, cpu-ae, -n, '1']}" >"$work/sw/prov.yaml"
chown -R $ALICE: "$work/sw"
cd "$work/sw" || it_fail "cannot enter $work/sw"
assert_rc 0 "saker-sweep submit, warm-started from the base" -- it_job env SAKER_CKPT_PARENTS=sha256:$base "$SWEEP" submit prov.yaml
cd - >/dev/null || true
sweep=$(tail -n 1 "$work/sw/prov.sweep/jobs" | cut -d' ' -f1)
it_wait_for 120 "the 4 trials of sweep $sweep end" bash -c "[[ -z \$(squeue -h -r -j $sweep 2>/dev/null) ]]"
rung0=() rung1=()
for t in 0 1 2 3; do
  rung0+=("$work/sweepck/prov/trial-$t/ckpt-000000000001.h5")
  [[ -e $work/sweepck/prov/trial-$t/ckpt-000000000002.h5 ]] && rung1+=("$work/sweepck/prov/trial-$t/ckpt-000000000002.h5")
done
assert_eq "4 2" "$(ls "${rung0[@]}" | wc -l) $(( ${#rung1[@]} >= 2 ? 2 : ${#rung1[@]} ))" \
  "4 trials checkpointed rung 0, and at least the best 2 went on to rung 1 (${#rung1[@]} did)"
for c in "${rung0[@]}"; do
  t=$(basename "$(dirname "$c")")
  assert_rc 0 "$t rung 0: its chain verifies back to the base" -- \
    "$CKPT" provenance --verify --pubkey "$IT_TMP/site.pub" --search "$work/base" --search "$(dirname "$c")" "$c"
  assert_contains "$IT_OUT" "verified: 2 checkpoint(s)" "$t rung 0 and the base"
  assert_rc 0 "$t's statement" -- "$CKPT" provenance "$c"
  assert_contains "$IT_OUT" "\"arrayJobId\":\"$sweep\",\"arrayTaskId\":\"${t#trial-}\"" "names array task ${sweep}_${t#trial-}"
done
for c in "${rung1[@]}"; do
  t=$(basename "$(dirname "$c")")
  assert_rc 0 "$t rung 1 (promoted): its chain verifies through rung 0 to the base" -- \
    "$CKPT" provenance --verify --pubkey "$IT_TMP/site.pub" --search "$work/base" --search "$(dirname "$c")" "$c"
  assert_contains "$IT_OUT" "verified: 3 checkpoint(s)" "$t rung 1, its rung 0 and the base"
  assert_rc 0 "$t rung 1's statement" -- "$CKPT" provenance "$c"
  assert_contains "$IT_OUT" "\"sha256\":\"$(sha256sum "$(dirname "$c")/ckpt-000000000001.h5" | cut -d' ' -f1)\"},\"annotations\"" \
    "names its rung-0 checkpoint as parent"
done
assert_rc 0 "saker-ckpt find --dataset pretrain@1 (the base's, by flag)" -- "$CKPT" find --json --dataset pretrain@1 "$work/base" "$work/sweepck"
found=$(/usr/bin/python3 -c 'import json,sys; print(" ".join(sorted("%s:%d" % (f["file"], f["generation"]) for f in json.loads(sys.argv[1])["checkpoints"])))' "$IT_OUT")
want=$( (echo "$work/base/ckpt-000000000005.h5:0"; for c in "${rung0[@]}"; do echo "$c:1"; done; for c in "${rung1[@]}"; do echo "$c:2"; done) | sort | tr '\n' ' ')
assert_eq "${want% }" "$found" "finds the base, the 4 trials through the base and the promoted rungs through their rung 0"
assert_rc 0 "saker-ckpt find --dataset pretrain@2" -- "$CKPT" find --json --dataset pretrain@2 "$work/base" "$work/sweepck"
assert_eq 0 "$(/usr/bin/python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["checkpoints"]))' "$IT_OUT")" "and nothing of another version"

assert_rc 0 "saker-ckpt show summarises the provenance" -- "$CKPT" show "$c30"
assert_contains "$IT_OUT" "attestation:    job $job2 step 0, enforced datasets imagenet@2012" "the attested job and datasets"
assert_contains "$IT_OUT" "parent:         sha256 $(sha256sum "$c20" | cut -d' ' -f1)" "and the parent"

# --- saker.torch.checkpoint's path: the same library through the Python extension; the code
# is the script python runs, not the interpreter.
PYEXT=$SAKER_BUILDDIR/python/saker/.libs
if [[ -e $PYEXT/_ckpt.so ]]; then
  script=$work/train_step.py
  cat >"$script" <<PY
import ctypes, sys
sys.path.insert(0, "$PYEXT")
import _ckpt
w = (ctypes.c_float * 16)()
ck = _ckpt.Checkpointer(sys.argv[1], 0, 1)
ck.save(1, 0, '{"lr": 0.1}', [("w", "float32", [16], ctypes.addressof(w), 64, False)])
PY
  chown $ALICE: "$script"
  assert_rc 0 "a Python job saves through saker._ckpt" -- \
    srun -p cpu-ae --dataset=imagenet@2012 -N1 -n1 /usr/bin/python3 "$script" "$work/py"
  assert_rc 0 "its checkpoint verifies" -- "$CKPT" provenance --verify --pubkey "$IT_TMP/site.pub" "$work/py/ckpt-000000000001.h5"
  assert_rc 0 "its statement" -- "$CKPT" provenance "$work/py/ckpt-000000000001.h5"
  assert_contains "$IT_OUT" "\"name\":\"code:$script\",\"uri\":\"file://$script\",\"digest\":{\"sha256\":\"$(sha256sum "$script" | cut -d' ' -f1)\"}" \
    "names the script and its SHA-256 as the code"
  assert_contains "$IT_OUT" '"interpreter":"/usr/bin/python3' "and python as its interpreter"
else
  it_log "saker._ckpt not built ($PYEXT/_ckpt.so): the Python path is not checked here"
fi

for c in "$c10" "$c20" "$c30" "$ft"; do
  assert_rc 0 "$(basename "$(dirname "$c")")/$(basename "$c") verifies against the site key" -- \
    "$CKPT" provenance --verify --pubkey "$IT_TMP/site.pub" "$c"
done
assert_rc 0 "the fine-tune's chain verifies through run1" -- \
  "$CKPT" provenance --verify --pubkey "$IT_TMP/site.pub" --search "$ckdir" "$ft"
assert_contains "$IT_OUT" "verified: 2 checkpoint(s)" "both the fine-tune and its parent"
mkdir -p "$IT_TMP/shared" && cp "$ft" "$IT_TMP/shared/" && chmod 0644 "$IT_TMP/shared/$(basename "$ft")"
assert_rc 0 "anyone given a copy verifies it: the check needs no secret" -- \
  setpriv --reuid=$MALLORY --regid=$MALLORY --clear-groups "$CKPT" provenance --verify --pubkey "$IT_TMP/site.pub" "$IT_TMP/shared/$(basename "$ft")"

# --- the job's user forges, alters and replays.
forged=$work/forged.att
assert_rc 0 "alice copies job $job1's attestation" -- \
  srun -p cpu-ae --dataset=imagenet@2012 -N1 -n1 bash -c "cp \$SAKER_ATTESTATION $work/replay.att"
assert_rc 0 "and replays it in another job" -- \
  srun -p cpu-ae -N1 -n1 env SAKER_ATTESTATION=$work/replay.att "$WRITER" "$work/replay" 1
assert_rc 1 "--verify refuses the replayed attestation" -- \
  "$CKPT" provenance --verify --pubkey "$IT_TMP/site.pub" "$work/replay/ckpt-000000000001.h5"
assert_contains "$IT_OUT" "it belongs to another job" "naming why"

# A forgery: the user edits the attestation's zone and datasets and signs with a key of their own.
python3 - "$work/replay.att" "$forged" <<'PY'
import base64, sys
lines = open(sys.argv[1]).read().splitlines()
p = base64.b64decode(lines[3].split(' ', 1)[1]).decode().replace('zone=ae', 'zone=eu')
lines[3] = 'payload ' + base64.b64encode(p.encode()).decode()
open(sys.argv[2], 'w').write('\n'.join(lines) + '\n')
PY
chown $ALICE: "$forged"
assert_rc 0 "a checkpoint carrying the edited attestation is written" -- \
  srun -p cpu-ae -N1 -n1 env SAKER_ATTESTATION="$forged" "$WRITER" "$work/forged" 1
assert_rc 1 "--verify refuses the edited attestation" -- \
  "$CKPT" provenance --verify --pubkey "$IT_TMP/site.pub" "$work/forged/ckpt-000000000001.h5"
assert_contains "$IT_OUT" "signature does not match" "its signature no longer matches"

# --- a second user cannot read alice's attestation.
job4=$(sbatch --parsable -p cpu-ae --dataset=imagenet@2012 -o "$IT_PREFIX/prov-%j.out" \
  --wrap 'echo "path=$SAKER_ATTESTATION"; sleep 30')
it_wait_for 30 "job $job4 runs" bash -c "[[ \$(scontrol show job -o $job4) == *JobState=RUNNING* ]] && grep -q path= $IT_PREFIX/prov-$job4.out"
victim=$(sed -n 's/^path=//p' "$IT_PREFIX/prov-$job4.out")
assert_rc 1 "saker-mallory cannot read it" -- setpriv --reuid=$MALLORY --regid=$MALLORY --clear-groups cat "$victim"
scancel "$job4"

# --- a site key others could read is refused, named in slurmd's log; the step still runs.
chmod 0644 "$keys/site.key"
assert_rc 0 "a step with a world-readable site key runs" -- srun -p cpu-ae -N1 -n1 bash -c 'echo "att=${SAKER_ATTESTATION:-none}"'
assert_contains "$IT_OUT" "att=none" "unattested"
it_wait_for 10 "slurmd's log names the key and the fix" grep -q "attestation key $keys/site.key.*chmod 600" "$IT_PREFIX"/log/slurmd-saker*.log
chmod 0600 "$keys/site.key"
it_finish
