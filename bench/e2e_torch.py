#!/usr/bin/python3
"""bench/e2e_torch.py - the PyTorch side of bench/e2e.sh: trains a ctrain
recipe (recipes/*.json, with ctrain's --set overrides) to the end in PyTorch,
the same model, init family, optimizer, schedule, batch size, data,
normalization and augmentation as `ctrain train --recipe R`, and prints one
line per evaluation and one at the end in the format e2e.sh parses:

  E2E eval epoch=E step=S time=T test_loss=L test_acc=A     (T: seconds since training started)
  E2E done steps=S time=T test_loss=L test_acc=A

usage: /usr/bin/python3 bench/e2e_torch.py --recipe R [--set key=value ...] [--threads N]

Models (recipe "model"): mlp (Linear-ReLU-Dropout x hidden, Linear), cnn
(conv3x3 no bias - BN - ReLU - maxpool 2 per block, Linear), gpt (nanoGPT's
GPT from bench/torch_step.py with dropout after the embeddings and after both
c_proj, as ctrain's; no dropout on the attention weights: ctrain has none),
resnet18 (torchvision's, with cifar_stem: 3x3 stride-1 conv1, no max pool).
Data: IDX files (MNIST mean 0.1307 std 0.3081, Fashion 0.286 / 0.353, held as
tensors, shuffled by torch.randperm each epoch, last partial batch kept: ctrain's
dynamic_shapes); Moby-Dick bytes with the char vocabulary (sorted distinct
bytes), the last floor(n * val_fraction) tokens for validation, training
windows at uniform random starts, evaluation on the first eval_batches x
batch_size consecutive windows of T+1 tokens (ctrain's ct_text_eval_batch);
an ImageFolder through torchvision (read_image, Debian has no PIL) and a
DataLoader with prefetch_threads workers. The learning rate of every step is
computed as ctrain's src/optim/schedule.c does (warmup ramp lr*(t+1)/W, then
cosine over the rest to min_lr; one_cycle without momentum cycling, as
ctrain) and written into the optimizer before the step.
Run it through bench/e2e.sh, which sets LD_LIBRARY_PATH (the OpenMP
OpenBLAS), OPENBLAS_CORETYPE and OMP_NUM_THREADS before Python starts.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def apply_set(r, kv):
    """key=value (dotted keys into objects) onto the recipe dict; values parsed as JSON when they can be."""
    k, _, v = kv.partition("=")
    try:
        val = json.loads(v)
    except ValueError:
        val = v
    d = r
    parts = k.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = val


def autocast(torch, r):
    """The recipe's precision: bf16 runs the forward under CPU autocast (BF16 matmuls, FP32 master weights), as
    ctrain's `precision: bf16` policy does; fp32 (the default) runs it as is."""
    prec = str(r.get("precision", "fp32"))
    if prec not in ("fp32", "bf16"):
        sys.exit("e2e_torch: precision %r: only fp32 and bf16 have a PyTorch side here" % prec)
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16")


def read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            op = gzip.open if p.endswith(".gz") else open
            with op(p, "rb") as f:
                data = f.read()
            nd = data[3]
            dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
            return dims, data[4 + 4 * nd:]
    sys.exit("e2e_torch.py: no %s[.gz] (scripts/setup.sh)" % path)


def lr_at(r, t, total):
    """ctrain's ct_train_schedule + ct_schedule_lr_f64 for the schedules the e2e recipes use."""
    o = r.get("optimizer", {})
    base = float(o.get("lr", 1e-3))
    kind = r.get("schedule", "constant")
    w = int(r.get("warmup_steps", 0)) if kind not in ("one_cycle", "plateau") else 0
    rest = total - w if total - w > 1 else 1
    min_lr = float(r.get("min_lr", 0.0))
    if kind == "cosine" and total - w < 1:
        kind = "constant"
    if t < w:
        return base * (t + 1) / w
    t -= w
    if kind == "cosine":
        return min_lr + (base - min_lr) * (1.0 + math.cos(math.pi * t / rest)) / 2.0
    if kind == "one_cycle":
        div, fdiv, pct = float(r.get("div_factor", 25)), float(r.get("final_div_factor", 1e4)), float(r.get("pct_start", 0.3))
        init = base / div
        lo = init / fdiv
        e1, e2 = pct * total - 1, total - 1.0
        s = min(t, total)
        if s <= e1:
            a, b, p = init, base, s / e1
        else:
            a, b, p = base, lo, (s - e1) / (e2 - e1)
        if r.get("anneal", "cos") == "linear":
            return (b - a) * p + a
        return b + (a - b) / 2.0 * (math.cos(math.pi * p) + 1.0)
    if kind == "constant":
        return base
    sys.exit("e2e_torch.py: schedule %s is not implemented here" % kind)


def make_optimizer(torch, r, model):
    o = r.get("optimizer", {})
    name = o.get("name", "adamw")
    lr = float(o.get("lr", 1e-3))
    wd = float(o.get("weight_decay", 0.01 if name == "adamw" else 0.0))
    params = [p for p in model.parameters() if p.requires_grad]
    if o.get("no_decay_bias_norm"):
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    else:
        groups = [{"params": params, "weight_decay": wd}]
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=(float(o.get("beta1", 0.9)), float(o.get("beta2", 0.999))),
                                 eps=float(o.get("eps", 1e-8)), foreach=False)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=float(o.get("momentum", 0.0)),
                               dampening=float(o.get("dampening", 0.0)), nesterov=bool(o.get("nesterov", False)),
                               foreach=False)
    sys.exit("e2e_torch.py: optimizer %s is not implemented here" % name)


def build_image_model(torch, nn, r, in_ch, n_classes):
    m = r.get("model", "mlp")
    if m == "mlp":
        layers, fan = [nn.Flatten()], in_ch * 28 * 28
        for h in r.get("hidden", [1024, 1024]):
            layers += [nn.Linear(fan, h), nn.ReLU()]
            if float(r.get("dropout", 0)) > 0:
                layers.append(nn.Dropout(float(r["dropout"])))
            fan = h
        layers.append(nn.Linear(fan, n_classes))
        return nn.Sequential(*layers)  # nn.Linear's init = ctrain's kaiming uniform bound 1/sqrt(fan_in)
    if m == "cnn":
        layers, cin, side = [], in_ch, 28
        for c in r.get("channels", [32, 64]):
            conv = nn.Conv2d(cin, c, 3, padding=1, bias=False)
            bound = 1.0 / math.sqrt(cin * 9)  # ctrain: CT_INIT_KAIMING_UNIFORM with fan_in = cin*9
            nn.init.uniform_(conv.weight, -bound, bound)
            layers += [conv, nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
            cin, side = c, side // 2
        layers += [nn.Flatten(), nn.Linear(cin * side * side, n_classes)]
        return nn.Sequential(*layers)
    if m == "resnet18":
        import torchvision
        net = torchvision.models.resnet18(num_classes=n_classes)  # kaiming_normal fan_out convs, as ctrain
        if r.get("cifar_stem"):
            net.conv1 = nn.Conv2d(in_ch, 64, 3, 1, 1, bias=False)
            nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
            net.maxpool = nn.Identity()
        return net
    sys.exit("e2e_torch.py: model %s is not implemented here" % m)


def idx_data(torch, r):
    ds = r.get("dataset", "mnist")
    d = r.get("data_dir") or os.path.join("data", ds)
    mean, std = (0.1307, 0.3081) if ds == "mnist" else (0.2860, 0.3530)
    out = []
    for split in ("train", "t10k"):
        (n, h, w), px = read_idx(os.path.join(d, split + "-images-idx3-ubyte"))
        _, lab = read_idx(os.path.join(d, split + "-labels-idx1-ubyte"))
        x = torch.frombuffer(bytearray(px), dtype=torch.uint8).view(n, 1, h, w).float().div_(255.0)
        x = x.sub_(mean).div_(std)
        y = torch.frombuffer(bytearray(lab), dtype=torch.uint8).long()
        out += [x, y]
    return out


def image_folder_data(torch, r, threads):
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    from torchvision.io import ImageReadMode, read_image
    root = r.get("data_dir") or os.path.join("data", r.get("dataset", "imagefolder"))
    size = int(r.get("image_size", 0)) or 32
    mean = [float(v) for v in str(r.get("mean", "0.5")).split(",")]
    std = [float(v) for v in str(r.get("std", "0.5")).split(",")]
    mean, std = (mean * 3)[:3], (std * 3)[:3]
    norm = T.Normalize(mean, std)
    pad = int(r.get("crop_padding", 0))
    if r.get("augment"):
        crop = T.RandomCrop(size, padding=pad) if pad > 0 else T.RandomResizedCrop(size, antialias=False)
        tt = [T.ConvertImageDtype(torch.float32), crop] + ([T.RandomHorizontalFlip()] if r.get("hflip", True) else [])
    else:
        tt = [T.ConvertImageDtype(torch.float32), T.Resize(size, antialias=False), T.CenterCrop(size)]
    te = [T.ConvertImageDtype(torch.float32), T.Resize(size, antialias=False), T.CenterCrop(size), norm]

    def load(p):
        return read_image(p, ImageReadMode.RGB)

    train = ImageFolder(os.path.join(root, r.get("train_dir", "train")), loader=load, transform=T.Compose(tt + [norm]))
    test = ImageFolder(os.path.join(root, r.get("val_dir", "val")), loader=load, transform=T.Compose(te))
    nw = int(r.get("prefetch_threads", 1)) if int(r.get("prefetch", 4)) > 0 else 0
    B = int(r.get("batch_size", 128))
    kw = dict(num_workers=nw, persistent_workers=nw > 0)
    if nw > 0:
        kw["prefetch_factor"] = max(2, int(r.get("prefetch", 4)))
    dl_train = torch.utils.data.DataLoader(train, batch_size=B, shuffle=True, drop_last=False, **kw)
    dl_test = torch.utils.data.DataLoader(test, batch_size=B, shuffle=False, **kw)
    return dl_train, dl_test, len(train.classes)


def emit(kind, **kv):
    print("E2E %s %s" % (kind, " ".join("%s=%s" % (k, v) for k, v in kv.items())))
    sys.stdout.flush()


def run_images(torch, nn, r, threads):
    F = torch.nn.functional
    epochs, B = int(r.get("epochs", 1)), int(r.get("batch_size", 128))
    ls = float(r.get("label_smoothing", 0.0))
    if r.get("dataset") in ("imagefolder",):
        dl_train, dl_test, ncls = image_folder_data(torch, r, threads)
        per_epoch, in_ch = len(dl_train), 3

        def batches(ep):
            return iter(dl_train)

        def test_batches():
            return iter(dl_test)
    else:
        xtr, ytr, xte, yte = idx_data(torch, r)
        n, ncls, in_ch = xtr.shape[0], 10, 1
        per_epoch = (n + B - 1) // B

        def batches(ep):
            perm = torch.randperm(n)
            for i in range(0, n, B):
                j = perm[i:i + B]
                yield xtr[j], ytr[j]

        def test_batches():
            for i in range(0, xte.shape[0], B):
                yield xte[i:i + B], yte[i:i + B]
    model = build_image_model(torch, nn, r, in_ch, ncls)
    # the recipe's channels_last (ctrain's default true for the cnn and resnets): PyTorch's channels_last
    # memory format, its own fast path for oneDNN convolutions
    cl = r.get("model") in ("cnn", "resnet18") and r.get("channels_last", True) not in (False, "false", 0, "0")
    mf = torch.channels_last if cl else torch.contiguous_format
    if cl:
        model = model.to(memory_format=mf)
    print("channels_last %d" % cl)
    opt = make_optimizer(torch, r, model)
    total = per_epoch * epochs
    if int(r.get("max_steps", 0)) > 0:
        total = min(total, int(r["max_steps"]))
    print("model %s: %d parameters, %d steps (%d per epoch), batch %d" %
          (r.get("model"), sum(p.numel() for p in model.parameters()), total, per_epoch, B))
    step, t0 = 0, time.perf_counter()
    tl = ta = 0.0
    for ep in range(epochs):
        if step >= total:
            break
        model.train()
        lsum, nb = 0.0, 0
        for x, y in batches(ep):
            for g in opt.param_groups:
                g["lr"] = lr_at(r, step, total)
            with autocast(torch, r):
                out = model(x.contiguous(memory_format=mf))
                loss = F.cross_entropy(out.float(), y, label_smoothing=ls)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            lsum += loss.item()
            nb += 1
            step += 1
            if step >= total:
                break
        model.eval()
        tot, ok, cnt = 0.0, 0, 0
        with torch.no_grad():
            for x, y in test_batches():
                with autocast(torch, r):
                    out = model(x.contiguous(memory_format=mf)).float()
                tot += F.cross_entropy(out, y, label_smoothing=ls, reduction="sum").item()
                ok += (out.argmax(1) == y).sum().item()
                cnt += y.shape[0]
        tl, ta = tot / cnt, ok / cnt
        emit("eval", epoch=ep + 1, step=step, time="%.3f" % (time.perf_counter() - t0), train_loss="%.4f" % (lsum / max(nb, 1)),
             test_loss="%.4f" % tl, test_acc="%.4f" % ta)
    emit("done", steps=step, time="%.3f" % (time.perf_counter() - t0), test_loss="%.4f" % tl, test_acc="%.4f" % ta)


def run_gpt(torch, nn, r):
    sys.path.insert(0, HERE)
    from torch_step import GPT_PRESETS, build_gpt
    F = torch.nn.functional
    path = r.get("text_file") or "data/text/moby-dick.txt"
    with open(path, "rb") as f:
        data = f.read()
    vocab = sorted(set(data))
    lut = bytearray(256)
    for i, b in enumerate(vocab):
        lut[b] = i
    ids = torch.frombuffer(bytearray(data.translate(bytes(lut))), dtype=torch.uint8).long()
    n_val = int(math.floor(len(ids) * float(r.get("val_fraction", 0.1))))
    tr, va = ids[:len(ids) - n_val], ids[len(ids) - n_val:]
    c = dict(GPT_PRESETS["gptchar"])
    c["vocab"] = len(vocab)
    T = int(r.get("context", 0)) or c["context"]
    c["context"] = T
    p = float(r.get("dropout", 0.2))
    model = build_gpt(nn, torch, c)
    add_dropout(torch, nn, model, p)
    opt = make_optimizer(torch, r, model)
    B = int(r.get("batch_size", 8))
    total = int(r.get("max_steps", 0)) or int(r.get("epochs", 1)) * int(r.get("eval_every", 100))
    every = int(r.get("eval_every", 100)) or total
    nwin = (len(va) - 1) // T
    if int(r.get("eval_batches", 20)) > 0:
        nwin = min(nwin, int(r.get("eval_batches", 20)) * B)
    clip = float(r.get("clip_grad_norm", 0.0))
    print("model gpt: %d parameters (tied), vocab %d, %d train / %d val tokens, %d steps, eval every %d on %d windows" %
          (sum(q.numel() for q in model.parameters()), len(vocab), len(tr), len(va), total, every, nwin))
    offs = torch.arange(T + 1)
    step, t0, vl, lsum, nb = 0, time.perf_counter(), float("nan"), 0.0, 0
    while step < total:
        model.train()
        for g in opt.param_groups:
            g["lr"] = lr_at(r, step, total)
        starts = torch.randint(0, len(tr) - T, (B,))
        w = tr[starts[:, None] + offs]
        with autocast(torch, r):
            logits = model(w[:, :-1]).float()
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        lsum += loss.item()
        nb += 1
        step += 1
        if step % every == 0 or step == total:
            model.eval()
            tot, cnt = 0.0, 0
            with torch.no_grad():
                for k in range(0, nwin, B):
                    kk = torch.arange(k, min(k + B, nwin))
                    w = va[kk[:, None] * T + offs]
                    with autocast(torch, r):
                        lg = model(w[:, :-1]).float()
                    tot += F.cross_entropy(lg.view(-1, lg.size(-1)), w[:, 1:].reshape(-1), reduction="sum").item()
                    cnt += w[:, 1:].numel()
            vl = tot / cnt
            emit("eval", epoch=(step + every - 1) // every, step=step, time="%.3f" % (time.perf_counter() - t0),
                 train_loss="%.4f" % (lsum / nb), test_loss="%.4f" % vl, test_acc="nan")
            lsum, nb = 0.0, 0
    emit("done", steps=step, time="%.3f" % (time.perf_counter() - t0), test_loss="%.4f" % vl, test_acc="nan")


def add_dropout(torch, nn, model, p):
    """ctrain's GPT dropout: after wte + wpe, after attn.c_proj and after mlp.c_proj (none on attention weights)."""
    if p <= 0:
        return
    for blk in model.transformer.h:
        blk.attn.c_proj = nn.Sequential(blk.attn.c_proj, nn.Dropout(p))
        blk.mlp.c_proj = nn.Sequential(blk.mlp.c_proj, nn.Dropout(p))
    drop = nn.Dropout(p)
    model.emb_drop = drop  # registered, so model.train() / eval() switch it
    # the input of block 0 is wte(idx) + wpe(pos): dropout there
    model.transformer.h[0].register_forward_pre_hook(lambda mod, inp: (model.emb_drop(inp[0]),))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", required=True)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    with open(a.recipe) as f:
        r = json.load(f)
    for kv in a.set:
        apply_set(r, kv)

    import torch
    import torch.nn as nn
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(int(r.get("seed", 1)))
    sys.path.insert(0, HERE)
    from torch_step import openblas_info
    path, core, cfg, nthr, _ = openblas_info()
    print("ENV torch=%s threads=%d flush_denormal=1 openblas=%s core=%s openblas_threads=%d coretype_env=%s" %
          (torch.__version__, torch.get_num_threads(), os.path.basename(path), core, nthr,
           os.environ.get("OPENBLAS_CORETYPE", "")))
    sys.stdout.flush()
    if r.get("model") == "gpt" or r.get("preset") == "gpt-char-small":
        run_gpt(torch, nn, r)
    else:
        run_images(torch, nn, r, a.threads)


if __name__ == "__main__":
    main()
