"""horovod.runner.util.threads.in_thread, which Horovod's test helpers import: run a
callable in a daemon thread and hand the thread back."""

import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    def quiet(*a):
        try:
            target(*a)
        except BaseException:  # silent=True: the caller said the thread's errors do not matter
            pass
    thread = threading.Thread(target=quiet if silent else target, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
