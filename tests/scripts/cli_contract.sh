#!/usr/bin/env bash
# Issue 31's error contract (saker(7), COMMAND LINE), run against the built tools: every
# newcomer mistake by class, for every tool on the shared front end (common/cli.hpp). Each
# case asserts the exit code of saker(7) and the parts of the message: "saker: error:", the
# tool and command, the thing named, and "(fix: ...)". No Slurm, no root; about a second.
set -uo pipefail
build=${SAKER_BUILDDIR:?run through make check}
src=${SAKER_SRCDIR:?run through make check}
tmp=$(mktemp -d /tmp/saker-cli-contract.XXXXXX)
trap 'rm -rf -- "$tmp"' EXIT
pass=0 fail=0

# expect RC MSG NEEDLE... -- CMD...: CMD exits RC and its output holds every NEEDLE.
expect() {
  local rc=$1 msg=$2 needles=() out got n missing=""
  shift 2
  while [[ $1 != -- ]]; do needles+=("$1"); shift; done
  shift
  out=$("$@" 2>&1 </dev/null) && got=0 || got=$?
  for n in "${needles[@]}"; do [[ $out == *"$n"* ]] || missing+=" '$n'"; done
  if [[ $got == "$rc" && -z $missing ]]; then
    echo "ok - $msg"; pass=$((pass + 1))
  else
    echo "not ok - $msg (exit $got, expected $rc;${missing:+ missing:$missing})"
    printf '%s\n' "$out" | head -n 8 | sed 's/^/#   | /'
    fail=$((fail + 1))
  fi
}
# A usage error: exit 2, the contract's prefix, the needles, a fix, and the usage line.
usage_error() {
  local msg=$1; shift
  local needles=()
  while [[ $1 != -- ]]; do needles+=("$1"); shift; done
  shift
  expect 2 "$msg" "saker: error: " "${needles[@]}" "(fix: " -- "$@"
}

policy=$build/policies/saker-policy/saker-policy
sweep=$build/sweep/saker-sweep/saker-sweep
stats=$build/telemetry/saker-stats/saker-stats
topo=$build/plugins/affinity/saker-topo/saker-topo
ckpt=$build/ckpt/saker-ckpt/saker-ckpt
train=$build/launcher/saker-train/saker-train
run=$build/launcher/saker-run/saker-run
xml=$src/tests/data/topo-1s-4gpu.xml
pfile=$src/tests/data/policy/two_zones.yaml

# --- every tool: the top level -----------------------------------------------------------------
for t in "$policy" "$sweep" "$topo" "$ckpt"; do
  name=${t##*/}
  expect 0 "$name --help lists its commands" "Usage:" "$name COMMAND --help" -- "$t" --help
  expect 0 "$name --version names Saker" "$name (Saker)" -- "$t" --version
  usage_error "$name with no command says so in one line" "$name: no command given" "the commands are" -- "$t"
  usage_error "$name --quik is an unknown option, in one line" "$name: unknown option --quik" -- "$t" --quik
  usage_error "$name --verison suggests --version" "did you mean --version?" -- "$t" --verison
  out=$("$t" --quik 2>&1)
  if [[ $(printf '%s\n' "$out" | wc -l) -le 1 ]]; then echo "ok - $name --quik prints one line"; pass=$((pass + 1))
  else echo "not ok - $name --quik prints $(printf '%s\n' "$out" | wc -l) lines"; fail=$((fail + 1)); fi
done

# --- saker-policy --------------------------------------------------------------------------------
usage_error "unknown command with a guess" "unknown command 'chekc'; did you mean 'check'?" -- "$policy" chekc "$pfile"
usage_error "unknown command, even with --help after it" "unknown command 'chekc'" -- "$policy" chekc --help
usage_error "a two-word command with a typo" "unknown command 'audit verfy'; did you mean 'audit verify'?" -- \
  "$policy" audit verfy x
usage_error "half a two-word command" "'audit' needs one more word" -- "$policy" audit
expect 0 "check --help shows its options" "Usage: saker-policy check POLICY" "--max-bytes N" -- "$policy" check --help
expect 0 "audit show --help shows its options" "--last N" -- "$policy" audit show --help
usage_error "an abbreviated option is named, not guessed" \
  "unknown option --max-byte (options are never abbreviated); did you mean --max-bytes?" -- \
  "$policy" check "$pfile" --max-byte 5
usage_error "an option of another command" "unknown option --last" "(an option of saker-policy audit show)" -- \
  "$policy" check "$pfile" --last 3
usage_error "a missing value" "--max-bytes needs a value" -- "$policy" check "$pfile" --max-bytes
usage_error "a value that is not a number" "--max-bytes is 'lots': it must be a whole number" -- \
  "$policy" check "$pfile" --max-bytes lots
usage_error "a required option missing" "saker-policy explain: --user is missing" -- "$policy" explain --policy "$pfile"
usage_error "a missing file argument" "saker-policy check: no POLICY file given" -- "$policy" check
usage_error "two files where one goes" "unexpected argument 'b.yaml'" -- "$policy" check a.yaml b.yaml
usage_error "a bad dataset names the syntax" "--dataset: bad dataset 'x@@'" -- \
  "$policy" explain --policy "$pfile" --user alice --dataset x@@
expect 3 "a missing policy file is exit 3" "saker: error: saker-policy check: cannot read the policy file" \
  "No such file" "(fix: " -- "$policy" check "$tmp/nosuch.yaml"
mkdir -p "$tmp/adir"
expect 3 "a directory where the policy file goes" "saker: error: saker-policy check:" "it is a directory" -- \
  "$policy" check "$tmp/adir"
expect 3 "a directory where the audit log goes" "saker: error: saker-policy audit verify:" "it is a directory" -- \
  "$policy" audit verify "$tmp/adir"
expect 3 "a missing audit log is exit 3" "cannot read the audit log $tmp/nosuch.log" "(fix: " -- \
  "$policy" audit show "$tmp/nosuch.log"
expect 0 "explain says route, not modify" "decision: route" -- \
  "$policy" explain --policy "$pfile" --user alice --account medical --dataset patients@v3 --partition gpu-ae,gpu-eu
expect 0 "an unknown partition gets a note, not a bare allow" "decision: allow" \
  "note: partition nosuch is not in the policy" -- "$policy" explain --policy "$pfile" --user alice --partition nosuch

# lineage: a hash-chained log written as job_submit writes one (policies/audit.hpp's format).
/usr/bin/python3 - "$tmp/ctl.log" <<'PY'
import hashlib, sys
prev, lines = "0" * 64, []
for i, (event, job, ds, decision) in enumerate([("submit", None, ["patients@v3"], "allow"),
                                                ("submit", None, ["patients@v3"], "deny"),
                                                ("launch", "12", ["patients@v3"], "allow")], 1):
    jid = "null" if job is None else '"%s"' % job
    dss = ",".join('"%s"' % d for d in ds)
    body = ('{"id":%d,"time":"2026-11-27T10:00:0%dZ","event":"%s","uid":1001,"user":"alice","account":"medical",'
            '"job_id":%s,"partition":"gpu-ae","nodes":null,"datasets":[%s],"decision":"%s","reasons":[],'
            '"policy_revision":"r","prev":"%s"' % (i, i, event, jid, dss, decision, prev))
    prev = hashlib.sha256((body + "}").encode()).hexdigest()
    lines.append(body + ',"hash":"%s"}\n' % prev)
open(sys.argv[1], "w").write("".join(lines))
PY
expect 0 "lineage lists the admitted jobs, not the denied one" "JOB" "ctl.log:1" "ctl.log:3" -- \
  "$policy" lineage --dataset patients@v3 --no-head "$tmp/ctl.log"
out=$("$policy" lineage --dataset patients@v3 --no-head "$tmp/ctl.log" 2>&1)
if [[ $out == *"ctl.log:1"* && $out != *"ctl.log:2"* ]]; then echo "ok - lineage leaves the denied job out"; pass=$((pass + 1))
else echo "not ok - lineage lists a denied job"; fail=$((fail + 1)); fi
expect 0 "lineage --json" '"dataset":"patients@v3"' '"job_id":"12"' -- \
  "$policy" lineage --dataset patients@v3 --no-head --json "$tmp/ctl.log"
usage_error "lineage without --dataset" "saker-policy lineage: --dataset is missing" -- "$policy" lineage "$tmp/ctl.log"
usage_error "lineage of two datasets" "--dataset names 2 datasets" -- "$policy" lineage --dataset a,b "$tmp/ctl.log"
expect 1 "lineage refuses a log without its sealed head" "saker: error: saker-policy lineage: the audit log" \
  "does not verify" "(fix: " -- "$policy" lineage --dataset patients@v3 "$tmp/ctl.log"
sed 's/"user":"alice"/"user":"mallory"/' "$tmp/ctl.log" >"$tmp/edited.log"
expect 1 "lineage refuses an edited log" "does not verify" -- \
  "$policy" lineage --dataset patients@v3 --no-head "$tmp/edited.log"

# --- saker-sweep -----------------------------------------------------------------------------------
usage_error "sweep: unknown command" "unknown command 'stauts'; did you mean 'status'?" -- "$sweep" stauts x.yaml
usage_error "sweep: an option of the wrong kind" "unknown option --dryrun; did you mean --dry-run?" -- \
  "$sweep" run x.yaml --dryrun
usage_error "sweep: a missing value" "--svg needs a value" -- "$sweep" report x.yaml --svg
usage_error "sweep: no sweep given" "saker-sweep status: no sweep given" -- "$sweep" status
expect 3 "sweep: a missing sweep file" "saker: error: saker-sweep" "does not exist" -- "$sweep" status "$tmp/nosuch.yaml"

# --- saker-stats (one command, no subcommands) -------------------------------------------------
expect 0 "stats --help" "Usage: saker-stats [--dir DIR]" -- "$stats" --help
expect 0 "stats --version" "saker-stats (Saker)" -- "$stats" --version
usage_error "stats: no job id" "saker-stats: no JOBID given" -- "$stats"
usage_error "stats: a typo in an option" "unknown option --jsn; did you mean --json?" -- "$stats" --jsn 12
usage_error "stats: a missing value" "--svg needs a value" -- "$stats" 12 --svg
usage_error "stats: two job ids" "unexpected argument '13'" -- "$stats" 12 13
usage_error "stats: not a job id" "'../etc' is not a Slurm job id" -- "$stats" --dir "$tmp" ../etc
expect 3 "stats: no record for the job" "saker: error: saker-stats: cannot read $tmp/12.telemetry" "(fix: " -- \
  "$stats" --dir "$tmp" 12

# --- saker-topo --------------------------------------------------------------------------------------
usage_error "topo: unknown command" "unknown command 'shwo'; did you mean 'show'?" -- "$topo" shwo
usage_error "topo: plan without its required option" "saker-topo plan: --ntasks-per-node is missing" -- \
  "$topo" plan --topology "$xml"
usage_error "topo: zero ranks" "--ntasks-per-node is '0': it must be a whole number from 1" -- \
  "$topo" plan --topology "$xml" --ntasks-per-node 0
usage_error "topo: an abbreviated option" "unknown option --ntasks (options are never abbreviated); did you mean --ntasks-per-node?" -- \
  "$topo" plan --topology "$xml" --ntasks 2
usage_error "topo: a bad --format" "--format is 'json': it is table or env" -- \
  "$topo" plan --topology "$xml" --ntasks-per-node 1 --format json
usage_error "topo: check-gres without its file" "saker-topo check-gres: no GRES.CONF file given" -- "$topo" check-gres
expect 3 "topo: a missing gres.conf" "saker: error: saker-topo check-gres: cannot read $tmp/nosuch" "(fix: " -- \
  "$topo" check-gres "$tmp/nosuch" --topology "$xml"
expect 3 "topo: a missing topology file" "saker: error: saker-topo: cannot read the topology file" "(fix: " -- \
  "$topo" show --topology "$tmp/nosuch.xml"
expect 0 "topo: plan runs" "CUDA_VISIBLE_DEVICES" -- "$topo" plan --topology "$xml" --ntasks-per-node 2 --gpus 0-3

# --- saker-ckpt (issue 31 §5, §6) -------------------------------------------------------------------
usage_error "ckpt: 'list' is not a command, even with --help" "unknown command 'list'; did you mean 'ls'?" -- \
  "$ckpt" list --help
expect 3 "ckpt: show of a directory says so" "saker: error: saker-ckpt show: $tmp/adir is a directory" \
  "saker-ckpt ls $tmp/adir lists its checkpoints" -- "$ckpt" show "$tmp/adir"
expect 3 "ckpt: show of a missing file says so" "saker-ckpt show: $tmp/nosuch.h5 does not exist" "(fix: " -- \
  "$ckpt" show "$tmp/nosuch.h5"
out=$("$ckpt" show "$tmp/adir" 2>&1; "$ckpt" show "$tmp/nosuch.h5" 2>&1)
if [[ $out != *damaged* ]]; then echo "ok - ckpt: neither calls the checkpoint damaged"; pass=$((pass + 1))
else echo "not ok - ckpt: a missing file or a directory is called damaged"; fail=$((fail + 1)); fi
printf 'not a checkpoint' >"$tmp/ckpt-000000000001.h5"
expect 1 "ckpt: show of a file that is not a checkpoint is damage, exit 1" "saker: error: saker-ckpt show:" -- \
  "$ckpt" show "$tmp/ckpt-000000000001.h5"
usage_error "ckpt: prune without --keep" "saker-ckpt prune: --keep is missing" -- "$ckpt" prune "$tmp/adir"
usage_error "ckpt: prune --keep 0" "--keep is '0': it must be a whole number from 1" -- "$ckpt" prune "$tmp/adir" --keep 0
usage_error "ckpt: --pubkey without --verify" "--pubkey and --search go with --verify" -- \
  "$ckpt" provenance "$tmp/x.h5" --pubkey k
usage_error "ckpt: an option of another command" "unknown option --quick" "(an option of saker-ckpt ls)" -- \
  "$ckpt" verify "$tmp/adir" --quick
expect 3 "ckpt: provenance of a missing file says so, not 'damaged'" "$tmp/nosuch.h5 does not exist" \
  "saker-ckpt ls DIR lists" -- "$ckpt" provenance "$tmp/nosuch.h5"
usage_error "ckpt: find without --dataset" "saker-ckpt find: --dataset is missing" -- "$ckpt" find "$tmp/adir"
expect 0 "ckpt: find in a directory without checkpoints" "0 of 0 checkpoint(s) derived from patients@v3" -- \
  "$ckpt" find --dataset patients@v3 "$tmp/adir"
expect 3 "ckpt: find in a directory that is not there" "saker-ckpt find: $tmp/nosuch is not a directory" "(fix: " -- \
  "$ckpt" find --dataset patients "$tmp/nosuch"

# --- saker-cluster (a shell script: the same message format and guesses) ---------------------------
cluster=$src/scripts/saker-cluster
usage_error "cluster: unknown command with a guess" "saker-cluster: unknown command 'stauts'; did you mean 'status'?" -- \
  "$cluster" stauts
usage_error "cluster: a typo in an option" "saker-cluster: unknown option for 'up': --nodez; did you mean --nodes?" -- \
  "$cluster" up --nodez 3
out=$("$cluster" up --nodez 3 2>&1)
if [[ $(printf '%s\n' "$out" | wc -l) -eq 1 ]]; then echo "ok - cluster: the error is one line"; pass=$((pass + 1))
else echo "not ok - cluster: the error takes $(printf '%s\n' "$out" | wc -l) lines"; fail=$((fail + 1)); fi

# --- a directory where a file goes, for the tools that open one (issue 31, Tests) ----------------
expect 3 "topo: a directory as gres.conf is not an empty gres.conf that agrees" \
  "saker: error: saker-topo check-gres: $tmp/adir is a directory" "(fix: name the node's gres.conf in it" -- \
  "$topo" check-gres "$tmp/adir" --topology "$xml"
expect 3 "ckpt: a directory as --policy" "saker: error: saker-ckpt verify: $tmp/adir: it is a directory, not the policy file" -- \
  "$ckpt" verify --policy "$tmp/adir" "$tmp/adir"
expect 3 "train: a directory as --data" "saker: error: saker-train: cannot use the data file $tmp/adir: it is a directory" \
  "(fix: " -- "$train" --data "$tmp/adir"
cp "$src/examples/sweep/lr-width.yaml" "$tmp/lw.yaml"
usage_error "sweep: a directory as --svg" "saker-sweep report: --svg $tmp/adir is a directory" -- \
  "$sweep" report "$tmp/lw.yaml" --svg "$tmp/adir"

# --- saker-train and saker-run (issue 31 §6) ---------------------------------------------------------
usage_error "train: a typo in an option" "unknown option --dat (options are never abbreviated); did you mean --data?" -- \
  "$train" --dat x.h5
usage_error "train: a typo in the command" "unknown command 'make-dta'; did you mean 'make-data'?" -- "$train" make-dta
usage_error "train: --batch 0" "--batch is '0': it must be a whole number from 1" -- "$train" --data x.h5 --batch 0
usage_error "train: make-data without --out" "saker-train make-data: --out is missing" -- "$train" make-data
expect 3 "train: a missing data file is exit 3, named" "saker: error: saker-train: cannot use the data file $tmp/nosuch.h5" \
  "(fix: " -- "$train" --data "$tmp/nosuch.h5"
expect 0 "train: --help lists the commands and train's options" "saker-train make-data --out FILE" "--logical-ranks L" -- \
  "$train" --help
usage_error "run: --max-restart is named, not guessed" \
  "unknown option --max-restart (options are never abbreviated); did you mean --max-restarts?" -- \
  "$run" --local -n 1 --max-restart 2 -- true
usage_error "run: -n 0 says what is valid" "pass -n 1 or more" -- "$run" --local -n 0 -- true
usage_error "run: --loacl suggests --local" "did you mean --local?" -- "$run" --loacl -n 1 -- true
# saker-run on the shared front end: every class, each with the usage line after it.
expect 0 "run: --help lists -n, the options and the exit codes" "Usage: saker-run [OPTIONS] [--] PROGRAM" \
  "-n, --ntasks N" "--srun-arg ARG" "preempted or interrupted" -- "$run" --help
expect 0 "run: --version names Saker" "saker-run (Saker)" -- "$run" --version
usage_error "run: -n x is not a number" "saker-run: -n is 'x': it must be a whole number, 1 or more" \
  "usage: saker-run [OPTIONS]" -- "$run" --local -n x true
usage_error "run: a missing value" "saker-run: --ckpt-dir needs a value: nothing follows it" -- "$run" --local --ckpt-dir
usage_error "run: a value that looks like an option" "--srun-arg needs a value" "write --srun-arg=--cpu-bind=cores" -- \
  "$run" --srun-arg --cpu-bind=cores true
usage_error "run: a negative --grace" "saker-run: --grace is '-1': it must be a number, 0 or more" -- \
  "$run" --local --grace -1 true
usage_error "run: a port out of range" "--master-port is '70000': it must be a whole number from 0 to 65535" -- \
  "$run" --local --master-port 70000 true
usage_error "run: a repeated option" "saker-run: --local is given twice" -- "$run" --local --local true
usage_error "run: no program" "saker-run: no PROGRAM given" -- "$run" --local -n 2
usage_error "run: -n without --local" "saker-run: -n is only for --local" -- "$run" -n 2 true
usage_error "run: an unknown one-letter option" "saker-run: unknown option -x" -- "$run" --local -x true
usage_error "run: an internal option is never suggested" "unknown option --exec-rnk" -- "$run" --exec-rnk true
out=$("$run" --exec-rnk true 2>&1)
if [[ $out != *exec-rank* ]]; then echo "ok - run: --exec-rank stays hidden"; pass=$((pass + 1))
else echo "not ok - run: --exec-rank is suggested"; fail=$((fail + 1)); fi
expect 0 "run: options end at PROGRAM" "--epochs 3 -n 7" -- "$run" --local -n 1 /bin/echo --epochs 3 -n 7
expect 127 "run: a missing program is named, exit 127" "saker: error: saker-run: cannot execute $tmp/nosuch: it does not exist" \
  "(fix: " -- "$run" --local "$tmp/nosuch"
expect 127 "run: a directory as the program" "cannot execute $tmp/adir: it is a directory" -- "$run" --local "$tmp/adir"
expect 127 "run: a program not in PATH" "cannot execute nosuchprog: no executable file of that name in PATH" -- \
  "$run" --local nosuchprog
expect 3 "run: outside Slurm without --local" "saker: error: saker-run: saker-run is not inside a Slurm job" \
  "(fix: submit it in an sbatch script, or run saker-run --local -n N)" -- env -u SLURM_JOB_ID "$run" true

# --- SIGINT: Ctrl-C on a long-running command (issue 31 §4) ------------------------------------
# A terminal's Ctrl-C is SIGINT to the whole foreground process group: the tool and everything it
# started. Each command runs as a job of its own (set -m: its own process group, SIGINT not
# ignored as it is for a script's background commands) and gets SIGINT once it shows progress.
# Then: exit 75 (saker(7): stopped after saving what can be resumed), the emergency checkpoint
# on disk, and a message that says it was interrupted and how to resume.
ctrl_c() {  # ctrl_c READY LOG CMD...: sets $got to CMD's exit code
  local ready=$1 log=$2 pid deadline=$((SECONDS + 120))
  shift 2
  set -m
  "$@" >"$log" 2>&1 </dev/null &
  pid=$!
  set +m
  until [[ -s $ready ]] || ((SECONDS > deadline)) || ! kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  kill -INT -- "-$pid" 2>/dev/null
  deadline=$((SECONDS + 120))  # the emergency checkpoint takes well under a second here
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null
  wait "$pid" && got=0 || got=$?
  out=$(<"$log")
}
# check MSG CONDITION...: one assertion on $out, $got or the disk.
check() {
  local msg=$1; shift
  if "$@"; then echo "ok - $msg"; pass=$((pass + 1))
  else echo "not ok - $msg (exit $got)"; printf '%s\n' "$out" | tail -n 8 | sed 's/^/#   | /'; fail=$((fail + 1)); fi
}
has() { [[ $out == *"$1"* ]]; }
hasnt() { [[ $out != *"$1"* ]]; }
one_checkpoint() { [[ $("$ckpt" ls "$1" 2>/dev/null | grep -c ' ok') -ge 1 ]]; }

"$train" make-data --out "$tmp/train.h5" --samples 512 --features 8 --classes 2 >/dev/null
slow=(--data "$tmp/train.h5" --steps 1000000 --step-sleep-ms 20 --ckpt-every 0 --log-every 1)

# saker-train alone.
ctrl_c "$tmp/m-train" "$tmp/train.log" "$train" "${slow[@]}" --ckpt-dir "$tmp/c-train" --metrics-file "$tmp/m-train"
check "SIGINT: saker-train exits 75" test "$got" = 75
check "SIGINT: saker-train writes its emergency checkpoint and says how to resume" \
  has "emergency checkpoint of step"
check "SIGINT: saker-train's checkpoint is on disk and verifies" one_checkpoint "$tmp/c-train"

# saker-run --local -n 2: the group holds saker-run and both ranks.
ctrl_c "$tmp/m-run" "$tmp/run.log" "$run" --local -n 2 --grace 60 --ckpt-dir "$tmp/c-run" -- \
  "$train" "${slow[@]}" --metrics-file "$tmp/m-run"
check "SIGINT: saker-run --local exits 75" test "$got" = 75
check "SIGINT: the ranks write the emergency checkpoint" has "emergency checkpoint at step"
check "SIGINT: saker-run says the run was interrupted" has "interrupted (SIGINT"
check "SIGINT: ... and how to resume" has "run again to resume from its emergency checkpoint"
check "SIGINT: no rank is killed by it" hasnt "killed by SIGINT"
check "SIGINT: saker-run's checkpoint is on disk and verifies" one_checkpoint "$tmp/c-run"

# saker-sweep run: the trial that runs is left interrupted, with how to resume it.
mkdir -p "$tmp/sweep" && cd "$tmp/sweep" || exit 1
printf '%s\n' 'version: 1' 'name: ctrlc' \
  "command: $run --local -n 1 --ckpt-dir {ckpt_dir} -- $train --data $tmp/train.h5 --lr {lr} --steps {budget} --step-sleep-ms 20 --ckpt-every 0 --log-every 1 --metrics-file {metrics}" \
  'space: {lr: {choice: [0.01, 0.02]}}' 'search: {seed: 1, samples: 2}' 'metric: {name: eval_loss}' 'budget: {steps: 1000000}' >ctrlc.yaml
ctrl_c "$tmp/sweep/ctrlc.sweep/trials/0/metrics" "$tmp/sweep.log" "$sweep" run ctrlc.yaml
check "SIGINT: saker-sweep run exits 75" test "$got" = 75
check "SIGINT: saker-sweep says the trial is interrupted" has "trial 0 interrupted at rung 0"
check "SIGINT: ... and that running it again resumes it from its checkpoint" has "saker-sweep run ctrlc.yaml resumes it"
check "SIGINT: ... never that a job resumes it (there is none)" hasnt "when this job runs again"
check "SIGINT: no other trial starts" hasnt "trial 1 ("
check "SIGINT: the trial's lineage holds the emergency checkpoint" one_checkpoint "$tmp/sweep/ctrlc.sweep/ckpt/ctrlc/trial-0"
out=$("$sweep" status ctrlc.yaml 2>&1) && got=0 || got=$?
check "SIGINT: saker-sweep status shows the trial interrupted" has "interrupted"
check "SIGINT: ... and not running" hasnt "running"
# The file changed after its trials ran: run refuses it (exit 4, named), status says what it reads.
echo '# changed' >>ctrlc.yaml
expect 4 "sweep: a changed sweep file is refused, the message names tool and command" \
  "saker: error: saker-sweep run: the sweep file ctrlc.yaml changed since sweep ctrlc first ran from it" "(fix: " -- \
  "$sweep" run ctrlc.yaml
expect 0 "sweep: status of a changed file says it reads the file as it is now" \
  "saker-sweep: note: ctrlc.yaml changed since sweep ctrlc first ran from it" "saker-sweep status $tmp/sweep/ctrlc.sweep" -- \
  "$sweep" status ctrlc.yaml
cd - >/dev/null || exit 1

echo "# $pass passed, $fail failed"
[[ $fail -eq 0 ]]
