#!/usr/bin/env bash
# `make install DESTDIR=...` gives a sysadmin and a library user what they need:
#  - the plugins in Slurm's PluginDir (not $(libdir)/saker), the tools and man pages;
#  - public headers in $(includedir)/saker/, each compiling on its own with nothing but
#    `pkg-config --cflags saker` (no private header leaks out), and the library behind them;
#  - saker.pc, and a consumer that links and runs with `pkg-config --libs saker` alone;
#  - the sample configuration under $(docdir)/examples, which the installed tools accept.
set -euo pipefail
build=${SAKER_BUILDDIR:?run through make check}
dest=$(mktemp -d /tmp/saker-destdir.XXXXXX)
trap 'rm -rf "$dest"' EXIT
pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "not ok - $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi; }

# A make of its own (not the make check that runs this): no jobserver, no directory lines.
submake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C "$build" "$@"; }
eval "$(submake print-install-dirs)"
echo "# installing into DESTDIR=$dest (prefix $prefix, plugins $plugindir)"
submake install DESTDIR="$dest" >"$dest.log" 2>&1 || { tail -30 "$dest.log"; rm -f "$dest.log"; exit 1; }
rm -f "$dest.log"
D() { echo "$dest$1"; }

for p in spank_saker job_submit_saker; do
  check "$p.so is in Slurm's PluginDir ($plugindir)" test -f "$(D "$plugindir")/$p.so"
done
check "no plugin under \$(libdir)/saker" test ! -e "$(D "$libdir")/saker/spank_saker.so"
for t in saker-policy saker-ckpt saker-topo saker-run saker-train saker-sweep saker-stats; do
  check "$t installed" test -x "$(D "$bindir")/$t"
done
check "man pages installed" test -f "$(D "$mandir")/man8/spank_saker.8"
# The installed pages name this build's install paths, not the default prefix's.
check "job_submit_saker(8) names the configured examples dir ($docdir/examples)" \
  grep -qF "$docdir/examples" "$(D "$mandir")/man8/job_submit_saker.8"
check "saker-run(1) names the configured template dir ($pkgdatadir)" \
  grep -qF "$pkgdatadir/train-" "$(D "$mandir")/man1/saker-run.1"
if [[ $prefix != /usr/local ]]; then
  check "no installed man page names /usr/local/share (prefix is $prefix)" \
    bash -c '! grep -rlF /usr/local/share "$1"' _ "$(D "$mandir")"
fi
check "headers not under \$(includedir)/include" test ! -e "$(D "$includedir")/include"
headers=(policy.hpp ckpt.hpp comm.hpp comm.h error.hpp dataset_ref.hpp)
for h in "${headers[@]}"; do check "<saker/$h> installed" test -f "$(D "$includedir")/saker/$h"; done

export PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_LIBDIR=$(D "$libdir")/pkgconfig
check "saker.pc installed" test -f "$PKG_CONFIG_LIBDIR/saker.pc"
cflags=$(pkg-config --cflags saker) libs=$(pkg-config --libs saker)
echo "# pkg-config --cflags --libs saker: $cflags $libs"
work=$dest/consumer
mkdir -p "$work"
for h in "${headers[@]}"; do
  # Each header alone, from the installed tree only: a private include would fail here.
  if [[ $h == *.h ]]; then lang=c; cc=(gcc); else lang=c++; cc=(g++ -std=c++20); fi
  check "<saker/$h> compiles on its own" "${cc[@]}" -fsyntax-only -x $lang $cflags - <<<"#include <saker/$h>"
done
cat >"$work/consumer.cpp" <<'CPP'
#include <saker/policy.hpp>
#include <cstdio>
int main() {
  auto p = saker::policy::Policy::load_string("version: 1\nzones:\n  - name: ae\n    country: AE\n"
                                               "partitions:\n  - name: p\n    zone: ae\n    nodes: n1\n");
  std::printf("revision %s\n", p->revision().c_str());
  try {
    saker::policy::parse_dataset_list("bad name!");
  } catch (const saker::Error& e) {
    std::printf("refused: %s\n", e.what());
    return 0;
  }
  return 1;
}
CPP
# A library built with sanitizers (scripts/check's build-asan/) needs its consumer built so too.
if g++ -std=c++20 $sanitizer_flags $cflags "$work/consumer.cpp" -o "$work/consumer" $libs 2>"$work/err"; then
  ok "a consumer links with pkg-config alone"
  check "the consumer runs against the installed library" env LD_LIBRARY_PATH="$(D "$libdir")" "$work/consumer"
else
  cat "$work/err"; bad "a consumer links with pkg-config alone"
fi
ex=$(D "$docdir")/examples
for f in plugstack.conf.d/saker.conf job_submit_saker.conf saker-policy.yaml; do
  check "example $f installed" test -f "$ex/$f"
done
check "the example policy passes the installed saker-policy check" \
  env LD_LIBRARY_PATH="$(D "$libdir")" "$(D "$bindir")/saker-policy" check "$ex/saker-policy.yaml"
# Every tool says the same version (saker-cluster is a script with its own copy).
want=$(env LD_LIBRARY_PATH="$(D "$libdir")" "$(D "$bindir")/saker-policy" --version | awk '{ print $3 }')
for t in saker-topo saker-ckpt saker-run saker-train saker-sweep saker-stats saker-cluster; do
  got=$(env LD_LIBRARY_PATH="$(D "$libdir")" "$(D "$bindir")/$t" --version 2>/dev/null | awk '{ print $3 }' | tr -d ,) || true
  if [[ -n $want && $got == "${want%,}" ]]; then ok "$t --version says ${want%,}"; else bad "$t --version says '$got', not '${want%,}'"; fi
done
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
