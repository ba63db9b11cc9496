#!/usr/bin/env bash
# A machine whose own host name does not resolve (a bare root filesystem without
# /etc/hosts, a container with a random name): the communicator must still form, over
# the address of an interface, and say so once with the fix. The first clean-root run
# (tests/scripts/clean_root.sh) failed every TCP test on exactly this. Runs the fusion
# and join tests under a new UTS namespace whose host name resolves nowhere.
. "$(dirname "$0")/../integration/lib.sh"
it_require_root
command -v unshare >/dev/null || { echo "SKIP: needs unshare (util-linux)"; exit 77; }
bin="$SAKER_BUILDDIR/tests/unit/test_comm"
[[ -x $bin ]] || { echo "SKIP: $bin not built (make check builds it)"; exit 77; }
name=saker-unresolvable-$$
getent hosts "$name" >/dev/null && { echo "SKIP: '$name' resolves here"; exit 77; }
unshare -u true 2>/dev/null || { echo "SKIP: cannot create a UTS namespace here"; exit 77; }

assert_rc 0 "fusion and join over TCP with a host name that does not resolve" -- \
  unshare -u sh -c "hostname $name && exec '$bin' '[fusion]'"
assert_contains "$IT_OUT" "this host's name '$name' does not resolve" "the fallback is reported, naming the host name"
assert_contains "$IT_OUT" "set SAKER_COMM_ADDR" "with the fix"

assert_rc 0 "SAKER_COMM_ADDR still wins over the fallback" -- \
  unshare -u sh -c "hostname $name && SAKER_COMM_ADDR=127.0.0.1 exec '$bin' 'fusion: tensors submitted in different orders are matched by name'"
assert_not_contains "$IT_OUT" "does not resolve" "no fallback message when SAKER_COMM_ADDR is set"
it_finish
