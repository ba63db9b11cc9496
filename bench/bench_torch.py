"""One rank of bench/bench_torch (run under saker-run --local -n 2); rank 0 prints one
result line: `result KEY VALUE_S`.

  ddp BACKEND [LABEL] : DDP step time (forward+backward+SGD) of a ~25M-parameter MLP on CPU, and
                the allreduce time per step (the gradients in DDP's 25 MiB buckets,
                allreduced over the same process group, outside training); the same step
                with DDP's communication off (no_sync) and with a backend that costs
                nothing (a comm hook that returns the bucket at once), the three
                interleaved step by step; LABEL.step_over_free: the median of each
                rep's step/free pair; LABEL.{step,nosync,free}_cpu: the process's CPU
                seconds per step (all threads, mean of the ranks' medians).
  ddp-breakdown BACKEND : where a DDP step's time goes beside the compute, rank by rank:
                CPU ms per step of the main thread, the backend's Python completion thread
                and the other threads together (libsaker_comm's worker and fusion threads,
                gloo's), for the step and the free backend interleaved; and, inside DDP
                steps, each bucket's allreduce latency (submit to future done) and how
                long backward() goes on after the last submit, against the same buckets
                allreduced alone.
  fused [LABEL] : a 64 MiB fp32 allreduce from Python, through saker.torch's fusion
                buffer (hvd.allreduce_) and through the raw binding (one call); keys
                LABEL.fused64 and LABEL.raw64 (LABEL: python unless given).
  collectives : reduce-scatter, alltoall and allgather busbw (GB/s, nccl-tests' definition:
                whole buffer x (n-1)/n / time) at 1, 4, 16 and 64 MiB, over the saker
                backend, over torch's gloo backend in the same processes (a gloo group
                beside saker's), and through saker.torch's Horovod API (hvd.reducescatter,
                hvd.alltoall, hvd.allgather, with their cross-rank check); interleaved
                block by block, so that a busy moment hits every way alike.
"""

import os
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist

import saker.torch as hvd

torch.set_num_threads(1)


def median_time(fn, reps, warmup=2, sync=lambda: None):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def free_allreduce(state, bucket):
    """A DDP comm hook that communicates nothing: the bucket, as a finished future."""
    done = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


def model_25m():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048),
                               torch.nn.ReLU(), torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 2048))


def ddp(backend, label, reps=7):
    dist.init_process_group(backend)
    model = model_25m()
    params = sum(p.numel() for p in model.parameters())
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(16, 2048), torch.randn(16, 2048)
    # A backend that costs nothing: DDP does all its own work (copying gradients into
    # buckets, copying them back) but the allreduce is a finished future. No backend's
    # step can be shorter; no_sync skips DDP's copies too, so it is not that floor.
    free = torch.nn.parallel.DistributedDataParallel(model)
    free.register_comm_hook(None, free_allreduce)

    def step(wrapper):
        opt.zero_grad()
        torch.nn.functional.mse_loss(wrapper(x), y).backward()
        opt.step()

    def step_without_communication():  # the floor any backend's step time can reach
        with net.no_sync():
            step(net)

    ways = {"step": lambda: step(net), "nosync": step_without_communication, "free": lambda: step(free)}
    # Interleaved step by step, the order turned each rep: on a shared machine the load
    # drifts within seconds, and timing each way's reps in a block put a 2x drift between
    # the step and its floor (438 vs 889 ms floors in two runs). Each rep's step/free is a
    # pair taken seconds apart. The process's CPU time per step (all its threads: the
    # backend's progress and completion threads too) hardly depends on the load at all:
    # step_cpu - free_cpu is what the backend burns beside the compute.
    wall, cpu = {w: [] for w in ways}, {w: [] for w in ways}
    names = list(ways)
    for rep in range(reps + 2):
        for w in names[rep % 3:] + names[:rep % 3]:
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            ways[w]()
            if rep >= 2:  # 2 warm-up reps
                wall[w].append(time.perf_counter() - t0)
                cpu[w].append(time.process_time() - c0)
    paired = [s / f for s, f in zip(wall["step"], wall["free"])]
    # CPU per step, the mean of both ranks' medians (rank 0 also serves a store).
    cpus = torch.tensor([statistics.median(cpu[w]) for w in names], dtype=torch.float64)
    dist.all_reduce(cpus)
    cpus /= dist.get_world_size()
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    buckets = flat.split((25 << 20) // 4)

    def allreduce_all():
        for w in [dist.all_reduce(b, async_op=True) for b in buckets]:
            w.wait()

    t_ar = median_time(allreduce_all, 7, sync=dist.barrier)
    if dist.get_rank() == 0:
        print(f"result params {params}")
        print(f"result {label}.step {statistics.median(wall['step']):.6f}")
        print(f"result {label}.allreduce {t_ar:.6f}")
        print(f"result {label}.nosync {statistics.median(wall['nosync']):.6f}")
        print(f"result {label}.free {statistics.median(wall['free']):.6f}")
        print(f"result {label}.step_over_free {statistics.median(paired):.6f}")
        for w, c in zip(names, cpus.tolist()):
            print(f"result {label}.{w}_cpu {c:.6f}")
        sys.stdout.flush()


def thread_cpu():
    """CPU seconds of each thread of this process, by native thread id (Linux /proc)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = int(open(f"/proc/self/task/{tid}/schedstat").read().split()[0]) / 1e9
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return out


def ddp_breakdown(backend, reps=6):
    dist.init_process_group(backend)
    model = model_25m()
    net = torch.nn.parallel.DistributedDataParallel(model)
    free = torch.nn.parallel.DistributedDataParallel(model)
    free.register_comm_hook(None, free_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(16, 2048), torch.randn(16, 2048)
    pg = dist.distributed_c10d._get_default_group()
    buckets = []  # (bytes, submitted, done) of this step's allreduces
    real = type(pg).allreduce

    def traced(tensors, opts=dist.AllreduceOptions()):
        rec = [tensors[0].numel() * tensors[0].element_size(), time.perf_counter(), None]
        work = real(pg, tensors, opts)
        work.get_future().then(lambda _: rec.__setitem__(2, time.perf_counter()))
        buckets.append(rec)
        return work
    try:
        pg.allreduce = traced  # the instance only: DDP's reducer calls through the Python trampoline
    except AttributeError:
        pass  # a C++ process group (gloo): its buckets are not seen; the CPU figures still are

    def step(wrapper):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(wrapper(x), y)
        buckets.clear()
        loss.backward()
        tail = time.perf_counter() - buckets[-1][1] if buckets else 0.0
        opt.step()
        return tail

    def roles():
        main = threading.main_thread().native_id
        done = [t.native_id for t in threading.enumerate() if t.name == "saker-pg-completion"]
        return lambda tid: "main" if tid == main else "completion" if tid in done else "other"

    for w in (net, free, net, free):
        step(w)  # warm-up; DDP rebuilds its buckets after the first step
    cpu = {w: {"main": 0.0, "completion": 0.0, "other": 0.0} for w in ("step", "free")}
    latency, tails = [], []
    for rep in range(reps):
        for w, wrapper in (("step", net), ("free", free))[::1 if rep % 2 == 0 else -1]:
            dist.barrier()
            role, c0 = roles(), thread_cpu()
            tail = step(wrapper)
            for tid, c in thread_cpu().items():
                cpu[w][role(tid)] += (c - c0.get(tid, 0.0)) / reps
            if w == "step":
                tails.append(tail)
                latency.append([(b, d - s) for b, s, d in buckets])
    r = dist.get_rank()
    for w, by in cpu.items():
        print(f"rank {r} {backend} {w}: cpu ms/step " + ", ".join(f"{k} {v*1e3:.1f}" for k, v in by.items()) +
              f", all {sum(by.values())*1e3:.1f}", flush=True)
    layout = [b for b, _ in latency[0]]
    if not layout:
        dist.destroy_process_group()
        return
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    alone = []
    for _ in range(reps):
        dist.barrier()
        parts, t0 = [], time.perf_counter()
        for b in flat.split([n // 4 for n in layout]):
            parts.append(real(pg, [b], dist.AllreduceOptions()))
        for work in parts:
            work.wait()
        alone.append(time.perf_counter() - t0)
    print(f"rank {r} {backend} buckets {'+'.join(f'{b/2**20:.0f}' for b in layout)} MiB: latency in DDP ms, median " +
          ", ".join(f"{statistics.median(l[i][1] for l in latency)*1e3:.1f}" for i in range(len(layout))) +
          f"; backward after the last submit median {statistics.median(tails)*1e3:.1f} ms "
          f"(min {min(tails)*1e3:.1f}, max {max(tails)*1e3:.1f}); the same buckets alone "
          f"{statistics.median(alone)*1e3:.1f} ms in all", flush=True)
    dist.destroy_process_group()


def fused(label):
    hvd.init()
    from saker.torch import runtime
    t = torch.ones(16 << 20)  # 64 MiB of fp32
    comm = runtime.comm()
    ways = {"fused64": lambda: hvd.allreduce_(t, op=hvd.Sum, name="bench.64MiB"),
            "raw64": lambda: comm.allreduce(t.data_ptr(), t.numel(), 0, 0)}
    for way in ways.values():
        way(), way()  # warm-up
    times = {name: [] for name in ways}
    for _ in range(15):  # interleaved: a busy moment of the machine hits both ways alike
        for name, way in ways.items():
            hvd.barrier()
            t0 = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - t0)
    if hvd.rank() == 0:
        for name, ts in times.items():
            print(f"result {label}.{name} {statistics.median(ts):.6f}", flush=True)


def _gloo_reduce_scatter(out, inp, group):
    """torch 1.13's gloo has no reduce_scatter: its users allreduce and keep their slice."""
    try:
        dist.reduce_scatter_tensor(out, inp, group=group)
    except RuntimeError:
        buf = inp.clone()
        dist.all_reduce(buf, group=group)
        out.copy_(buf.narrow(0, dist.get_rank() * out.numel(), out.numel()))


def collectives(sizes):
    dist.init_process_group("saker")
    gloo = dist.new_group(backend="gloo")
    hvd.init()
    n, r = dist.get_world_size(), dist.get_rank()
    for nbytes in sizes:
        part = nbytes // 4 // n
        inp, out_part, out_all = torch.full((part * n,), float(r + 1)), torch.empty(part), torch.empty(part * n)
        mine = torch.full((part,), float(r + 1))
        ways = {
            "reduce_scatter": {"saker": lambda: dist.reduce_scatter_tensor(out_part, inp),
                               "gloo": lambda: _gloo_reduce_scatter(out_part, inp, gloo),
                               "hvd": lambda: hvd.reducescatter(inp, op=hvd.Sum, name="bench.rs")},
            "alltoall": {"saker": lambda: dist.all_to_all_single(out_all, inp),
                         "gloo": lambda: dist.all_to_all_single(out_all, inp, group=gloo),
                         "hvd": lambda: hvd.alltoall(inp, name="bench.a2a")},
            "allgather": {"saker": lambda: dist.all_gather_into_tensor(out_all, mine),
                          "gloo": lambda: dist.all_gather(list(out_all.split(part)), mine, group=gloo),
                          "hvd": lambda: hvd.allgather(mine, name="bench.ag")},
        }
        calls = max(1, min(20, (64 << 20) // nbytes))
        for op, by_way in ways.items():
            for way in by_way.values():
                way(), way()  # warm-up
            times = {w: [] for w in by_way}
            for _ in range(7):
                for w, fn in by_way.items():
                    dist.barrier()
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    times[w].append((time.perf_counter() - t0) / calls)
            if r == 0:
                for w, ts in times.items():
                    busbw = nbytes * (n - 1) / n / statistics.median(ts) / 1e9
                    print(f"result {op}.{nbytes}.{w} {busbw:.6f}", flush=True)
    hvd.shutdown()
    dist.destroy_process_group()


if sys.argv[1] == "collectives":
    collectives([int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "1048576,4194304,16777216,67108864").split(",")])
elif sys.argv[1] == "ddp-breakdown":
    ddp_breakdown(sys.argv[2])
elif sys.argv[1] == "ddp":
    ddp(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else sys.argv[2])
else:
    fused(sys.argv[2] if len(sys.argv) > 2 else "python")
