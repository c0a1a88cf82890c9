"""bench/zero_torch.py - PyTorch's side of bench/zero.sh: GPT-2 124M (nanoGPT's GPT from bench/torch_step.py:
12 layers, 12 heads, d_model 768, vocab 50257, tied LM head, tanh GELU, wpe of SEQ rows as ctrain's gpt2-124m
at context SEQ) trained by AdamW (lr 1e-3, weight decay 0.01, clip_grad_norm 1: ctrain's recipe) on BATCH x SEQ
random tokens per rank, one thread per rank, torch.distributed over gloo on CPU. One process per rank, started by
mpirun (Open MPI's OMPI_COMM_WORLD_RANK / _SIZE become RANK / WORLD_SIZE; MASTER_ADDR 127.0.0.1, MASTER_PORT
from CT_BENCH_PORT, default 29541). Modes:
    ddp            DistributedDataParallel (gradient_as_bucket_view: no second copy of the gradients)
    ddp-zero1      the same with torch.distributed.optim.ZeroRedundancyOptimizer (~ ZeRO-1: the optimizer state
                   sharded over the ranks)
    fsdp-grad-op   FullyShardedDataParallel SHARD_GRAD_OP (~ ZeRO-2), one FSDP unit per transformer block
    fsdp-full      FullyShardedDataParallel FULL_SHARD (~ ZeRO-3), one FSDP unit per transformer block
Prints (rank 0) "TORCH mode=... n_params=... state_mib=... step_s=t1,t2,..." (state: this rank's parameters +
gradients + optimizer state after the last step, MiB), and every rank "TORCH_RSS rank=r vmhwm_mib=..." (its
/proc/self/status VmHWM at the end). When a mode cannot run (FSDP on CPU), rank 0 prints
"TORCH_ERROR mode=...: <the exception, verbatim>" and the process exits with status 3.

usage: mpirun -np N /usr/bin/python3 bench/zero_torch.py --mode ddp [--steps 6] [--seq 64] [--batch 2]
"""
import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_step import build_gpt  # noqa: E402 (nanoGPT's GPT, the same module as bench/run.sh's gpt2)


def vmhwm_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True, choices=["ddp", "ddp-zero1", "fsdp-grad-op", "fsdp-full"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2, help="rows per rank")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("CT_BENCH_PORT", "29541"))

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    c = dict(vocab=50257, context=a.seq, n_layer=12, n_head=12, d=768, gelu_tanh=True)
    model = build_gpt(nn, torch, c)
    n_params = sum(p.numel() for p in model.parameters())
    block_cls = type(model.transformer.h[0])
    g = torch.Generator().manual_seed(1000 + rank)
    toks = torch.randint(0, c["vocab"], (a.batch, a.seq + 1), generator=g)
    x, y = toks[:, :-1].contiguous(), toks[:, 1:].contiguous()
    lossf = nn.CrossEntropyLoss()
    times = []
    try:
        if a.mode.startswith("ddp"):
            from torch.nn.parallel import DistributedDataParallel as DDP
            wrapped = DDP(model, gradient_as_bucket_view=True)
            clip = lambda: torch.nn.utils.clip_grad_norm_(wrapped.parameters(), 1.0)  # noqa: E731
        else:
            import functools
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
            from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
            strategy = ShardingStrategy.FULL_SHARD if a.mode == "fsdp-full" else ShardingStrategy.SHARD_GRAD_OP
            wrapped = FSDP(model, sharding_strategy=strategy,
                           auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                              transformer_layer_cls={block_cls}))
            clip = lambda: wrapped.clip_grad_norm_(1.0)  # noqa: E731
        if a.mode == "ddp-zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(wrapped.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3,
                                          weight_decay=0.01, foreach=False)
        else:
            opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3, weight_decay=0.01, foreach=False)
        for _ in range(a.steps):
            t0 = time.perf_counter()
            out = wrapped(x)
            loss = lossf(out.view(-1, out.size(-1)), y.view(-1))
            loss.backward()
            clip()
            opt.step()
            if _ == a.steps - 1:  # this rank's state, with the gradients still there
                mib = sum(p.numel() * p.element_size() for p in wrapped.parameters())
                mib += sum(p.grad.numel() * p.grad.element_size() for p in wrapped.parameters() if p.grad is not None)
                inner = opt.optim if a.mode == "ddp-zero1" else opt  # ZeroRedundancyOptimizer: this rank's shard
                mib += sum(t.numel() * t.element_size() for s in inner.state.values() for t in s.values()
                           if torch.is_tensor(t) and t.dim() > 0)
                state_mib = mib / 1048576.0
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
    except Exception as e:  # FSDP in torch 1.13 on CPU: report it verbatim, the bench compares with DDP only
        if rank == 0:
            msg = "".join(traceback.format_exception_only(type(e), e)).strip().replace("\n", " | ")
            print("TORCH_ERROR mode=%s: %s" % (a.mode, msg), flush=True)
            traceback.print_exc()
        sys.exit(3)
    sys.stdout.flush()
    dist.barrier()
    print("TORCH_RSS rank=%d vmhwm_mib=%.1f" % (rank, vmhwm_mib()), flush=True)
    if rank == 0:
        print("TORCH mode=%s world=%d n_params=%d state_mib=%.1f loss=%.4f step_s=%s" %
              (a.mode, world, n_params, state_mib, loss.item(), ",".join("%.4f" % t for t in times)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
