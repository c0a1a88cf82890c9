#!/usr/bin/env python3
"""PyTorch reference run for `ctrain train` on a character-level GPT.

Trains the same model (nanoGPT, the one in scripts/make_transformer_golden.py,
with nanoGPT's dropout placement) with the same recipe on the same corpus and
validation windows as ctrain's text trainer, and prints the validation loss
every `--eval-every` steps:

    EVAL step=<n> val_loss=<x>

The pieces ctrain defines, reproduced here:
  * tokens: the character vocabulary = sorted distinct bytes of the corpus
    (ct_tokenizer_char_fit), validation = the last `val_fraction` of the tokens;
  * validation windows: window k starts at token k*T and holds T+1 tokens
    (ct_text_eval_batch), the first `eval_batches * batch` of them;
  * schedule: linear warmup lr*(s+1)/warmup, then cosine to min_lr over the
    remaining steps (ct_schedule); AdamW with weight decay on >= 2-D weights
    only (optimizer.no_decay_bias_norm); gradient clipping by global norm.
Training windows are random (torch's generator, not ctrain's Philox stream),
so curves are compared at equal steps, not bit for bit. `--init FILE` starts
from ctrain's weights (a safetensors file from a step-0 checkpoint).

Usage: /usr/bin/python3 scripts/torch_gpt_train.py --steps 300 [--threads 2] ...
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_transformer_golden as tg  # noqa: E402


class DropoutGPT(tg.GPT):
    """nanoGPT's dropout: after the embeddings and after each residual branch."""

    def __init__(self, p, *args):
        super().__init__(*args)
        self.drop = nn.Dropout(p)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.drop(self.transformer.wte(ids) + self.transformer.wpe(torch.arange(T)))
        for blk in self.transformer.h:
            x = x + self.drop(blk.attn(blk.ln_1(x)))
            x = x + self.drop(blk.mlp(blk.ln_2(x)))
        return self.lm_head(self.transformer.ln_f(x))


def nanogpt_init(model, n_layer):
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
        elif p.dim() == 2:
            nn.init.normal_(p, 0.0, 0.02)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
        else:
            nn.init.ones_(p)


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    t = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.min_lr + (a.lr - a.min_lr) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="data/text/moby-dick.txt")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--d-model", type=int, default=384)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bf16", action="store_true", help="torch.autocast('cpu', dtype=torch.bfloat16)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    text = open(a.corpus, "rb").read()
    vocab = sorted(set(text))
    lut = {b: i for i, b in enumerate(vocab)}
    tok = torch.tensor([lut[b] for b in text], dtype=torch.long)
    n_val = int(len(tok) * a.val_fraction)
    train, val = tok[: len(tok) - n_val], tok[len(tok) - n_val:]
    T, B = a.context, a.batch
    n_eval = min(a.eval_batches * B, (len(val) - 1) // T)
    ev = torch.stack([val[k * T: k * T + T + 1] for k in range(n_eval)])

    model = DropoutGPT(a.dropout, len(vocab), T, a.n_layer, a.n_head, a.d_model, True, False)
    nanogpt_init(model, a.n_layer)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, a.beta2))
    print(f"ENV torch={torch.__version__} vocab={len(vocab)} params={n_params} train_tokens={len(train)} "
          f"val_tokens={len(val)} eval_windows={n_eval} threads={a.threads} bf16={int(a.bf16)}")
    gen = torch.Generator().manual_seed(a.seed)

    def evaluate():
        model.eval()
        tot = 0.0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            for i in range(0, n_eval, B):
                w = ev[i: i + B]
                tot += F.cross_entropy(model(w[:, :-1]).float().reshape(-1, len(vocab)),
                                       w[:, 1:].reshape(-1)).item() * w.shape[0]
        model.train()
        return tot / n_eval

    t0 = time.time()
    for step in range(a.steps):
        if step % a.eval_every == 0:
            print(f"EVAL step={step} val_loss={evaluate():.4f} time={time.time() - t0:.1f}", flush=True)
        ix = torch.randint(0, len(train) - T - 1, (B,), generator=gen)
        x = torch.stack([train[i: i + T] for i in ix])
        y = torch.stack([train[i + 1: i + T + 1] for i in ix])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, len(vocab)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        if step % 10 == 0:
            print(f"STEP step={step} loss={loss.item():.4f} time={time.time() - t0:.1f}", flush=True)
    print(f"EVAL step={a.steps} val_loss={evaluate():.4f} time={time.time() - t0:.1f}", flush=True)


if __name__ == "__main__":
    main()
