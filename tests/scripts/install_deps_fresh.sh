#!/usr/bin/env bash
# scripts/install-deps on machines it cannot see directly: a stub dpkg-query and apt-get on
# PATH play (1) a fresh machine whose dpkg knows none of the packages, (2) one that knows
# them as not-installed, (3) one where apt-get cannot place a package. install-deps must
# report every missing package, install them, re-check, and fail loudly when one is still
# missing. (The bug this guards: under pipefail, dpkg-query's exit at the first unknown
# package made install-deps say "all present" on exactly the machines that needed it.)
set -u
src=${SAKER_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()  { passed=$((passed + 1)); echo "ok - $*"; }
bad() { failed=$((failed + 1)); echo "not ok - $*"; }

mkdir -p "$tmp/bin"
# Stub dpkg-query: packages listed in $STATE are installed; with KNOWN=yes the others are
# reported "not-installed", otherwise dpkg-query says it knows nothing and exits 1.
cat >"$tmp/bin/dpkg-query" <<'STUB'
#!/usr/bin/env bash
rc=0
shift 2   # -W -f=FORMAT
for p in "$@"; do
  if grep -qxF -- "$p" "$STATE" 2>/dev/null; then echo "$p installed"
  elif [ "$KNOWN" = yes ]; then echo "$p not-installed"
  else echo "dpkg-query: no packages found matching $p" >&2; rc=1; fi
done
exit $rc
STUB
# Stub apt-get: "installs" every package named, except $UNPLACEABLE.
cat >"$tmp/bin/apt-get" <<'STUB'
#!/usr/bin/env bash
[ "$1" = update ] && exit 0
for p in "$@"; do
  case $p in -*|install) continue ;; esac
  [ "$p" = "${UNPLACEABLE:-}" ] || echo "$p" >>"$STATE"
done
STUB
chmod +x "$tmp/bin/"*
npkgs=$(sed -n '/^packages=(/,/^)/p' "$src/scripts/install-deps" | grep -v '^ *#' | sed '1d;$d' | wc -w)

run() {  # run KNOWN UNPLACEABLE ARGS...: install-deps with the stubs, fresh state
  local known=$1 unplaceable=$2; shift 2
  : >"$tmp/state"
  out=$(PATH="$tmp/bin:$PATH" STATE="$tmp/state" KNOWN=$known UNPLACEABLE=$unplaceable \
        "$src/scripts/install-deps" "$@" 2>&1); rc=$?
}

for known in no yes; do
  run $known "" --check
  n=$(sed -n 's/^install-deps: missing: //p' <<<"$out" | wc -w)
  [ $rc -eq 1 ] && [ "$n" -eq "$npkgs" ] \
    && ok "--check on a fresh machine (dpkg knows them: $known) reports all $npkgs missing" \
    || bad "--check (known=$known): rc=$rc, $n of $npkgs reported: $out"
  run $known ""
  [ $rc -eq 0 ] && grep -q "installing $npkgs package" <<<"$out" && grep -q "done, all $npkgs packages present" <<<"$out" \
    && [ "$(sort -u "$tmp/state" | wc -l)" -eq "$npkgs" ] \
    && ok "fresh machine (dpkg knows them: $known): installs all $npkgs, re-checks, passes" \
    || bad "install (known=$known): rc=$rc: $out"
done

run no slurmctld
[ $rc -ne 0 ] && grep -q "still missing after apt-get install: slurmctld" <<<"$out" \
  && ok "a package apt-get could not place fails the run and is named" \
  || bad "unplaceable package: rc=$rc: $out"

# Already complete: nothing to do, exit 0 without calling apt-get.
sed -n '/^packages=(/,/^)/p' "$src/scripts/install-deps" | grep -v '^ *#' | sed '1d;$d' | tr -s ' ' '\n' | grep . >"$tmp/full"
out=$(PATH="$tmp/bin:$PATH" STATE="$tmp/full" KNOWN=no UNPLACEABLE= "$src/scripts/install-deps" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "all $npkgs packages present" <<<"$out" \
  && ok "complete machine: reports all present" || bad "complete machine: rc=$rc: $out"

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
