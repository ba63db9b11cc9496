"""SyncBatchNorm: batch normalization with statistics over the global batch (Horovod's
hvd.SyncBatchNorm), for CPU tensors.

In training, each rank's per-channel sum, sum of squares and count are allreduced, so
the normalization (and the running statistics) are those of the whole global batch; the
backward pass allreduces the two per-channel sums the input gradient needs. Weight and
bias gradients stay local: DistributedOptimizer averages them like any other.
In eval mode, or with one rank, it is torch's BatchNorm.
"""

import itertools

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from . import collectives, runtime

_calls = itertools.count()


def _sum_all(t):
    """Sum over ranks; every rank calls SyncBatchNorm layers in the same order."""
    return collectives.allreduce(t, op=collectives.Sum, name=f"SyncBatchNorm.{next(_calls)}")


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, c] + [1] * (x.dim() - 2)
        local = torch.cat([x.sum(dims), (x * x).sum(dims), x.new_tensor([x.numel() / c])])
        total = _sum_all(local.double())
        n = total[-1]
        mean = total[:c] / n
        var = (total[c:2 * c] / n - mean * mean).clamp_(min=0)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean.dtype))
            running_var.mul_(1 - momentum).add_(momentum * (var * n / max(n.item() - 1, 1)).to(running_var.dtype))
        invstd = torch.rsqrt(var + eps).to(x.dtype)
        xhat = (x - mean.to(x.dtype).view(shape)) * invstd.view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.count, ctx.dims, ctx.shape = n.item(), dims, shape
        y = xhat
        if weight is not None:
            y = y * weight.view(shape) + bias.view(shape)
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, invstd, weight = ctx.saved_tensors
        dims, shape, n = ctx.dims, ctx.shape, ctx.count
        c = xhat.shape[1]
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        both = _sum_all(torch.cat([sum_dy, sum_dy_xhat]))
        g_sum_dy, g_sum_dy_xhat = both[:c], both[c:]
        scale = invstd if weight is None else invstd * weight
        dx = scale.view(shape) * (dy - (g_sum_dy / n).view(shape) - xhat * (g_sum_dy_xhat / n).view(shape))
        dw = sum_dy_xhat if weight is not None else None
        db = sum_dy if weight is not None else None
        return dx, dw, db, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """torch.nn.BatchNorm*d with statistics synchronized over all ranks (any input of
    2 or more dimensions: N, C, ...)."""

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm expects an input of 2 or more dimensions (N, C, ...), got {input.dim()}")

    def forward(self, input):
        if not self.training or not runtime.is_initialized() or runtime.size() == 1:
            return super().forward(input)
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        return _SyncBatchNormFn.apply(input, self.weight, self.bias, self.running_mean, self.running_var, self.eps,
                                      momentum)
