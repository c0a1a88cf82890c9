#!/usr/bin/python3
"""bench/torch_dynshape.py - PyTorch's side of bench/bench_dynshape.c: the
same GPT (build_gpt of torch_step.py, dropout 0) trains (forward + backward +
AdamW, nanoGPT's decay groups) on batches of the lengths bench_dynshape
wrote (--lengths FILE: per line the batch's T and each row's real length),
two ways, interleaved batch by batch:
  variable  each batch at its own T (PyTorch eager is dynamic by nature);
  padded    every batch at the context, positions past a row's length
            ignored by the loss (ignore_index -100).
Token ids are random (the time depends on the shapes only). Prints per round
the seconds of each mode and
  RESULT torch mode=variable ms_per_step=.. tok_per_s=..
with the median round, and padded / variable.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_step import build_gpt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=85)
    a = ap.parse_args()
    import torch
    import torch.nn as nn

    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    c = {"vocab": a.vocab, "context": a.context, "n_layer": a.layers, "n_head": a.heads, "d": a.d,
         "gelu_tanh": False}
    model = build_gpt(nn, torch, c)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}], lr=1e-3)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)
    batches = []
    with open(a.lengths) as f:
        for line in f:
            v = [int(t) for t in line.split()]
            T, lens = v[0], v[1:]
            B = len(lens)
            ids = torch.randint(0, a.vocab, (B, a.context))
            lab = torch.randint(0, a.vocab, (B, a.context))
            for r, l in enumerate(lens):
                lab[r, l:] = -100
            batches.append((T, ids, lab))
    real = sum(int((lab != -100).sum()) for _, _, lab in batches)

    def step(x, y):
        t0 = time.perf_counter()
        out = model(x)
        loss = loss_fn(out.view(-1, out.size(-1)), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    for T, ids, lab in batches:  # warmup: every shape once
        step(ids[:, :T].contiguous(), lab[:, :T].contiguous())
    step(batches[0][1], batches[0][2])
    ts = {"variable": [], "padded": []}
    ratios = []  # padded / variable of the same batch, back to back
    for r in range(a.rounds):
        tv = tp = 0.0
        for k, (T, ids, lab) in enumerate(batches):
            order = (0, 1) if (k + r) % 2 == 0 else (1, 0)
            t2 = [0.0, 0.0]
            for m in order:
                if m == 0:
                    t2[0] = step(ids[:, :T].contiguous(), lab[:, :T].contiguous())
                else:
                    t2[1] = step(ids, lab)
            tv += t2[0]
            tp += t2[1]
            ratios.append(t2[1] / t2[0])
        ts["variable"].append(tv)
        ts["padded"].append(tp)
        print(f"torch round {r + 1}: variable {tv:.3f} s  padded {tp:.3f} s", flush=True)
    med = {m: statistics.median(v) for m, v in ts.items()}
    for m in ("variable", "padded"):
        print(f"RESULT torch mode={m} ms_per_step={1e3 * med[m] / len(batches):.2f} tok_per_s={real / med[m]:.0f}")
    print(f"torch {torch.__version__}: variable lengths vs padding to the context (padded / variable): "
          f"median rounds {med['padded'] / med['variable']:.2f}x, median of paired steps "
          f"{statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
