"""horovod.runner: only what Horovod's test helpers import (util.threads.in_thread)."""
