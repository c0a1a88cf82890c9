#!/usr/bin/python3
"""Writes tests/golden/schedules.txt: 100 learning rates per case from
PyTorch 1.13's schedulers (run with Debian's python3-torch: /usr/bin/python3).

Value t is optimizer.param_groups[0]["lr"] when the (t+1)-th optimizer.step()
runs, with scheduler.step() after every optimizer step. Warmup compositions
are SequentialLR([LinearLR(start_factor, total_iters=I), decay], [W]);
inverse_sqrt (not in PyTorch) is the formula in include/ctrain/schedule.h.
Line format: NAME v0 v1 ... v99 (plateau cases: NAME then 'metric' line).
Case names and parameters are mirrored in tests/test_schedule.c."""
import math
import os
import warnings

import torch
from torch.optim import lr_scheduler as L

warnings.filterwarnings("ignore")
N = 100
BASE = 0.1


def opt():
    p = torch.nn.Parameter(torch.zeros(1))
    return torch.optim.SGD([p], lr=BASE, momentum=0.9)


def run(make, n=N):
    o = opt()
    s = make(o)
    out = []
    for _ in range(n):
        out.append(o.param_groups[0]["lr"])
        o.step()
        s.step()
    return out


def warm(make_decay, w, sf, iters=None):
    def f(o):
        a = L.LinearLR(o, start_factor=sf, end_factor=1.0, total_iters=w if iters is None else iters)
        b = make_decay(o)
        return L.SequentialLR(o, [a, b], milestones=[w])
    return f


cases = [
    ("constant", lambda o: L.LambdaLR(o, lambda t: 1.0)),
    ("step", lambda o: L.StepLR(o, step_size=7, gamma=0.5)),
    ("multistep", lambda o: L.MultiStepLR(o, milestones=[10, 25, 60], gamma=0.3)),
    ("exponential", lambda o: L.ExponentialLR(o, gamma=0.97)),
    ("cosine", lambda o: L.CosineAnnealingLR(o, T_max=40, eta_min=0.001)),
    ("cosine_restarts", lambda o: L.CosineAnnealingWarmRestarts(o, T_0=10, T_mult=2, eta_min=0.002)),
    ("cosine_restarts1", lambda o: L.CosineAnnealingWarmRestarts(o, T_0=13, T_mult=1, eta_min=0.0)),
    ("linear", lambda o: L.LinearLR(o, start_factor=0.9, end_factor=0.05, total_iters=60)),
    ("polynomial", lambda o: L.PolynomialLR(o, total_iters=80, power=2.0)),
    ("one_cycle_cos", lambda o: L.OneCycleLR(o, max_lr=0.5, total_steps=100, pct_start=0.3)),
    ("one_cycle_linear", lambda o: L.OneCycleLR(o, max_lr=0.2, total_steps=120, pct_start=0.25,
                                                  anneal_strategy="linear", div_factor=10, final_div_factor=100)),
    ("warmup_cosine", warm(lambda o: L.CosineAnnealingLR(o, T_max=90, eta_min=0.001), 10, 0.1)),
    ("warmup_step", warm(lambda o: L.StepLR(o, step_size=15, gamma=0.5), 8, 0.25)),
    ("warmup_multistep", warm(lambda o: L.MultiStepLR(o, milestones=[20, 50], gamma=0.1), 5, 0.2)),
    ("warmup_exponential", warm(lambda o: L.ExponentialLR(o, gamma=0.95), 12, 0.5)),
    ("warmup_restarts", warm(lambda o: L.CosineAnnealingWarmRestarts(o, T_0=10, T_mult=2, eta_min=0.001), 6, 0.1)),
    ("warmup_linear", warm(lambda o: L.LinearLR(o, start_factor=1.0, end_factor=0.01, total_iters=70), 10, 0.1)),
    ("warmup_polynomial", warm(lambda o: L.PolynomialLR(o, total_iters=50, power=0.5), 10, 0.3)),
    ("warmup_constant", warm(lambda o: L.LambdaLR(o, lambda t: 1.0), 10, 0.05)),
    # ctrain's historical ramp lr*(t+1)/W: LinearLR(1/W, total_iters=W-1), milestone W
    ("legacy_warmup_cosine", warm(lambda o: L.CosineAnnealingLR(o, T_max=80, eta_min=0.0005), 20, 1 / 20, 19)),
]

lines = []
for name, make in cases:
    lines.append(name + " " + " ".join("%.17g" % v for v in run(make)))


# Schedules in epochs (recipe keys warmup_epochs, step_size_epochs, cosine_epochs, cosine_after; mirrored in
# tests/test_schedule.c's recipe cases): SPE optimizer steps per epoch. "per_epoch" cases call
# scheduler.step() once per epoch (the guide's formulas in epochs); the others are the same schedulers with
# lengths of epochs x SPE steps, stepped every optimizer step (what ctrain runs).
def run_per_epoch(make, spe, n=N):
    o = opt()
    s = make(o)
    out = []
    for i in range(n):
        out.append(o.param_groups[0]["lr"])
        o.step()
        if (i + 1) % spe == 0:
            s.step()
    return out


def hold_after(T, eta_min):
    def f(o):
        a = L.CosineAnnealingLR(o, T_max=T, eta_min=eta_min)
        b = L.LambdaLR(o, lambda t: eta_min / BASE)
        return L.SequentialLR(o, [a, b], milestones=[T])
    return f


epoch_cases = [
    # step_size_epochs 3, gamma 0.1, 5 steps per epoch: StepLR(step_size=3) stepped per epoch
    ("epochs_step_per_epoch", run_per_epoch(lambda o: L.StepLR(o, step_size=3, gamma=0.1), 5)),
    # the guide's "warmup 5 epochs, then x0.1 every 30 epochs" at 2 steps per epoch (ctrain's warmup ramp)
    ("epochs_warmup_step", run(warm(lambda o: L.StepLR(o, step_size=60, gamma=0.1), 10, 1 / 10, 9))),
    # cosine_epochs 8 at 5 steps per epoch, min_lr 0.001: T_max 40 steps, past T the closed form (cycle)
    ("epochs_cosine", run(lambda o: L.CosineAnnealingLR(o, T_max=40, eta_min=0.001))),
    # the guide's min_lr + (max_lr - min_lr)(1 + cos(pi epoch / T))/2 with T = 8 epochs, stepped per epoch
    ("epochs_cosine_per_epoch", run_per_epoch(lambda o: L.CosineAnnealingLR(o, T_max=8, eta_min=0.001), 5)),
    # cosine_after hold: min_lr from T on
    ("epochs_cosine_hold", run(hold_after(40, 0.001))),
    # warmup_epochs 1.5 and cosine_epochs 10 at 4 steps per epoch: warmup 6 steps, then T_max 40
    ("epochs_warmup_cosine", run(warm(lambda o: L.CosineAnnealingLR(o, T_max=40, eta_min=0.0), 6, 1 / 6, 5))),
]
for name, vals in epoch_cases:
    lines.append(name + " " + " ".join("%.17g" % v for v in vals))

# inverse sqrt: warmup W (LinearLR start_factor 0.1 over W) then BASE*sqrt(T)/sqrt(max(t,T)), global t
W, T = 10, 10
isq = [BASE * (0.1 + 0.9 * t / W) if t < W else BASE * math.sqrt(T) / math.sqrt(max(t, T)) for t in range(N)]
lines.append("inverse_sqrt " + " ".join("%.17g" % v for v in isq))

# plateau: fixed metric sequences, one scheduler.step(metric) per epoch
met_min = [1.0, 0.9, 0.85, 0.85, 0.86, 0.84, 0.8499, 0.85, 0.9, 0.7, 0.7, 0.7, 0.7, 0.7, 0.69999, 0.71,
           0.72, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
met_max = [0.1, 0.2, 0.25, 0.25, 0.2, 0.3, 0.3, 0.3, 0.31, 0.305, 0.4, 0.4, 0.39, 0.38, 0.4, 0.4,
           0.4, 0.4, 0.41, 0.41, 0.41, 0.41, 0.41, 0.41, 0.41]
pcases = [
    ("plateau_min_rel", met_min, dict(mode="min", factor=0.5, patience=2, threshold=1e-2, threshold_mode="rel",
                                      cooldown=1, min_lr=0.004)),
    ("plateau_max_abs", met_max, dict(mode="max", factor=0.3, patience=1, threshold=0.02, threshold_mode="abs",
                                      cooldown=0, min_lr=0.0)),
    ("plateau_default", met_min, dict()),
    ("plateau_p0", met_min, dict(mode="min", factor=0.1, patience=0, threshold=0.0, min_lr=1e-4, eps=1e-8)),
]
for name, met, kw in pcases:
    o = opt()
    s = L.ReduceLROnPlateau(o, **kw)
    lrs = []
    for m in met:
        s.step(m)
        lrs.append(o.param_groups[0]["lr"])
    lines.append(name + " " + " ".join("%.17g" % v for v in lrs))
    lines.append(name + "_metric " + " ".join("%.17g" % v for v in met))

here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, "..", "tests", "golden", "schedules.txt")
with open(path, "w") as f:
    f.write("# generated by scripts/make_schedule_golden.py with torch %s\n" % torch.__version__)
    f.write("\n".join(lines) + "\n")
print("wrote", os.path.normpath(path), len(lines), "lines")
