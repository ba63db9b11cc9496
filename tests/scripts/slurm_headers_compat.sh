#!/usr/bin/env bash
# Saker's Slurm-facing sources compile against every supported Slurm's headers, not only
# the ones this machine builds with (Debian 12's 22.05): the SPANK and job_submit
# interfaces changed between releases (job_modify gained err_msg in 23.02, for one), and
# the plugins pick each version's interface at compile time from SLURM_VERSION_NUMBER.
#
# Headers come from the release sources in ../shared/vendor (SAKER_SLURM_VENDOR overrides),
# extracted once into a cache, with slurm_version.h generated as Slurm's configure would.
# A syntax-only compile of each file takes seconds; scripts/slurm-compat builds and runs
# the real daemons of each version.
set -euo pipefail
src=${SAKER_SRCDIR:?run through make check}
build=${SAKER_BUILDDIR:?run through make check}
vendor=${SAKER_SLURM_VENDOR:-$src/../shared/vendor}
cache=${SAKER_SLURM_HEADER_CACHE:-$build/slurm-headers}
shopt -s nullglob
tarballs=("$vendor"/slurm-*.tar.xz)
if ((${#tarballs[@]} == 0)); then
  echo "skipped: no Slurm release sources in $vendor (set SAKER_SLURM_VENDOR to a folder of slurm-X.Y.Z.tar.xz)"
  exit 77
fi
eval "$(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C "$build" print-compile-flags)"
# Every source that includes a Slurm header, directly or through one of our headers (the
# plugins, the hostlist wrapper, saker-run's Slurm helpers).
slurm_include='#include <slurm/(slurm|spank|slurm_errno)\.h>'
mapfile -t headers < <(cd "$src" && grep -rlE "$slurm_include" --include='*.hpp' plugins common launcher)
pattern=$slurm_include
for h in "${headers[@]}"; do pattern+="|#include \"${h//./\\.}\""; done
mapfile -t files < <(cd "$src" && grep -rlE "$pattern" --include='*.cpp' plugins common launcher | grep -v /fuzz/ | sort)
pass=0 fail=0
for tarball in "${tarballs[@]}"; do
  version=$(basename "$tarball" .tar.xz); version=${version#slurm-}
  IFS=. read -r major minor micro <<<"$version"
  dir=$cache/$version
  if [[ ! -f $dir/slurm/slurm_version.h ]]; then
    mkdir -p "$dir"
    tar -xJf "$tarball" -C "$dir" --strip-components=1 "slurm-$version/slurm"
    printf -v number '0x%02x%02x%02x' "$major" "$minor" "$micro"
    sed "s/^#undef SLURM_VERSION_NUMBER/#define SLURM_VERSION_NUMBER $number/" \
      "$dir/slurm/slurm_version.h.in" >"$dir/slurm/slurm_version.h"
  fi
  for f in "${files[@]}"; do
    # Slurm's headers first, so that /usr/include/slurm (22.05) is never picked up.
    if out=$(eval "$CXX" $CXXFLAGS -Wno-error=deprecated-declarations -fsyntax-only -I"$dir" $CPPFLAGS \
        -DSAKER_COMPAT_CHECK "$src/$f" 2>&1); then
      echo "ok - Slurm $version: $f"; pass=$((pass + 1))
    else
      echo "not ok - Slurm $version: $f"; echo "$out" | head -20 | sed 's/^/#   /'; fail=$((fail + 1))
    fi
  done
done
echo "$pass passed, $fail failed"
((fail == 0))
