# shellcheck shell=bash
# tests/integration/lib.sh: helpers for Saker's integration tests against a real local Slurm.
#
# Source it from a test script:
#
#     . "$(dirname "$0")/lib.sh"
#     it_require_root                  # exit 77 (automake SKIP) unless root
#     it_cluster_up --nodes 3          # private cluster; torn down automatically at exit
#     assert_rc 0 "srun works" -- srun -N1 true
#     it_finish                        # "N passed, M failed"; exit 0 or 1
#
# Environment:
#   SAKER_SRCDIR    source tree (default: two levels above this file)
#   SAKER_BUILDDIR  build tree with the plugins (default: SAKER_SRCDIR); passed as --build-dir
#   SAKER_CLUSTER   the saker-cluster script (default: $SAKER_SRCDIR/scripts/saker-cluster)
#   SAKER_CLUSTER_SLURM  prefix of another Slurm to run instead of Debian's (saker-cluster --slurm;
#                   scripts/slurm-compat sets it): its bin/ and sbin/ come first on PATH, so the
#                   tests' srun, sbatch, scontrol ... are that release's, like the daemons
#   IT_KEEP=1       keep the cluster running (and its files) after the test, for debugging
#
# Jobs run as an ordinary user (a real site is multi-tenant; issue 28): after it_cluster_up,
#     it_jobs_as_user                  # sbatch, srun, salloc, saker-run now run as saker-user
#     it_user CMD...                   # any other command as that user
#   IT_USER  the user (default saker-user; created when missing, without home or shell). Not
#            saker-alice or saker-mallory: zero_trust_attacks.sh attacks every process of
#            saker-alice's, and tests run in parallel.
#
# Test scripts must not install their own EXIT trap (it would replace the one that takes the
# cluster down); register cleanups with it_at_exit instead.

# declare -g: these survive even when given as "VAR=value . lib.sh" (temporary assignments).
declare -g IT_LIB_DIR
IT_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
declare -g SAKER_SRCDIR="${SAKER_SRCDIR:-$(cd "$IT_LIB_DIR/../.." && pwd)}"
declare -g SAKER_BUILDDIR="${SAKER_BUILDDIR:-$SAKER_SRCDIR}"
declare -g SAKER_CLUSTER="${SAKER_CLUSTER:-$SAKER_SRCDIR/scripts/saker-cluster}"
declare -g IT_NAME="${IT_NAME:-$(basename "$0" .sh)}"
declare -g IT_KEEP="${IT_KEEP:-0}"
declare -g SAKER_CLUSTER_SLURM="${SAKER_CLUSTER_SLURM:-}"
if [[ -n $SAKER_CLUSTER_SLURM ]]; then
    # Clients of one release cannot talk to another release's slurmctld.
    PATH=$SAKER_CLUSTER_SLURM/bin:$SAKER_CLUSTER_SLURM/sbin:$PATH
    export PATH SAKER_CLUSTER_SLURM
fi

IT_PASSED=0          # assertions passed so far
IT_FAILED=0          # assertions failed so far
IT_OUT=""            # stdout+stderr of the last assert_rc / it_run
IT_RC=0              # exit status of the last assert_rc / it_run
IT_PREFIX=""         # prefix of the running cluster (empty: none)
IT_PORT_BASE=""      # its port base
IT_TMP=""            # scratch directory of this test (removed at exit unless IT_KEEP=1)
IT_AT_EXIT=()        # extra cleanup commands (it_at_exit)

# ---------------------------------------------------------------------------------------------
# Output and assertions.  Every assertion prints one TAP-like line: "ok - MSG" / "not ok - MSG".
# ---------------------------------------------------------------------------------------------

it_log() { printf '# %s\n' "$*"; }

it_pass() {
    IT_PASSED=$((IT_PASSED + 1))
    printf 'ok - %s\n' "$*"
}

it_fail() {
    IT_FAILED=$((IT_FAILED + 1))
    printf 'not ok - %s\n' "$*"
    return 0
}

# _it_show LABEL TEXT: indented detail lines under a failed assertion.
_it_show() {
    printf '#   %s\n' "$1"
    printf '%s\n' "$2" | head -n 40 | sed 's/^/#     | /'
}

# assert_eq EXPECTED ACTUAL MSG
assert_eq() {
    if [[ $1 == "$2" ]]; then
        it_pass "$3"
    else
        it_fail "$3"
        _it_show expected: "$1"
        _it_show actual: "$2"
    fi
}

# assert_contains HAYSTACK NEEDLE MSG
assert_contains() {
    if [[ $1 == *"$2"* ]]; then
        it_pass "$3"
    else
        it_fail "$3"
        _it_show "expected to find: " "$2"
        _it_show "in:" "$1"
    fi
}

# assert_not_contains HAYSTACK NEEDLE MSG
assert_not_contains() {
    if [[ $1 != *"$2"* ]]; then
        it_pass "$3"
    else
        it_fail "$3"
        _it_show "expected NOT to find:" "$2"
        _it_show "in:" "$1"
    fi
}

# it_run CMD ARGS...: run a command, stdout+stderr into IT_OUT, exit status into IT_RC.
it_run() {
    IT_OUT=$("$@" 2>&1) && IT_RC=0 || IT_RC=$?
}

# assert_rc EXPECTED_RC MSG -- CMD ARGS...: run CMD (output in IT_OUT) and compare its exit status.
assert_rc() {
    local expected=$1 msg=$2
    shift 2
    [[ ${1:-} == -- ]] && shift
    it_run "$@"
    if [[ $IT_RC == "$expected" ]]; then
        it_pass "$msg"
    else
        it_fail "$msg"
        printf '#   command: %s\n#   exit status %s, expected %s\n' "$*" "$IT_RC" "$expected"
        _it_show output: "$IT_OUT"
    fi
}

# it_wait_for TIMEOUT_S DESC CMD ARGS...: poll CMD (quietly, every 0.2 s) until it succeeds.
# Passes with "DESC" when it does, fails with "DESC (timed out after TIMEOUT_S s)" otherwise.
it_wait_for() {
    local timeout=$1 desc=$2 deadline
    shift 2
    deadline=$((SECONDS + timeout))
    while :; do
        if "$@" >/dev/null 2>&1; then
            it_pass "$desc"
            return 0
        fi
        if ((SECONDS >= deadline)); then
            it_fail "$desc (timed out after $timeout s)"
            return 1
        fi
        sleep 0.2
    done
}

# it_job_state JOBID: the current JobState of a job (empty when slurmctld no longer knows it).
it_job_state() {
    scontrol show job -o "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1
}

# it_job_wait JOBID TIMEOUT_S: wait until the job reaches a terminal state and echo it
# (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...).  Echoes TIMEOUT_WAITING (status 1)
# when it did not finish in time, UNKNOWN (status 1) when slurmctld does not know the job.
it_job_wait() {
    local job=$1 timeout=${2:-60} deadline state
    deadline=$((SECONDS + timeout))
    while :; do
        state=$(it_job_state "$job")
        case $state in
            COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|PREEMPTED|BOOT_FAIL|DEADLINE|OUT_OF_MEMORY|REVOKED|SPECIAL_EXIT)
                echo "$state"
                return 0 ;;
            "")
                echo UNKNOWN
                return 1 ;;
        esac
        if ((SECONDS >= deadline)); then
            echo TIMEOUT_WAITING
            return 1
        fi
        sleep 0.2
    done
}

# it_finish: summary line for this script; exit 0 if nothing failed, 1 otherwise.
it_finish() {
    printf '# %s: %d passed, %d failed\n' "$IT_NAME" "$IT_PASSED" "$IT_FAILED"
    ((IT_FAILED == 0)) || exit 1
    exit 0
}

# ---------------------------------------------------------------------------------------------
# Root / skip
# ---------------------------------------------------------------------------------------------

it_require_root() {
    [[ $(id -u) -eq 0 ]] && return 0
    cat >&2 <<EOF
########################################################################################
##  SKIP: integration tests need root ($IT_NAME).
##
##  They start a real private Slurm cluster on this machine (munged, slurmctld and
##  slurmd "nodes", fake GPU device nodes made with mknod), which only root can do.
##  Run them as root, e.g.:   sudo make check     or   sudo bash $0
########################################################################################
EOF
    exit 77
}

# ---------------------------------------------------------------------------------------------
# The cluster
# ---------------------------------------------------------------------------------------------

# it_at_exit CMD...: run CMD (one string, eval'ed) at exit, before the cluster goes down.
it_at_exit() { IT_AT_EXIT+=("$*"); }

# it_dump_logs: the last 40 lines of slurmctld.log and of each slurmd log, to stderr.
it_dump_logs() {
    [[ -n $IT_PREFIX && -d $IT_PREFIX/log ]] || return 0
    local f
    for f in "$IT_PREFIX"/log/slurmctld.log "$IT_PREFIX"/log/slurmd-*.log; do
        [[ -r $f ]] || continue
        printf '#### last 40 lines of %s\n' "$f"
        tail -n 40 "$f"
    done >&2
}

# _it_ports_free BASE COUNT: none of BASE..BASE+COUNT-1 is used by a TCP socket (ss).
_it_ports_free() {
    local base=$1 count=$2
    ! ss -tanH state listening state established state syn-sent state syn-recv 2>/dev/null |
        awk -v lo="$base" -v hi=$((base + count - 1)) \
            '{ n = split($(NF - 1), a, ":"); if (a[n] + 0 >= lo && a[n] + 0 <= hi) found = 1 } END { exit !found }'
}

# it_cluster_up [saker-cluster up args...]: bring up a private cluster for this test.
#   - unique prefix (mktemp -d /tmp/saker-it.XXXXXX), free port range (random from 30000 up to
#     the start of the ephemeral port range, usually 32768; else up to 39000)
#   - --build-dir "${SAKER_BUILDDIR:-$SAKER_SRCDIR}" (the plugins, when built)
#   - exports SLURM_CONF and SAKER_CLUSTER_PREFIX; sets IT_PREFIX, IT_PORT_BASE
#   - the EXIT trap takes it down (dumping logs first if something failed); IT_KEEP=1 keeps it
# Clusters of parallel tests are brought up one at a time (a lock file), so that two tests
# never pick the same free ports.
it_cluster_up() {
    local nodes=3 a prev="" attempt rc=0 out lockfd
    for a in "$@"; do
        [[ $prev == --nodes ]] && nodes=$a
        [[ $a == --nodes=* ]] && nodes=${a#*=}
        prev=$a
    done
    [[ -x $SAKER_CLUSTER ]] || { it_fail "saker-cluster not found at $SAKER_CLUSTER (set SAKER_SRCDIR)"; it_finish; }
    if [[ -n $IT_PREFIX ]]; then it_cluster_down; fi
    IT_PREFIX=$(mktemp -d /tmp/saker-it.XXXXXX)
    _it_install_trap

    exec {lockfd}>>/tmp/saker-it.lock
    flock -w 300 "$lockfd" || it_log "could not lock /tmp/saker-it.lock; going on without it"
    # Ports below the kernel's ephemeral range cannot be grabbed meanwhile by an outgoing
    # connection (a real cause of "Address already in use" while other tests run).
    local lo=30000 hi=39000 eph
    eph=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 0)
    if ((eph > lo + 1000 + nodes)); then hi=$((eph - nodes - 2)); fi
    for attempt in 1 2 3 4 5; do
        for _ in $(seq 1 50); do
            IT_PORT_BASE=$((lo + RANDOM % (hi - lo)))
            _it_ports_free "$IT_PORT_BASE" $((nodes + 1)) && break
        done
        it_log "bringing up a $nodes-node cluster (attempt $attempt): prefix $IT_PREFIX, ports $IT_PORT_BASE..$((IT_PORT_BASE + nodes))"
        out=$("$SAKER_CLUSTER" up --prefix "$IT_PREFIX" --port-base "$IT_PORT_BASE" \
            --build-dir "$SAKER_BUILDDIR" ${SAKER_CLUSTER_SLURM:+--slurm "$SAKER_CLUSTER_SLURM"} "$@" 2>&1) && rc=0 || rc=$?
        printf '%s\n' "$out" | sed 's/^/#   /'
        ((rc == 4)) || break    # 4: a port was busy (or taken meanwhile); try another range
    done
    exec {lockfd}>&-
    if ((rc != 0)); then
        it_fail "saker-cluster up failed (exit $rc)"
        it_finish
    fi
    export SLURM_CONF=$IT_PREFIX/etc/slurm.conf
    export SAKER_CLUSTER_PREFIX=$IT_PREFIX
    return 0
}

# it_slurmctld_start: start this cluster's slurmctld again (after a test stopped it), with
# the daemons' minimal environment and the cluster's own Slurm release.
it_slurmctld_start() {
    env -i PATH="${SAKER_CLUSTER_SLURM:+$SAKER_CLUSTER_SLURM/sbin:}/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root \
        SLURM_CONF="$SLURM_CONF" slurmctld -f "$SLURM_CONF"
}

# it_cluster_down: take this test's cluster down now (the EXIT trap then has nothing to do).
it_cluster_down() {
    [[ -n $IT_PREFIX ]] || return 0
    "$SAKER_CLUSTER" down --prefix "$IT_PREFIX" 2>&1 | sed 's/^/#   /'
    local rc=${PIPESTATUS[0]}
    IT_PREFIX=""
    unset SLURM_CONF SAKER_CLUSTER_PREFIX
    return "$rc"
}

# it_tmpdir: create this test's scratch directory $IT_TMP (once; removed at exit unless
# IT_KEEP=1).  Call it directly, not as $(it_tmpdir), then use "$IT_TMP".
it_tmpdir() {
    if [[ -z $IT_TMP ]]; then
        IT_TMP=$(mktemp -d /tmp/saker-it-tmp.XXXXXX)
        chmod 0755 "$IT_TMP"
        _it_install_trap
    fi
}

_it_on_exit() {
    local rc=$? c
    trap - EXIT
    for c in "${IT_AT_EXIT[@]}"; do eval "$c" || true; done
    if [[ -n $IT_PREFIX ]]; then
        if ((rc != 0 || IT_FAILED > 0)); then it_dump_logs; fi
        if [[ $IT_KEEP == 1 ]]; then
            printf '# IT_KEEP=1: cluster kept at %s; remove it with:\n#   %s down --prefix %s\n' \
                "$IT_PREFIX" "$SAKER_CLUSTER" "$IT_PREFIX" >&2
        else
            it_cluster_down >&2 || true
        fi
    fi
    if [[ -n $IT_TMP && $IT_KEEP != 1 ]]; then rm -rf -- "$IT_TMP"; fi
    exit "$rc"
}

_it_install_trap() {
    trap _it_on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# ---------------------------------------------------------------------------------------------
# Jobs as an ordinary user
# ---------------------------------------------------------------------------------------------
# After it_jobs_as_user, the functions sbatch, srun, salloc and saker-run below submit as
# $IT_USER through setpriv (the test's environment kept, HOME a private directory of the
# user's), so assert_rc ... -- srun ... and $(sbatch ...) need no change. Commands run by
# their full path, or through env/timeout, stay root's: write it_user in front of those.
# The cluster's prefix and $IT_TMP become 1777 (sticky, like /tmp), so that the tests' output
# files (-o "$IT_PREFIX/x.out") can be created by the user; root reads them as before.
declare -g IT_USER="${IT_USER:-saker-user}"
IT_AS_USER=0          # 1 once it_jobs_as_user succeeded
IT_USER_HOME=""       # the user's HOME during the test (private, under $IT_TMP)

# it_user CMD...: CMD as $IT_USER, with this test's environment (run from the user's HOME
# when the current directory is closed to them: a job's working directory must be theirs to enter).
it_user() {
    local dir=$PWD
    setpriv --reuid="$IT_USER" --regid="$IT_USER" --init-groups -- test -x "$dir" 2>/dev/null || dir=$IT_USER_HOME
    (cd "$dir" && setpriv --reuid="$IT_USER" --regid="$IT_USER" --init-groups -- \
        env HOME="$IT_USER_HOME" USER="$IT_USER" LOGNAME="$IT_USER" "$@")
}

# it_jobs_as_user: from now on jobs are submitted as $IT_USER. Creates the user when
# missing; when the user cannot read the build or source tree (say, a clone under /root),
# the jobs stay root's and the test says why (a log line), since nothing would run.
it_jobs_as_user() {
    if ! id -u "$IT_USER" >/dev/null 2>&1 && ! useradd -M -s /usr/sbin/nologin "$IT_USER" 2>/dev/null; then
        it_log "jobs run as root: cannot create the user $IT_USER (useradd failed)"
        return 0
    fi
    it_tmpdir
    IT_USER_HOME=$IT_TMP/home-$IT_USER
    mkdir -p "$IT_USER_HOME" && chown "$IT_USER:" "$IT_USER_HOME" && chmod 0700 "$IT_USER_HOME"
    local p
    for p in "$SAKER_BUILDDIR" "$SAKER_SRCDIR/tests/integration/lib.sh" ${IT_PREFIX:+"$IT_PREFIX/etc/slurm.conf"}; do
        if ! setpriv --reuid="$IT_USER" --regid="$IT_USER" --init-groups -- test -r "$p" 2>/dev/null; then
            it_log "jobs run as root: $IT_USER cannot read $p (make the tree world-readable)"
            return 0
        fi
    done
    [[ -z $IT_PREFIX ]] || chmod 1777 "$IT_PREFIX"
    chmod 1777 "$IT_TMP"
    IT_AS_USER=1
    it_log "jobs run as $IT_USER (uid $(id -u "$IT_USER")), not root"
}

# it_job CMD...: CMD as the test user once it_jobs_as_user ran, else as root (for commands
# the wrappers do not catch: env VAR=value sbatch ..., timeout 60 srun ...).
it_job() {
    if ((IT_AS_USER)); then it_user "$@"; else command "$@"; fi
}
sbatch() { it_job sbatch "$@"; }
srun() { it_job srun "$@"; }
salloc() { it_job salloc "$@"; }
saker-run() { it_job saker-run "$@"; }
