#!/usr/bin/python3
"""scripts/make_transformer_golden.py - writes the golden files of tests/test_transformer.c.

Run with Debian's Python (PyTorch 1.13 from python3-torch):

    /usr/bin/python3 scripts/make_transformer_golden.py [--out tests/golden]

It defines in PyTorch the models that ct_model_gpt and ct_model_bert build
(src/models/transformer.c), with the same parameter names and layouts and
plain (non-fused) attention math, runs one training-mode forward + backward
(dropout 0) on a fixed batch, and stores weights, batch, labels, loss, logits
and every parameter gradient in the CTG1 format (docs/golden-format.md).

Cases (one file each in --out):
  gpt2l.ctg   nanoGPT-style GPT: 2 layers, vocab 67, context 32, d 48, 4 heads,
              biases, exact GELU, lm_head tied to transformer.wte.weight;
              batch (3, 20) (T < context: the position table is sliced),
              next-token cross entropy.
  bert2l.ctg  BERT + MLM head: 2 layers, vocab 71, 40 positions, d 48, 4 heads,
              d_ff 96, eps 1e-12; batch (3, 19), key_valid with a padded tail
              in one sequence and a shorter one in another, MLM labels
              -100 except at ~30% of the valid positions.

The weights are seeded and larger than the models' default init (N(0, 0.2)
weights, random biases and LayerNorm affines) so that the attention is far
from uniform and every gradient is substantial. As in make_golden.py the
stored results are computed in float64 from the float32 weights and rounded
to float32; the script fails if PyTorch's own float32 run is more than 1e-5
(max|a-b| / max|b| per tensor) away from them.
"""
import argparse
import copy
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import IGNORE_INDEX, TOL, Writer, rel  # noqa: E402


def attention(qkv, n_head, causal, key_valid=None):
    """softmax(q k^T / sqrt(Dh) + mask) v over packed qkv (B, T, 3D) -> (B, T, D)."""
    B, T, C3 = qkv.shape
    D = C3 // 3
    q, k, v = qkv.split(D, dim=2)
    q, k, v = [t.view(B, T, n_head, D // n_head).transpose(1, 2) for t in (q, k, v)]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // n_head))
    if causal:
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
    if key_valid is not None:
        att = att.masked_fill(~key_valid.bool()[:, None, None, :], float("-inf"))
    y = F.softmax(att, dim=-1) @ v
    return y.transpose(1, 2).contiguous().view(B, T, D)


# ---- GPT (nanoGPT) -----------------------------------------------------------------------------------

class LayerNorm(nn.Module):
    """nanoGPT's LayerNorm with an optional bias."""

    def __init__(self, d, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, bias):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)

    def forward(self, x):
        return self.c_proj(attention(self.c_attn(x), self.n_head, True))


class MLP(nn.Module):
    def __init__(self, d, bias, gelu_tanh):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d, bias=bias)
        self.c_proj = nn.Linear(4 * d, d, bias=bias)
        self.approx = "tanh" if gelu_tanh else "none"

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate=self.approx))


class Block(nn.Module):
    def __init__(self, d, n_head, bias, gelu_tanh):
        super().__init__()
        self.ln_1 = LayerNorm(d, bias)
        self.attn = CausalSelfAttention(d, n_head, bias)
        self.ln_2 = LayerNorm(d, bias)
        self.mlp = MLP(d, bias, gelu_tanh)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context, n_layer, n_head, d, bias, gelu_tanh):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d),
            wpe=nn.Embedding(context, d),
            h=nn.ModuleList([Block(d, n_head, bias, gelu_tanh) for _ in range(n_layer)]),
            ln_f=LayerNorm(d, bias)))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, ids):
        T = ids.shape[1]
        x = self.transformer.wte(ids) + self.transformer.wpe(torch.arange(T))
        for blk in self.transformer.h:
            x = blk(x)
        return self.lm_head(self.transformer.ln_f(x))


# ---- BERT + MLM head -------------------------------------------------------------------------------------

class Dense(nn.Module):
    """dense (+ LayerNorm): BERT's *.output and cls.predictions.transform."""

    def __init__(self, din, dout, eps, ln=True):
        super().__init__()
        self.dense = nn.Linear(din, dout)
        if ln:
            self.LayerNorm = nn.LayerNorm(dout, eps=eps)


class BertAttention(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)  # q | k | v rows, packed
        self.output = Dense(d, d, eps)


class BertLayer(nn.Module):
    def __init__(self, d, d_ff, eps):
        super().__init__()
        self.attention = BertAttention(d, eps)
        self.intermediate = Dense(d, d_ff, eps, ln=False)
        self.output = Dense(d_ff, d, eps)


class BertEmbeddings(nn.Module):
    def __init__(self, vocab, context, type_vocab, d, eps):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(context, d)
        self.token_type_embeddings = nn.Embedding(type_vocab, d)
        self.LayerNorm = nn.LayerNorm(d, eps=eps)


class BertEncoder(nn.Module):
    def __init__(self, n_layer, d, d_ff, eps):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(d, d_ff, eps) for _ in range(n_layer)])


class BertModel(nn.Module):
    def __init__(self, vocab, context, type_vocab, n_layer, d, d_ff, eps):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, context, type_vocab, d, eps)
        self.encoder = BertEncoder(n_layer, d, d_ff, eps)


class Predictions(nn.Module):
    def __init__(self, vocab, d, eps):
        super().__init__()
        self.transform = Dense(d, d, eps)
        self.bias = nn.Parameter(torch.zeros(vocab))


class Cls(nn.Module):
    def __init__(self, vocab, d, eps):
        super().__init__()
        self.predictions = Predictions(vocab, d, eps)


class BertMLM(nn.Module):
    def __init__(self, vocab, context, type_vocab, n_layer, n_head, d, d_ff, eps):
        super().__init__()
        self.n_head = n_head
        self.bert = BertModel(vocab, context, type_vocab, n_layer, d, d_ff, eps)
        self.cls = Cls(vocab, d, eps)

    def forward(self, ids, key_valid):
        e = self.bert.embeddings
        T = ids.shape[1]
        x = e.word_embeddings(ids) + e.position_embeddings(torch.arange(T)) + e.token_type_embeddings.weight[0]
        x = e.LayerNorm(x)
        for L in self.bert.encoder.layer:
            a = L.attention.output.dense(attention(L.attention.qkv(x), self.n_head, False, key_valid))
            x = L.attention.output.LayerNorm(a + x)
            h = L.output.dense(F.gelu(L.intermediate.dense(x)))
            x = L.output.LayerNorm(h + x)
        t = self.cls.predictions.transform
        h = t.LayerNorm(F.gelu(t.dense(x)))
        return h @ e.word_embeddings.weight.t() + self.cls.predictions.bias


# ---- running a case ------------------------------------------------------------------------------------

def randomize(model):
    """Seeded weights larger than the default init; biases and LayerNorm affines random."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("LayerNorm.weight") or (".ln_" in n and n.endswith(".weight")):
                p.uniform_(0.5, 1.5)
            elif p.dim() == 1:
                p.uniform_(-0.2, 0.2)
            else:
                p.normal_(0.0, 0.2)


def step(model, inputs, labels, dtype):
    m = copy.deepcopy(model).to(dtype)
    m.train()
    m.zero_grad()
    logits = m(*inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(), ignore_index=IGNORE_INDEX)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters()}
    return loss.detach(), logits.detach(), grads


def run_case(name, model, inputs, labels, meta, records):
    loss, logits, grads = step(model, inputs, labels, torch.float64)
    l32, lg32, g32 = step(model, inputs, labels, torch.float32)
    checks = [("loss", l32, loss.float()), ("logits", lg32, logits.float())]
    checks += [("grad." + n, g32[n], grads[n].float()) for n in grads]
    print("%s: loss %.7f, %d params, PyTorch FP32 vs golden (max|a-b|/max|b|):" % (name, loss.item(), len(grads)))
    worst = 0.0
    for n, a, b in checks:
        r = rel(a, b)
        worst = max(worst, r)
        print("    %-52s %.2e" % (n, r))
    if worst > TOL:
        sys.exit("%s: PyTorch's own FP32 result is %.2e away from the float64 golden (> %g)" % (name, worst, TOL))
    w = Writer()
    for k, v in meta:
        w.add("meta." + k, v)
    for n, p in model.named_parameters():
        w.add("param." + n, p)
    for k, v in records:
        w.add(k, v)
    w.add("labels", labels)
    w.add("loss", loss)
    w.add("logits", logits)
    for n, g in grads.items():
        w.add("grad." + n, g)
    return w


def i32(v):
    return torch.tensor(v, dtype=torch.int32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)

    # ---- GPT ----
    seed = 3000
    torch.manual_seed(seed)
    V, C, L, H, D, B, T = 67, 32, 2, 4, 48, 3, 20
    gpt = GPT(V, C, L, H, D, bias=True, gelu_tanh=False)
    randomize(gpt)
    seq = torch.randint(0, V, (B, T + 1), dtype=torch.int32)
    ids, targets = seq[:, :T].contiguous(), seq[:, 1:].contiguous()
    meta = [("seed", i32(seed)), ("vocab", i32(V)), ("context", i32(C)), ("n_layer", i32(L)), ("n_head", i32(H)),
            ("d_model", i32(D)), ("bias", i32(1)), ("gelu_tanh", i32(0)), ("ignore_index", i32(IGNORE_INDEX))]
    w = run_case("gpt2l", gpt, (ids.long(),), targets, meta, [("ids", ids)])
    size = w.write(os.path.join(args.out, "gpt2l.ctg"))

    # ---- BERT ----
    seed = 3100
    torch.manual_seed(seed)
    V, C, L, H, D, FF, B, T, eps = 71, 40, 2, 4, 48, 96, 3, 19, 1e-12
    bert = BertMLM(V, C, 2, L, H, D, FF, eps)
    randomize(bert)
    ids = torch.randint(0, V, (B, T), dtype=torch.int32)
    lengths = [T, T - 6, T - 11]  # sequence 1 and 2 have padded tails
    key_valid = torch.zeros(B, T, dtype=torch.int32)
    for b, n in enumerate(lengths):
        key_valid[b, :n] = 1
    labels = torch.full((B, T), IGNORE_INDEX, dtype=torch.int32)
    pick = (torch.rand(B, T) < 0.3) & key_valid.bool()
    labels[pick] = torch.randint(0, V, (int(pick.sum()),), dtype=torch.int32)
    meta = [("seed", i32(seed)), ("vocab", i32(V)), ("context", i32(C)), ("n_layer", i32(L)), ("n_head", i32(H)),
            ("d_model", i32(D)), ("d_ff", i32(FF)), ("type_vocab", i32(2)), ("ln_eps", torch.tensor(eps)),
            ("ignore_index", i32(IGNORE_INDEX))]
    w = run_case("bert2l", bert, (ids.long(), key_valid), labels, meta, [("ids", ids), ("key_valid", key_valid)])
    size += w.write(os.path.join(args.out, "bert2l.ctg"))
    print("wrote gpt2l.ctg and bert2l.ctg to %s (%d bytes); %d masked-LM labels" % (args.out, size, int(pick.sum())))


if __name__ == "__main__":
    main()
