"""bench/dist_torch.py - PyTorch DDP on the same MLP workload as bench/dist.sh
(784-1024-1024-10, ReLU, dropout 0.2, AdamW lr 1e-3 wd 0.01, global batch
128), 2 processes x 1 thread over gloo on this host, DDP's own buckets (25
MiB, overlapped with backward). Synthetic MNIST-shaped data: this times the
step, not the learning. Prints one line per setting:
    torch-ddp <setting> <samples/s> <ms/step>
settings: "ddp" (fp32 buckets) and "ddp+fp16" (DDP's fp16_compress_hook).
Steps 4-13 are timed, as bench/dist.sh's profile window.

usage: /usr/bin/python3 bench/dist_torch.py [ranks]
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world, setting, q):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("CT_BENCH_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Dropout(0.2), nn.Linear(1024, 1024),
                          nn.ReLU(), nn.Dropout(0.2), nn.Linear(1024, 10))
    ddp = DDP(model, bucket_cap_mb=25)
    if setting == "ddp+fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.01)
    b = 128 // world
    x = torch.rand(b, 1, 28, 28)
    y = torch.randint(0, 10, (b,))
    lossf = nn.CrossEntropyLoss()
    times = []
    for step in range(14):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = lossf(ddp(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    dist.destroy_process_group()
    if rank == 0:
        q.put(sum(times[3:13]) / 10)


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ctx = mp.get_context("spawn")
    for setting in ("ddp", "ddp+fp16"):
        q = ctx.SimpleQueue()
        mp.spawn(worker, args=(world, setting, q), nprocs=world, join=True)
        s = q.get()
        print("torch-ddp %s %.1f %.1f" % (setting, 128 / s, 1e3 * s), flush=True)


if __name__ == "__main__":
    main()
