"""Horovod's ElasticSampler over saker.torch's rank and size."""

import math
import random

import torch
import torch.utils.data

from .. import runtime


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: the epoch's indices in one order for every world size
    (shuffled with seed + epoch), minus those already processed, dealt round robin.

    record_batch() after each batch counts the samples all ranks processed; with the
    sampler in a TorchState, a restart at another size continues where the commit was,
    without repeating or skipping samples (except the padding that makes the rest divide
    evenly among the ranks, as DistributedSampler pads). set_epoch() at the end of an epoch."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        self.num_replicas = runtime.size()
        self.rank = runtime.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
