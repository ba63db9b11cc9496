#!/bin/bash
# Executable documentation: every command block of README.md and every EXAMPLES command of
# every man page, extracted from the sources each run (tests/integration/doc_examples.py),
# runs on a local Slurm cluster and must exit as the page says (0 unless marked). Examples
# that cannot run here are marked in the page (saker(7), DOCUMENTATION EXAMPLES) and
# skipped with the reason printed; examples marked "full" run only with SAKER_TEST_FULL=1.
#
# Each page runs in its own scratch directory holding links scripts/, tests/ and build/ to
# the sources and the build, with the built tools first in PATH and SLURM_CONF pointing at
# a shared cluster set up like scripts/demo's. A page that brings up its own cluster
# (README.md, saker-cluster(1)) gets a fresh SAKER_CLUSTER_PREFIX and port range, and is
# taken down at the page's end whatever happened.
#
# The examples run as an ordinary user (lib.sh's it_jobs_as_user; issue 28: a real site is
# multi-tenant), in a scratch directory and HOME of theirs, as a reader of the page would.
# Only scripts/saker-cluster runs as root: it starts Slurm's daemons and makes device nodes,
# which only root may. Commands that change the shell (eval, export, cd) change this
# script's shell, whose environment the user's commands then get.
set -u
. "$(dirname "$0")/lib.sh"
it_require_root

DOC_TIMEOUT=${DOC_TIMEOUT:-180}   # seconds one example may run
full=0
[ "${SAKER_TEST_FULL:-0}" = 1 ] && full=1

examples=$(/usr/bin/python3 "$IT_LIB_DIR/doc_examples.py" "$SAKER_SRCDIR") || {
    it_fail "doc_examples.py could not extract the examples"
    it_finish
}
ncmd=$(grep -c '^doc_cmd' <<<"$examples")
it_log "$ncmd example commands extracted from README.md and man/*/*"
((ncmd >= 10)) && it_pass "the extractor finds the documented examples ($ncmd)" ||
    it_fail "the extractor found only $ncmd example commands"

it_cluster_up --nodes 3 --gpus-per-node 4 \
    --policy "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml" \
    --spank-args "topology=$SAKER_SRCDIR/tests/data/topo-itest-2cpu-4gpu.xml" \
    --partitions "gpu-ae=saker[1-2];cpu-ae=saker[1-2];gpu-eu=saker3;all=saker[1-3]"
shared_conf=$SLURM_CONF
shared_prefix=$IT_PREFIX
it_tmpdir
it_jobs_as_user

# The built tools first in PATH (each CLI lives in its own build directory).
tool_path=""
for exe in $(find "$SAKER_BUILDDIR" -path '*/.libs' -prune -o -type f -name 'saker-*' -perm -u+x -print | sort); do
    case $exe in *.sh|*.o) continue ;; esac
    tool_path="$tool_path:$(dirname "$exe")"
done
export PATH="${tool_path#:}:$SAKER_SRCDIR/scripts:$PATH"

page="" page_dir="" page_prefix="" page_n=0
skipped=0

page_end() {
    [[ -n $page_prefix ]] || return 0
    if [[ -d $page_prefix ]]; then
        "$SAKER_SRCDIR/scripts/saker-cluster" down --prefix "$page_prefix" >/dev/null 2>&1 || true
    fi
    rm -rf -- "$page_prefix"
    page_prefix=""
}
it_at_exit page_end

# A free port range for a page's own cluster, as lib.sh picks them.
page_ports() {
    local base
    for _ in $(seq 1 50); do
        base=$((30000 + RANDOM % 2000))
        _it_ports_free "$base" 8 && { echo "$base"; return; }
    done
    echo 31900
}

doc_begin() {
    page_end
    page=$1
    page_n=$((page_n + 1))
    page_dir="$IT_TMP/page$page_n"
    mkdir -p "$page_dir"
    if ((IT_AS_USER)); then
        chown "$IT_USER:" "$page_dir"
        IT_USER_HOME=$page_dir
    fi
    ln -s "$SAKER_SRCDIR/scripts" "$page_dir/scripts"
    ln -s "$SAKER_SRCDIR/tests" "$page_dir/tests"
    ln -s "$SAKER_BUILDDIR" "$page_dir/build"
    page_prefix=$(mktemp -d /tmp/saker-doc.XXXXXX)
    rmdir "$page_prefix"   # saker-cluster up creates it
    export SAKER_CLUSTER_PREFIX=$page_prefix SAKER_CLUSTER_PORT_BASE
    SAKER_CLUSTER_PORT_BASE=$(page_ports)
    export SLURM_CONF=$shared_conf HOME=$page_dir
    cd "$page_dir" || exit 1
}

# doc_as COMMAND: how to run it: root's for scripts/saker-cluster (daemons, device nodes),
# the test user's (it_job) for everything else.
doc_as() {
    case $1 in
        scripts/saker-cluster\ *) echo command ;;
        *) echo it_job ;;
    esac
}

# doc_cmd PAGE EXPECTED_RC COMMAND: commands that change the shell (eval, export, cd) run
# in this shell; the others under a timeout.
doc_cmd() {
    local src=$1 expected=$2 cmd=$3 rc out="$IT_TMP/out"
    local first=${cmd%%$'\n'*}
    case $cmd in
        eval\ *|export\ *|cd\ *) eval "$cmd" >"$out" 2>&1 </dev/null; rc=$? ;;
        *) $(doc_as "$cmd") timeout -k 5 "$DOC_TIMEOUT" bash -c "$cmd" >"$out" 2>&1 </dev/null; rc=$? ;;
    esac
    if [[ $rc == "$expected" ]]; then
        it_pass "$src: $first"
    else
        it_fail "$src: $first"
        printf '#   exit status %s, expected %s%s\n' "$rc" "$expected" "$( ((rc == 124)) && echo " (timed out after $DOC_TIMEOUT s)")"
        _it_show output: "$(tail -n 30 "$out")"
    fi
}

doc_setup() {
    local src=$1 cmd=$2
    $(doc_as "$cmd") timeout -k 5 "$DOC_TIMEOUT" bash -c "$cmd" >"$IT_TMP/setup.out" 2>&1 </dev/null ||
        { it_fail "$src: setup: $cmd"; _it_show output: "$(tail -n 20 "$IT_TMP/setup.out")"; }
}

doc_skip() {
    skipped=$((skipped + 1))
    printf 'ok - %s: %s # SKIP %s\n' "$1" "${2%%$'\n'*}" "$3"
}

doc_full() {
    if ((full)); then
        doc_cmd "$1" 0 "$2"
    else
        skipped=$((skipped + 1))
        printf 'ok - %s: %s # SKIP %s (runs with SAKER_TEST_FULL=1)\n' "$1" "${2%%$'\n'*}" "$3"
    fi
}

eval "$examples"
page_end

# --help and the man page's OPTIONS list the same options (saker-run: the issue found
# them disagreeing). Options are the "  --name", "-x, --name" (common/cli) and
# "-x [ --name ]" (Boost) lines of --help and the .B/.BI/.BR tags of the page's OPTIONS
# section; --help itself counts on neither side (the list it prints need not name it).
help_vs_man() {
    local tool=$1 page=$2 help man
    help=$("$tool" --help | sed -n 's/^  *\(-[a-zA-Z] \[ \|-[a-zA-Z], \)\{0,1\}--\([a-z][a-z-]*\).*/--\2/p' |
        grep -vx -- --help | sort -u)
    man=$(awk '/^\.SH OPTIONS/{p=1;next} /^\.SH/{p=0} p && /^\.B[IR]? /' "$page" | sed 's/\\-/-/g' |
        grep -o -- '--[a-z][a-z-]*' | grep -vx -- --help | sort -u)
    assert_eq "$help" "$man" "$(basename "$page"): OPTIONS lists exactly the options of $(basename "$tool") --help"
}
help_vs_man "$SAKER_BUILDDIR/launcher/saker-run/saker-run" "$SAKER_SRCDIR/man/man1/saker-run.1"
page_end
cd / || true
export SLURM_CONF=$shared_conf SAKER_CLUSTER_PREFIX=$shared_prefix
it_log "$skipped example(s) skipped, each with its reason above"
it_finish
