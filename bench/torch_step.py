#!/usr/bin/python3
"""bench/torch_step.py - times one PyTorch training step (forward, backward,
optimizer update) of the same workloads as bench_step.c.

  /usr/bin/python3 bench/torch_step.py --workload mlp|cnn|gptchar|gpt2|resnet50 [--threads 2]
      [--warmup 3] [--steps 10] [--optim adamw|sgd] [--foreach 0|1]
      [--channels-last 0|1] [--profile]

Prints the same records as bench_step: ENV, STEP ..., RESULT ... (key=value).
gptchar / gpt2: nanoGPT's GPT written out below (torch 1.13 has no
scaled_dot_product_attention: explicit matmul + causal mask + softmax), sizes
of ctrain's presets gpt-char-small (batch 8, T 256) and gpt2-124m (batch 4,
T 64, wpe 1024 rows), dropout 0, tied lm_head, AdamW lr 1e-3, weight decay
0.1 on >= 2-D parameters only (nanoGPT's configure_optimizers, ctrain's
no_decay_bias_norm). RESULT adds peak_rss_mb (getrusage ru_maxrss) and
plan_mb (parameters + gradients + optimizer state; activations not counted).
Run it through bench/run.sh, which sets LD_LIBRARY_PATH (OpenMP OpenBLAS
first), OPENBLAS_CORETYPE and OMP_NUM_THREADS before Python starts: BLAS
settings cannot be changed once torch is imported.
"""
import argparse
import ctypes
import math
import os
import resource
import statistics
import sys
import time


def loaded_libs(pattern_list):
    """Paths of shared objects mapped into this process that match any pattern."""
    found = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/"):
                p = parts[5]
                if any(s in os.path.basename(p) for s in pattern_list) and p not in found:
                    found.append(p)
    return found


def openblas_info():
    """(library path, core name, config, threads) of the OpenBLAS actually loaded."""
    libs = [p for p in loaded_libs(["openblas", "libblas"]) if "openblas" in p or "blas" in p]
    path = next((p for p in libs if "openblas" in os.path.basename(p)), libs[0] if libs else "none")
    core = cfg = "unknown"
    nthr = -1
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
        cfg = lib.openblas_get_config().decode()
        nthr = lib.openblas_get_num_threads()
    except (OSError, AttributeError):
        pass
    return path, core, cfg, nthr, libs


def cpu_capability(torch):
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage" in line:
            return line.split(":")[-1].strip()
    return "unknown"


def proc_stat():
    """(busy, steal) seconds of the whole machine from /proc/stat, or None."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz, v[7] / hz
    except (OSError, ValueError, IndexError):
        return None


# nanoGPT's GPT (model.py, Karpathy), trimmed to what the benchmark needs.
GPT_PRESETS = {  # vocab, context, n_layer, n_head, d_model, gelu_tanh; batch, seq
    "gptchar": dict(vocab=65, context=256, n_layer=6, n_head=6, d=384, gelu_tanh=False, batch=8, seq=256),
    "gpt2": dict(vocab=50257, context=1024, n_layer=12, n_head=12, d=768, gelu_tanh=True, batch=4, seq=64),
}


def build_gpt(nn, torch, c):
    F = torch.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(c["d"], 3 * c["d"])
            self.c_proj = nn.Linear(c["d"], c["d"])
            self.n_head = c["n_head"]
            T = c["context"]
            self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            h = self.n_head
            k = k.view(B, T, h, C // h).transpose(1, 2)
            q = q.view(B, T, h, C // h).transpose(1, 2)
            v = v.view(B, T, h, C // h).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(c["d"], 4 * c["d"])
            self.gelu = nn.GELU(approximate="tanh" if c["gelu_tanh"] else "none")
            self.c_proj = nn.Linear(4 * c["d"], c["d"])

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(c["d"])
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(c["d"])
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(c["vocab"], c["d"]), wpe=nn.Embedding(c["context"], c["d"]),
                h=nn.ModuleList([Block() for _ in range(c["n_layer"])]), ln_f=nn.LayerNorm(c["d"])))
            self.lm_head = nn.Linear(c["d"], c["vocab"], bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c["n_layer"]))

        def _init_weights(self, m):
            if isinstance(m, nn.Linear):
                torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if m.bias is not None:
                    torch.nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)

        def forward(self, idx):
            t = idx.size(1)
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            return self.lm_head(self.transformer.ln_f(x))

    return GPT()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=["mlp", "cnn", "gptchar", "gpt2", "resnet50"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--optim", choices=["adamw", "sgd"])
    ap.add_argument("--foreach", type=int, default=0, help="multi-tensor optimizer path (torch 1.13: opt-in)")
    ap.add_argument("--channels-last", type=int, default=0, help="cnn: NHWC memory format")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: forward under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--profile", action="store_true", help="print the top ops of one step (torch.profiler)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()

    import torch
    import torch.nn as nn

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    is_gpt = a.workload in GPT_PRESETS
    optim = a.optim or ("sgd" if a.workload in ("cnn", "resnet50") else "adamw")

    seq = 0
    if is_gpt:
        c = GPT_PRESETS[a.workload]
        batch, seq = c["batch"], c["seq"]
        model = build_gpt(nn, torch, c)
        toks = torch.randint(0, c["vocab"], (batch, seq + 1))  # next-token targets
        x, y = toks[:, :-1].contiguous(), toks[:, 1:].contiguous()
    elif a.workload == "mlp":
        batch = 256
        model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
        x = torch.rand(batch, 784) * 2 - 1
    elif a.workload == "resnet50":  # torchvision's resnet50, the model ct_model_vision builds
        import torchvision
        batch = 32
        model = torchvision.models.resnet50()
        x = torch.rand(batch, 3, 224, 224) * 2 - 1
        if a.channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
    else:
        batch = 128
        model = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
        x = torch.rand(batch, 1, 28, 28) * 2 - 1
        if a.channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
    if not is_gpt:
        y = torch.randint(0, 1000 if a.workload == "resnet50" else 10, (batch,))
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    fe = bool(a.foreach)
    if optim == "adamw" and is_gpt:
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=1e-3, foreach=fe)
    elif optim == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=fe)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=fe)

    path, core, cfg, nthr, libs = openblas_info()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"ENV workload={a.workload} precision={a.precision} batch={batch} seq={seq} optim={optim} foreach={int(fe)} "
          f"channels_last={a.channels_last} torch={torch.__version__} threads={torch.get_num_threads()} "
          f"mkldnn_available={int(torch.backends.mkldnn.is_available())} "
          f"mkldnn_enabled={int(torch.backends.mkldnn.enabled)} "
          f"cpu_capability={cpu_capability(torch)} "
          f"openblas_core={core} openblas_threads={nthr} OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')} "
          f"blas_lib={path} n_params={n_params}")
    print(f"ENV openblas_config={cfg.replace(' ', '_')} blas_libs_mapped={','.join(libs)}")
    sys.stdout.flush()

    def step():
        c0 = time.process_time()  # CPU time of all threads of this process
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = model(x)
            if is_gpt:
                out = out.view(-1, out.size(-1))
            loss = loss_fn(out, y.view(-1))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        c3 = time.process_time()
        return (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, loss.item(), (c3 - c0) * 1e3

    # One profiled (untimed) step: which ATen kernels do the heavy lifting
    # (e.g. aten::mkldnn_convolution = oneDNN conv, aten::addmm/mm = BLAS).
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    heavy = sorted({e.key for e in prof.key_averages()
                    if any(s in e.key for s in ("mkldnn", "slow_conv", "thnn_conv", "convolution_backward",
                                                "aten::addmm", "aten::mm", "aten::bmm"))})
    print(f"ENV torch_compute_ops={','.join(heavy)}")
    sys.stdout.flush()

    tf, tb, to, ts, tc = [], [], [], [], []
    loss_first = loss_last = None
    st0 = None
    for it in range(a.warmup + a.steps):
        if it == a.warmup:
            st0, c0, w0 = proc_stat(), time.process_time(), time.perf_counter()
        f, b, o, l, c = step()
        if loss_first is None:
            loss_first = l
        loss_last = l
        if it >= a.warmup:
            tf.append(f); tb.append(b); to.append(o); ts.append(f + b + o); tc.append(c)
            if not a.quiet:
                print(f"STEP i={it - a.warmup} fwd_ms={f:.3f} bwd_ms={b:.3f} opt_ms={o:.3f} "
                      f"step_ms={f + b + o:.3f} cpu_ms={c:.3f} loss={l:.5f}")
                sys.stdout.flush()

    others = steal = -1.0
    st1 = proc_stat()
    if st0 and st1:
        wall, own = time.perf_counter() - w0, time.process_time() - c0
        others = max(0.0, ((st1[0] - st0[0]) - own) / wall)
        steal = (st1[1] - st0[1]) / wall

    if a.profile:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))

    # parameters + gradients + optimizer state (activations are freed after backward)
    pbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    sbytes = sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
                 if torch.is_tensor(t) and t.dim() > 0)
    plan_mb = (2 * pbytes + sbytes) / 1048576.0
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"RESULT workload={a.workload} framework=pytorch steps={a.steps} "
          f"step_ms_median={statistics.median(ts):.3f} fwd_ms_median={statistics.median(tf):.3f} "
          f"bwd_ms_median={statistics.median(tb):.3f} opt_ms_median={statistics.median(to):.3f} "
          f"step_ms_min={min(ts):.3f} cpu_ms_median={statistics.median(tc):.3f} loss_first={loss_first:.5f} "
          f"loss_last={loss_last:.5f} steps_total={a.warmup + a.steps + 1} others_cores={others:.2f} steal_cores={steal:.2f} "
          f"n_params={n_params} plan_mb={plan_mb:.1f} peak_rss_mb={peak_rss_mb:.1f}")


if __name__ == "__main__":
    main()
