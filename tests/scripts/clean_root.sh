#!/usr/bin/env bash
# The README's two commands on a machine that has nothing installed (issue 13): a minimal
# Debian 12 root filesystem (debootstrap --variant=minbase: no compiler, no Slurm, no
# autotools), this source tree copied in, then inside it, as a new user would:
#   scripts/install-deps   must find every package missing, install them and re-check;
#   scripts/check --quick  must build and pass (unit tests and the real-Slurm integration
#                          tests, daemons started inside the root);
#   scripts/demo           must run the demo job to the end.
# Needs root, debootstrap and a Debian mirror; SAKER_TEST_FULL=1 only (about an hour on 2
# cores). The minimal root is cached as a tarball (SAKER_CLEAN_ROOT_CACHE) so only the
# first run downloads it; every run starts from the untouched tarball.
#   SAKER_CLEAN_ROOT_STEPS="install-deps check demo"   which steps to run (default: all)
#   SAKER_CLEAN_ROOT_LOGS=DIR   where a failed step's logs are kept (default /var/tmp/saker-clean-root-logs)
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=${SAKER_SRCDIR:-$(cd "$here/../.." && pwd)}
steps=${SAKER_CLEAN_ROOT_STEPS:-install-deps check demo}
skip() { echo "SKIP: $*"; exit 77; }
[[ ${SAKER_TEST_FULL:-0} == 1 ]] || skip "installs everything into a fresh root filesystem (~1 h); runs with SAKER_TEST_FULL=1 (scripts/check --full)"
(($(id -u) == 0)) || skip "needs root (chroot, mounts)"
command -v debootstrap >/dev/null || skip "needs debootstrap (apt-get install debootstrap)"
command -v git >/dev/null || skip "needs git to list the tree's files"
mirror=${SAKER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${SAKER_CLEAN_ROOT_CACHE:-/var/cache/saker/bookworm-minbase.tar}

pass=0 fail=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
bad() { echo "not ok - $*"; fail=$((fail + 1)); }
finish() { echo "# clean_root: $pass passed, $fail failed"; ((fail == 0)); exit $?; }

root=$(mktemp -d /var/tmp/saker-clean-root.XXXXXX)
kept=${SAKER_CLEAN_ROOT_LOGS:-/var/tmp/saker-clean-root-logs}  # a failed step's logs survive the root here
mounts=()
cleanup() {
  local m i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -R -l "${mounts[i]}" 2>/dev/null; done
  # Daemons the tests started inside the root must not outlive it.
  for m in $(ls -l /proc/*/root 2>/dev/null | awk -v r="$root" '$NF == r { split($9, p, "/"); print p[3] }'); do
    kill -9 "$m" 2>/dev/null
  done
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT

if [[ -f $cache ]]; then
  echo "# minimal Debian 12 root from the cache $cache"
  tar -xf "$cache" -C "$root" || { bad "unpack $cache"; finish; }
else
  echo "# debootstrap --variant=minbase bookworm from $mirror (first run only; cached in $cache)"
  if debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1; then
    mkdir -p "$(dirname "$cache")" && tar -cf "$cache" -C "$root" . && rm -f "$root.log"
  else
    tail -20 "$root.log"; rm -f "$root.log"; skip "debootstrap failed (no network or mirror?)"
  fi
fi
# What the root must NOT have, or the test proves nothing.
for tool in gcc autoreconf slurmctld python3; do
  if chroot "$root" sh -c "command -v $tool" >/dev/null 2>&1; then bad "the fresh root has no $tool"; else ok "the fresh root has no $tool"; fi
done

# The tree as git sees it (tracked and untracked-but-not-ignored files), no build output.
mkdir -p "$root/src/saker"
(cd "$src" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$root/src/saker"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# Recursive binds: slurmd needs /sys/fs/cgroup and the shared-memory transport /dev/shm,
# both submounts that a plain --bind leaves out (the first full run failed on exactly that).
mount -t proc proc "$root/proc" && mounts+=("$root/proc")
for m in sys dev; do
  mount --rbind "/$m" "$root/$m" && mount --make-rslave "$root/$m" && mounts+=("$root/$m")
done
mount -t tmpfs tmpfs "$root/run" && mounts+=("$root/run")
mount -t tmpfs tmpfs "$root/tmp" && mounts+=("$root/tmp")
in_root() { chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  LANG=C.UTF-8 SAKER_TEST_FULL=0 bash -c "cd /src/saker && $*"; }

for step in $steps; do
  log="$root/src/$step.log"
  start=$(date +%s)
  case $step in
    install-deps)
      in_root scripts/install-deps >"$log" 2>&1 && rc=0 || rc=$?
      if ((rc == 0)); then ok "install-deps installs what a fresh machine lacks ($(($(date +%s) - start)) s)"; else bad "install-deps (exit $rc)"; fi
      grep -q "installing [0-9]* package(s)" "$log" && ok "install-deps saw the missing packages" || bad "install-deps saw nothing missing"
      in_root scripts/install-deps --check >/dev/null 2>&1 && ok "install-deps --check: nothing missing afterwards" || bad "install-deps --check still finds missing packages"
      ;;
    check)
      in_root scripts/check --quick >"$log" 2>&1 && rc=0 || rc=$?
      summary=$(tail -n 1 "$log")
      if ((rc == 0)); then ok "scripts/check --quick passes in the fresh root: $summary ($(($(date +%s) - start)) s)"; else bad "scripts/check --quick (exit $rc): $summary"; fi
      ;;
    demo)
      in_root scripts/demo >"$log" 2>&1 && rc=0 || rc=$?
      if ((rc == 0)); then ok "scripts/demo runs in the fresh root ($(($(date +%s) - start)) s)"; else bad "scripts/demo (exit $rc)"; fi
      ;;
    *) bad "unknown step '$step' in SAKER_CLEAN_ROOT_STEPS (known: install-deps check demo)"; continue ;;
  esac
  if ((rc != 0)); then
    echo "# last lines of $step:"; tail -n 30 "$log" | sed 's/^/#   /'
    # The root goes at exit: keep what explains the failure (the step's log, every test log).
    mkdir -p "$kept" && cp "$log" "$kept/" &&
      (cd "$root/src/saker" && find build -name '*.log' -print0 2>/dev/null | tar --null -T - -czf "$kept/$step-test-logs.tgz")
    echo "# logs kept in $kept"
  fi
done
finish
