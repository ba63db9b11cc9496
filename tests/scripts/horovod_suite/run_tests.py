"""One rank's side of tests/scripts/horovod_suite.sh: runs tests of Horovod's PyTorch suite
(test/parallel/test_torch.py, which the caller fetched; it is not in this tree) in this
process, as Horovod's own CI does (one pytest process per rank), with ``import
horovod.torch`` resolving to saker.torch. For each test it prints

    hvd-suite rank R/N TEST start
    hvd-suite rank R/N TEST OUTCOME[: first line of the reason]

with OUTCOME passed, failed or skipped. A failed test ends this rank (exit 4), and a test
still running after LIMIT seconds prints ``hang`` and ends it (exit 3): the caller runs the
tests after it in a new launch.

    saker-run --local -n 2 -- python3 run_tests.py HOROVOD_TEST_DIR LIMIT TEST [TEST...]

The rank gets the environment Horovod's Gloo launcher (horovodrun --gloo) gives it,
HOROVOD_RANK/SIZE/LOCAL_*/CROSS_*, from saker-run's: the suite reads it to take its
Gloo branch (init -> shutdown -> init is tested, each test ends with barrier + shutdown).
"""

import faulthandler
import os
import sys
import threading


def horovod_env():
    """Horovod's Gloo launcher variables from saker-run's (the suite compares hvd.rank() to them)."""
    rank, size = os.environ["SAKER_RANK"], os.environ["SAKER_WORLD_SIZE"]
    names = {"HOROVOD_RANK": rank, "HOROVOD_SIZE": size,
             "HOROVOD_LOCAL_RANK": os.environ.get("SAKER_LOCAL_RANK", rank),
             "HOROVOD_LOCAL_SIZE": os.environ.get("LOCAL_WORLD_SIZE", size),
             "HOROVOD_CROSS_RANK": os.environ.get("GROUP_RANK", "0"),
             "HOROVOD_CROSS_SIZE": os.environ.get("GROUP_WORLD_SIZE", "1")}
    for name, value in names.items():
        os.environ.setdefault(name, value)
    return int(rank), int(size)


_OUT = 1  # the real standard output (pytest redirects descriptor 1 while a test runs)


def say(text):
    """One line, never glued to another rank's or pytest's unterminated output."""
    sys.stdout.flush()
    os.write(_OUT, ("\n" + text.replace("\n", " ")[:400] + "\n").encode())


class Reporter:
    """pytest plugin: a start line per test, then its outcome (a failing setup or teardown
    fails the test too), and a watchdog that reports a hang and ends the rank."""

    def __init__(self, prefix, limit):
        self.prefix, self.limit = prefix, limit
        self.outcome, self.reason, self.timer = None, "", None

    def pytest_runtest_logstart(self, nodeid, location):
        name = nodeid.split("::")[-1]
        self.outcome, self.reason = None, ""
        say(f"{self.prefix} {name} start")
        self.timer = threading.Timer(self.limit, self.hung, args=(name,))
        self.timer.daemon = True
        self.timer.start()

    def hung(self, name):
        say(f"{self.prefix} {name} hang: still running after {self.limit:g} s")
        faulthandler.dump_traceback(file=_OUT, all_threads=True)  # where each thread waits
        os._exit(3)

    def pytest_runtest_logreport(self, report):
        if report.failed or (report.skipped and self.outcome != "failed"):
            self.outcome = "failed" if report.failed else "skipped"
            self.reason = self.reason or first_line(report)
        elif report.when == "call" and report.passed and self.outcome is None:
            self.outcome = "passed"

    def pytest_runtest_logfinish(self, nodeid, location):
        self.timer.cancel()
        outcome = self.outcome or "failed"
        reason = self.reason if self.outcome else "the test did not run"
        say(f"{self.prefix} {nodeid.split('::')[-1]} {outcome}" + (f": {reason}" if reason else ""))
        if outcome == "failed":
            # A failed test may leave the communicator unusable (a peer's error, a timeout):
            # end the launch (saker-run stops the other ranks), and the caller runs the rest
            # in a new one, so that no test fails for the one before it.
            say(f"{self.prefix} stop after a failure")
            os._exit(4)


def first_line(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.splitlines()[0] if crash.message else ""
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[2])
    return str(report.longrepr).strip().splitlines()[-1] if report.longrepr else ""


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: run_tests.py HOROVOD_TEST_DIR LIMIT_SECONDS TEST [TEST...]")
    test_dir, limit, names = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    suite = os.path.join(test_dir, "parallel", "test_torch.py")
    if not os.path.isfile(suite):
        sys.exit(f"run_tests.py: {suite} is not there; expected HOROVOD_TEST_DIR to hold Horovod's "
                 "test/ (parallel/test_torch.py and utils/common.py)")
    rank, size = horovod_env()
    global _OUT
    _OUT = os.dup(1)  # so that the watchdog's line gets out while pytest captures the test's output
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the horovod stand-in
    import pytest
    pytest.main([f"{suite}::TorchTests::{n}" for n in names] +
                ["-q", "-p", "no:cacheprovider", "--no-header", "--tb=short"],
                plugins=[Reporter(f"hvd-suite rank {rank}/{size}", limit)])
    say(f"hvd-suite rank {rank}/{size} done")


if __name__ == "__main__":
    main()
