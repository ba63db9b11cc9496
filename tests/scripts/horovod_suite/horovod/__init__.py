"""Stand-in for the horovod package, so that a script or test written for Horovod runs on
Saker with no change: ``import horovod.torch as hvd`` gives saker.torch itself.

Only for running Horovod's own tests from outside (tests/scripts/horovod_suite.sh); it is
not installed. Nothing of Horovod's code is here.
"""
