#!/usr/bin/env bash
# Debian packages, end to end (issue 13): the release tarball's debian/ builds five
# packages with `dpkg-buildpackage -b -us -uc`; lintian finds no error; the packages
# install on this machine; a local cluster runs from the installed files only (plugins
# from Slurm's PluginDir, /usr/bin tools, /usr/share/saker templates) through the policy,
# affinity and training paths; purging the packages leaves nothing behind.
# Builds the whole tree once more: SAKER_TEST_FULL=1 only (scripts/check --full).
#
# Root builds, installs and purges the packages and brings the cluster up, as the operator
# does; everything a user does runs as the ordinary test user (lib.sh's it_jobs_as_user;
# issue 28: a real site is multi-tenant): the consumer of the -dev package, the Python
# import, and every job (sbatch, srun, saker-run, saker-train), which therefore also shows
# that the installed files are readable and runnable by someone other than root.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
it_require_root
if [[ ${SAKER_TEST_FULL:-0} != 1 ]]; then
  echo "SKIP: builds the Debian packages from scratch (~10 min); runs with SAKER_TEST_FULL=1 (scripts/check --full)"
  exit 77
fi
packages=(saker-slurm-plugins saker-tools libsaker0 libsaker-dev python3-saker)
for p in "${packages[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    echo "SKIP: $p is already installed on this machine; this test installs and purges the packages, so it leaves a site's install alone"
    exit 77
  fi
done
missing=()
for tool in dpkg-buildpackage:dpkg-dev dh:debhelper lintian:lintian; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if ((${#missing[@]})); then
  it_log "installing the packaging tools: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
    { echo "SKIP: cannot install ${missing[*]} (apt-get failed; offline?)"; exit 77; }
fi
it_tmpdir
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
plugindir=/usr/lib/$multiarch/slurm-wlm

# --- build from the release tarball, as a packager would.
submake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C "$SAKER_BUILDDIR" "$@"; }
# The last line: make first reruns config.status, and says so, when a Makefile.am changed.
tarball=$(submake print-dist-name | tail -n 1).tar.gz
assert_rc 0 "make dist" -- submake dist-gzip
mkdir -p "$IT_TMP/saker"
mv "$SAKER_BUILDDIR/$tarball" "$IT_TMP/" && tar -xzf "$IT_TMP/$tarball" -C "$IT_TMP/saker" --strip-components=1
assert_rc 0 "the tarball carries debian/" -- test -x "$IT_TMP/saker/debian/rules"
it_log "dpkg-buildpackage -b -us -uc (log: $IT_TMP/build.log)"
(cd "$IT_TMP/saker" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" dpkg-buildpackage -b -us -uc) \
  >"$IT_TMP/build.log" 2>&1 && rc=0 || rc=$?
assert_eq 0 "$rc" "dpkg-buildpackage -b -us -uc builds"
((rc == 0)) || { tail -n 40 "$IT_TMP/build.log" | sed 's/^/#   /'; it_finish; }
debs=()
for p in "${packages[@]}"; do
  f=$(ls "$IT_TMP"/"${p}"_*.deb 2>/dev/null | head -n1)
  assert_rc 0 "package $p was built" -- test -f "$f"
  debs+=("$f")
done
abi=$(dpkg-deb -f "${debs[0]}" Depends)
slurm_series=$(dpkg-query -W -f='${Version}' libslurm-dev | cut -d. -f1,2)
assert_contains "$abi" "slurm-wlm-basic-plugins (>= $slurm_series)" "the plugins depend on the Slurm series they were built for"
assert_contains "$abi" "slurm-wlm-basic-plugins (<< $slurm_series.99)" "and on no newer series"
assert_rc 0 "lintian finds no error" -- lintian --fail-on error "$IT_TMP"/saker_*.changes

# --- install, and a consumer of the -dev package.
it_at_exit dpkg --purge "${packages[@]}"
assert_rc 0 "the packages install" -- env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}"
it_jobs_as_user
assert_rc 0 "spank_saker.so is in Slurm's PluginDir" -- test -f "$plugindir/spank_saker.so"
assert_rc 0 "job_submit_saker.so is in Slurm's PluginDir" -- test -f "$plugindir/job_submit_saker.so"
assert_rc 0 "the telemetry sampler is where spank_saker.so starts it" -- \
  bash -c "strings $plugindir/spank_saker.so | grep -q /usr/libexec/saker/saker-sample-step && test -x /usr/libexec/saker/saker-sample-step"
assert_rc 1 "no libtool .la file is shipped" -- bash -c "dpkg -L ${packages[*]} | grep -q '\.la$'"
assert_rc 0 "saker-policy --version runs from /usr/bin" -- /usr/bin/saker-policy --version
assert_contains "$(man -w job_submit_saker 2>&1)" "/usr/share/man/man8/job_submit_saker.8" "man finds job_submit_saker(8)"
assert_contains "$(zcat -f /usr/share/man/man8/job_submit_saker.8*)" "/usr/share/doc/saker/examples" \
  "the installed man page names the installed examples"
cat >"$IT_TMP/consumer.cpp" <<'CPP'
#include <saker/policy.hpp>
#include <cstdio>
int main() {
  auto p = saker::policy::Policy::load_string("version: 1\nzones:\n  - name: ae\n    country: AE\n"
                                               "partitions:\n  - name: p\n    zone: ae\n    nodes: n1\n");
  std::printf("revision %s\n", p->revision().c_str());
}
CPP
assert_rc 0 "a consumer builds with pkg-config --cflags --libs saker and runs" -- \
  it_job bash -c "g++ -std=c++20 $IT_TMP/consumer.cpp -o $IT_TMP/consumer \$(pkg-config --cflags --libs saker) && $IT_TMP/consumer"
assert_rc 0 "python3 imports saker.torch" -- it_job /usr/bin/python3 -c 'import saker.torch'

# --- a cluster from the installed files only: no build tree anywhere on its way.
export SAKER_CLUSTER=/usr/bin/saker-cluster
policy="$IT_TMP/policy.yaml"
cp "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml" "$policy"
it_cluster_up --nodes 3 --gpus-per-node 4 --plugin-dir "$plugindir" --policy "$policy" \
  --spank-args "topology=$SAKER_SRCDIR/tests/data/topo-itest-2cpu-4gpu.xml" \
  --partitions "gpu-ae=saker[1-2];cpu-ae=saker[1-2];gpu-eu=saker3;all=saker[1-3]"
it_jobs_as_user  # again, now that the cluster's prefix exists: the jobs write their output there
assert_eq "$IT_USER" "$(srun -N1 -n1 -p all id -un 2>&1)" "jobs run as $IT_USER, not root"
spank_so=$(awk '$1 == "required" { print $2 }' "$IT_PREFIX/etc/plugstack.conf")
assert_rc 0 "plugstack.conf loads the installed SPANK plugin ($spank_so)" -- cmp "$spank_so" "$plugindir/spank_saker.so"
assert_contains "$(cat "$IT_PREFIX/log/slurmctld.log")" "saker: job_submit/saker loaded" "slurmctld loaded the installed job_submit plugin"
scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae
# Policy: restricted data with a grant runs in its zone; in the other zone it is refused.
assert_rc 0 "policy: patients@v3 on gpu-ae with account medical is accepted" -- \
  sbatch --parsable -A medical -p gpu-ae --dataset=patients@v3 -o /dev/null --wrap true
assert_eq COMPLETED "$(it_job_wait "$(tail -n1 <<<"$IT_OUT")" 60)" "policy: the accepted job completes"
assert_rc 1 "policy: patients@v3 on gpu-eu is refused" -- \
  sbatch --parsable -A medical -p gpu-eu --dataset=patients@v3 -o /dev/null --wrap true
assert_contains "$IT_OUT" "patients" "policy: the refusal names the dataset"
# Affinity: each task gets the GPUs the installed saker-topo plans for it.
topo="$SAKER_SRCDIR/tests/data/topo-itest-2cpu-4gpu.xml"
plan=$(it_job /usr/bin/saker-topo plan --topology "$topo" --ntasks-per-node 2 --gpus 0-3 --format env |
  grep -o 'rank=[0-9]* \|CUDA_VISIBLE_DEVICES=[0-9,]*' | paste -d' ' - - | sed 's/  */ /g' | sort)
assert_rc 0 "affinity: srun -n2 with 4 GPUs" -- \
  srun -N1 -n2 -p gpu-ae --gres=gpu:4 bash -c 'echo "rank=$SLURM_LOCALID CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"'
assert_eq "$plan" "$(grep '^rank=' <<<"$IT_OUT" | sort)" "affinity: every task sits on the GPUs saker-topo plans"
# Training: the installed CPU template, saker-run and saker-train, across two ranks.
SAKER_RUN_BIN=/usr/bin/saker-run SAKER_TRAIN_BIN=/usr/bin/saker-train TEMPLATES=/usr/share/saker
train_setup
h2=$(local_hash 2)
assert_eq 32 "${#h2}" "training: saker-run --local -n 2 from /usr/bin prints a weight hash"
job=$(submit_template train-cpu "$IT_PREFIX/ckpt-cpu" -p all)
assert_eq COMPLETED "$(it_job_wait "$job" 120)" "training: the installed CPU template completes"
assert_eq "$h2" "$(hash_of "$IT_PREFIX/train-cpu-$job.out")" "training: it ends with the --local hash"
it_cluster_down

# --- purge: nothing of Saker is left.
assert_rc 0 "the packages purge" -- dpkg --purge "${packages[@]}"
left=$(ls "$plugindir"/*saker* /usr/bin/saker-* /usr/share/saker /usr/include/saker \
  /usr/lib/"$multiarch"/libsaker* /usr/lib/python3/dist-packages/saker 2>/dev/null || true)
assert_eq "" "$left" "purging leaves no Saker file behind"
it_finish
