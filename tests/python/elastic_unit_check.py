"""hvd.elastic's pieces on one rank (saker-run --local -n 1), for tests/python/torch_elastic.sh.

    elastic_unit_check.py pieces        flatten/unflatten, the resize notice's rules, restore()
    elastic_unit_check.py commit DIR    commits a scheduler's state and stops on a notice (exit 75)
    elastic_unit_check.py resume DIR    resumes it: the scheduler, attributes and model as committed
"""

import collections
import os
import shutil
import sys
import tempfile

import torch

import saker.torch as hvd
from saker.torch.elastic import notice, store


def check(ok, what):
    if not ok:
        raise SystemExit(f"elastic unit check failed: {what}")


def pieces():
    # flatten/unflatten: tensors become named datasets, the rest travels as is.
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    value = {"model": model.state_dict(), "opt": opt.state_dict(), "pair": (torch.ones(2), "x"),
             "odd keys": {"a b": torch.zeros(1), "a_b": torch.ones(1)}, "c": torch.zeros(2, dtype=torch.complex64)}
    tensors = {}
    skeleton = store._flatten(value, "state", tensors)
    check("state.model.0.weight" in tensors and "state.opt.state.0.exp_avg" in tensors, f"dataset names {list(tensors)}")
    check({"state.odd_keys.a_b", "state.odd_keys.a_b-"} <= set(tensors), f"colliding names made unique: {list(tensors)}")
    check(isinstance(skeleton["c"], torch.Tensor), "a dtype saker-ckpt cannot store stays in the pickled part")
    back = store._unflatten(skeleton, tensors)
    check(isinstance(back["model"], collections.OrderedDict) and back["model"]._metadata == value["model"]._metadata,
          "a module's state_dict keeps its version metadata")
    check(all(torch.equal(back["model"][k], v) for k, v in value["model"].items()), "model tensors round-trip")
    check(back["pair"][1] == "x" and torch.equal(back["pair"][0], torch.ones(2)), "tuples round-trip")
    # The resize notice: only a regular file of this user, naming another size, counts.
    d = tempfile.mkdtemp()
    path = os.path.join(d, "resize")
    os.environ["SAKER_RESIZE_NOTICE"] = path
    check(notice.requested_size() == (False, 0), "no notice, no request")
    with open(path, "w") as f:
        f.write("1\n")
    check(notice.requested_size() == (False, 1), "a notice naming this size is no request")
    with open(path, "w") as f:
        f.write("4\n")
    check(notice.requested_size() == (True, 4), "a notice naming 4 ranks")
    with open(path, "w") as f:
        f.write("many\n")
    check(notice.requested_size() == (True, 0), "an unreadable size still asks for a restart")
    os.rename(path, path + ".real")
    os.symlink(path + ".real", path)
    check(notice.requested_size() == (False, 0), "a symbolic link is not followed")
    # restore() undoes in-place changes of attributes too (a copy is committed).
    os.environ["SAKER_ELASTIC_DIR"] = os.path.join(d, "commits")
    state = hvd.elastic.TorchState(model, opt, history=[1])
    state.history.append(2)
    state.commit()
    state.history.append(3)
    state.restore()
    check(state.history == [1, 2], f"restore() gives the committed list, got {state.history}")
    state._store.flush()  # the write runs in the background
    check(sorted(os.listdir(os.path.join(d, "commits")))[0].startswith("ckpt-"), "the commit persisted")
    shutil.rmtree(d)
    print("elastic unit ok: pieces", flush=True)


def training_objects():
    torch.manual_seed(5)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def commit_then_resume(mode):
    model, opt, sched = training_objects()
    state = hvd.elastic.TorchState(model, opt, scheduler=sched, step=0)

    @hvd.elastic.run
    def train(state):
        while state.step < 5:
            opt.zero_grad()
            model(torch.ones(1, 4)).sum().backward()
            opt.step()
            sched.step()
            state.step += 1
            if mode == "commit" and state.step == 3:
                with open(os.environ["SAKER_RESIZE_NOTICE"], "w") as f:
                    f.write("2\n")
            state.commit()

    if mode == "resume":
        check(state.step == 0, "nothing restored before run()")
    train(state)
    check(state.scheduler is sched, "the script's scheduler object is the one restored into")
    check(sched.last_epoch == 5 and abs(opt.param_groups[0]["lr"] - 0.025) < 1e-12,
          f"scheduler at epoch {sched.last_epoch}, lr {opt.param_groups[0]['lr']}: expected 5 and 0.025")
    print(f"elastic unit ok: {mode}, weight {model.weight.sum().item():.6f}", flush=True)


hvd.init()
if sys.argv[1] == "pieces":
    pieces()
else:
    commit_then_resume(sys.argv[1])
