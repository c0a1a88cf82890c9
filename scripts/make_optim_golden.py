#!/usr/bin/python3
"""scripts/make_optim_golden.py - writes tests/golden/optim_pytorch.ctg, the
golden file of tests/test_optim.c (CTG1 format, docs/golden-format.md).

    /usr/bin/python3 scripts/make_optim_golden.py [--out tests/golden]

Three float32 parameter tensors (shapes (23, 19), (19,), (5, 3, 3, 3)) and
50 gradient sets (fixed seed) are run through PyTorch 1.13's optimizers
(torch.optim.SGD/Adam/AdamW/RMSprop/Adagrad; LAMB by the reference formula
below, as in the LAMB paper / Apex FusedLAMB) for 50 steps. The runs are done
in float64 from the float32 initial values and gradients and rounded to
float32, so the golden values carry no float32 noise of their own; the
script also runs them in float32 and prints (and bounds at 1e-6) PyTorch's own
float32 error.

Records:
  param.<i>             f32  initial parameter i
  grad.<i>              f32  (50, *shape_i) gradients of parameter i per step
  case.<name>.kind      i32  ct_optim_kind (0 sgd, 1 adamw, 2 adam, 3 rmsprop, 4 adagrad, 5 lamb)
  case.<name>.hp        f32  [lr, weight_decay, momentum, dampening, nesterov, beta1, beta2, eps,
                              amsgrad, alpha, centered, lr_decay, initial_accumulator_value]
  case.<name>.step<k>.<i> f32 parameter i after k steps, k in CHECKPOINTS
"""
import argparse
import os
import struct

import numpy as np
import torch

SEED = 20240607
SHAPES = [(23, 19), (19,), (5, 3, 3, 3)]
STEPS = 50
CHECKPOINTS = [1, 10, 50]
SGD, ADAMW, ADAM, RMSPROP, ADAGRAD, LAMB = range(6)


def hp(lr, weight_decay=0.0, momentum=0.0, dampening=0.0, nesterov=False, betas=(0.9, 0.999), eps=1e-8,
       amsgrad=False, alpha=0.99, centered=False, lr_decay=0.0, initial_accumulator_value=0.0):
    return dict(lr=lr, weight_decay=weight_decay, momentum=momentum, dampening=dampening, nesterov=nesterov,
                betas=betas, eps=eps, amsgrad=amsgrad, alpha=alpha, centered=centered, lr_decay=lr_decay,
                initial_accumulator_value=initial_accumulator_value)


CASES = [
    ("sgd", SGD, hp(0.1)),
    ("sgd_momentum", SGD, hp(0.05, weight_decay=1e-3, momentum=0.9, dampening=0.1)),
    ("sgd_nesterov", SGD, hp(0.05, weight_decay=1e-2, momentum=0.9, nesterov=True)),
    ("adam", ADAM, hp(0.01, weight_decay=0.01)),
    ("adam_amsgrad", ADAM, hp(0.01, betas=(0.8, 0.99), amsgrad=True)),
    ("adamw", ADAMW, hp(0.01, weight_decay=0.1)),
    ("adamw_amsgrad", ADAMW, hp(0.01, weight_decay=0.1, amsgrad=True)),
    ("rmsprop", RMSPROP, hp(0.01)),
    ("rmsprop_centered", RMSPROP, hp(0.01, weight_decay=0.01, momentum=0.9, alpha=0.9, centered=True)),
    ("adagrad", ADAGRAD, hp(0.1, weight_decay=0.01, lr_decay=0.01, initial_accumulator_value=0.1, eps=1e-10)),
    ("lamb", LAMB, hp(0.01, weight_decay=0.01, eps=1e-6)),
]


def make_opt(kind, h, params):
    if kind == SGD:
        return torch.optim.SGD(params, lr=h["lr"], momentum=h["momentum"], dampening=h["dampening"],
                               weight_decay=h["weight_decay"], nesterov=h["nesterov"])
    if kind in (ADAM, ADAMW):
        cls = torch.optim.Adam if kind == ADAM else torch.optim.AdamW
        return cls(params, lr=h["lr"], betas=h["betas"], eps=h["eps"], weight_decay=h["weight_decay"],
                   amsgrad=h["amsgrad"], foreach=False)
    if kind == RMSPROP:
        return torch.optim.RMSprop(params, lr=h["lr"], alpha=h["alpha"], eps=h["eps"],
                                   weight_decay=h["weight_decay"], momentum=h["momentum"], centered=h["centered"],
                                   foreach=False)
    if kind == ADAGRAD:
        return torch.optim.Adagrad(params, lr=h["lr"], lr_decay=h["lr_decay"], weight_decay=h["weight_decay"],
                                   initial_accumulator_value=h["initial_accumulator_value"], eps=h["eps"],
                                   foreach=False)
    raise ValueError(kind)


class Lamb:
    """LAMB (You et al. 2019; Apex FusedLAMB, DeepSpeed): Adam moments with bias
    correction, u = m_hat / (sqrt(v_hat) + eps) + wd * p, per-tensor trust ratio
    ||p|| / ||u|| (1 when either is 0), p -= lr * trust * u. No grad clipping."""

    def __init__(self, params, lr, betas, eps, weight_decay):
        self.params, self.lr, self.betas, self.eps, self.wd = params, lr, betas, eps, weight_decay
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        bc1, bc2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            u = (m / bc1) / ((v / bc2).sqrt() + self.eps) + self.wd * p
            wn, un = p.norm().item(), u.norm().item()
            trust = wn / un if wn > 0 and un > 0 else 1.0
            p.add_(u, alpha=-self.lr * trust)


def run(kind, h, init, grads, dtype):
    params = [torch.tensor(x, dtype=dtype).requires_grad_() for x in init]
    opt = Lamb(params, h["lr"], h["betas"], h["eps"], h["weight_decay"]) if kind == LAMB else \
        make_opt(kind, h, params)
    out = {}
    for t in range(STEPS):
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g[t], dtype=dtype)
        opt.step()
        if t + 1 in CHECKPOINTS:
            out[t + 1] = [p.detach().to(torch.float32).numpy().copy() for p in params]
    return out


def rec(name, arr, dt=0):
    arr = np.ascontiguousarray(arr)
    nb = name.encode()
    b = struct.pack("<I", len(nb)) + nb + struct.pack("<II", dt, arr.ndim)
    b += struct.pack("<%dQ" % arr.ndim, *arr.shape)
    return b + arr.astype("<f4" if dt == 0 else "<i4").tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    init = [(torch.rand(s) * 2 - 1).numpy() for s in SHAPES]
    # gradients: per-tensor scale, a slowly drifting mean and noise (so moments matter)
    grads = []
    for i, s in enumerate(SHAPES):
        base = torch.randn(s)
        gs = [(0.5 * base + torch.randn(s)) * (0.1 * (i + 1)) for _ in range(STEPS)]
        grads.append(torch.stack(gs).numpy().astype(np.float32))
    records = [rec("param.%d" % i, x) for i, x in enumerate(init)]
    records += [rec("grad.%d" % i, g) for i, g in enumerate(grads)]
    worst = 0.0
    for name, kind, h in CASES:
        ref = run(kind, h, init, grads, torch.float64)
        f32 = run(kind, h, init, grads, torch.float32)
        vec = [h["lr"], h["weight_decay"], h["momentum"], h["dampening"], float(h["nesterov"]), h["betas"][0],
               h["betas"][1], h["eps"], float(h["amsgrad"]), h["alpha"], float(h["centered"]), h["lr_decay"],
               h["initial_accumulator_value"]]
        records.append(rec("case.%s.kind" % name, np.array(kind, np.int32), 1))
        records.append(rec("case.%s.hp" % name, np.array(vec, np.float32)))
        err = 0.0
        for k in CHECKPOINTS:
            for i, (a, b) in enumerate(zip(f32[k], ref[k])):
                err = max(err, float(np.abs(a - b).max() / np.abs(b).max()))
                records.append(rec("case.%s.step%d.%d" % (name, k, i), b))
        print("%-18s PyTorch float32 vs float64: max rel %.2e" % (name, err))
        worst = max(worst, err)
    assert worst < 1e-6, worst
    path = os.path.join(args.out, "optim_pytorch.ctg")
    with open(path, "wb") as f:
        f.write(b"CTG1" + struct.pack("<I", len(records)) + b"".join(records))
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
