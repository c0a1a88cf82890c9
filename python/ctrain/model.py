"""ctrain.model - ctrain.load(checkpoint): a trained model from a checkpoint
written by ctrain.train / `ctrain train` (save_dir), for inference, export and
sampling.

Memory: parameters() and buffers() are zero-copy NumPy views of the model's
parameter arena (writes change the model; call changed() after writing);
predict() and sample() copy their inputs in and their logits out (the plan
reuses its memory at the next call); state_dict() copies into torch tensors,
load_state_dict() copies back."""
import json
import math
import os

import numpy as np

from . import arrays
from . import recipe as _recipe
from ._native import Context, UnsupportedError, ffi, lib, string
from .graph import Graph

IMAGE_SHAPES = {"mnist": (1, 28, 28, 10), "fashion-mnist": (1, 28, 28, 10), "cifar10": (3, 32, 32, 10),
                "cifar100": (3, 32, 32, 100)}


def _image_shape(rd):
    """(C, H, W, classes) of an image recipe's data (as the image task reads it)."""
    ds = rd["dataset"]
    if ds in IMAGE_SHAPES:
        c, h, w, k = IMAGE_SHAPES[ds]
        if ds.startswith("cifar") and rd.get("image_size"):
            h = w = rd["image_size"]
    else:  # imagefolder
        c, h = rd.get("image_channels") or 3, rd.get("image_size") or 32
        w, k = h, 0
        d = os.path.join(rd.get("data_dir") or "", rd.get("train_dir") or "train")
        if os.path.isdir(d):
            k = len([e for e in os.listdir(d) if os.path.isdir(os.path.join(d, e))])
    if rd.get("num_classes"):
        k = rd["num_classes"]
    return c, h, w, k


def _splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return state, z ^ (z >> 31)


def _sample_id(logits, temp, top_k, rng):
    """tools/sample.c's sample_id, step for step (the same draw for the same seed)."""
    order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
    k = top_k if 0 < top_k < len(order) else len(order)
    mx = logits[order[0]]
    total = 0.0
    for i in range(k):
        total += math.exp((logits[order[i]] - mx) / temp)
    rng, r = _splitmix64(rng)
    u = float(r >> 11) * 2.0 ** -53 * total
    acc = 0.0
    for i in range(k):
        acc += math.exp((logits[order[i]] - mx) / temp)
        if u < acc:
            return rng, order[i]
    return rng, order[k - 1]


class Model:
    """A model loaded from a checkpoint (or wrapping a plan): parameters(), buffers(), predict(), sample()
    (GPT), save(), state_dict() / load_state_dict() (PyTorch)."""

    def __init__(self, ctx, recipe, plan, input_node, logits_node, batch, tokenizer=None, context_len=None):
        self.context = ctx
        self.recipe = recipe
        self.plan = plan
        self._in, self._out = input_node, logits_node
        self.batch = batch
        self._tok = tokenizer
        self.context_len = context_len
        self.kind = "gpt" if tokenizer is not None else "image"

    # ---- weights ---------------------------------------------------------------------------------------------
    def parameters(self):
        """{name: array}: zero-copy views of the trainable parameters (FP32), in the model's order."""
        return self.plan.parameters()

    def buffers(self):
        """{name: array}: zero-copy views of the non-trainable state (batchnorm running statistics)."""
        return self.plan.buffers()

    def changed(self):
        """Tell the model its parameters were written through a view."""
        self.plan.params_changed()

    def save(self, path):
        """Writes the weights as a safetensors file (ct_weights_save; PyTorch state_dict names)."""
        self.context.check(lib.ct_weights_save(self.context.ptr, os.fsencode(path), self.plan.ptr), "save")

    def state_dict(self):
        """A PyTorch state_dict (name -> torch.Tensor, copies) of the parameters and buffers; needs torch."""
        import torch
        sd = {}
        for k, v in list(self.parameters().items()) + list(self.buffers().items()):
            sd[k] = torch.from_numpy(np.array(v, copy=True))
        return sd

    def load_state_dict(self, sd, strict=True):
        """Copies a state_dict's tensors (torch tensors or arrays, by name, same shapes) into the model.
        strict: every parameter and buffer must be given and nothing else (ctrain.InvalidArgError)."""
        mine = dict(self.parameters())
        mine.update(self.buffers())
        given = {k: (v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)) for k, v in sd.items()
                 if not k.endswith("num_batches_tracked")}
        missing, extra = sorted(set(mine) - set(given)), sorted(set(given) - set(mine))
        if strict and (missing or extra):
            from ._native import ERRORS
            raise ERRORS[lib.CT_E_INVALID_ARG]("state_dict does not match the model: missing %s, unexpected %s"
                                               % (missing, extra))
        for k, v in given.items():
            if k in mine:
                if tuple(v.shape) != mine[k].shape:
                    from ._native import ERRORS
                    raise ERRORS[lib.CT_E_SHAPE]("state_dict['%s'] has shape %s, the model's is %s"
                                                 % (k, tuple(v.shape), mine[k].shape))
                mine[k][...] = v
        self.changed()

    # ---- inference -------------------------------------------------------------------------------------------
    def predict(self, batch):
        """Image model: batch (N, C, H, W) or (N, C*H*W) float32 (normalized as in training) -> logits
        (N, classes). GPT: token ids (N, T), a list of N sequences (of any lengths) or one sequence;
        -> next-token logits (N, vocab) after each row's last token (of its last `context` tokens). Eval mode. Returns a new array (a copy)."""
        if self.kind == "gpt":
            if isinstance(batch, np.ndarray):
                rows = batch if batch.ndim == 2 else batch[None]
            else:  # a list of sequences (they may differ in length) or one sequence
                rows = batch if len(batch) and hasattr(batch[0], "__len__") else [batch]
            return np.stack([self._gpt_next(row) for row in rows])
        x = np.asarray(batch, dtype=np.float32)
        tin = self.plan.tensor(self._in)
        x = x.reshape((x.shape[0],) + tin.shape[1:])
        out = []
        for s in range(0, x.shape[0], self.batch):
            part = x[s:s + self.batch]
            tin[:part.shape[0]] = part
            tin[part.shape[0]:] = 0
            self.plan.forward(False)
            out.append(np.array(self.plan.tensor(self._out)[:part.shape[0]], dtype=np.float32))
        return np.concatenate(out) if out else np.zeros((0,) + self.plan.tensor(self._out).shape[1:], np.float32)

    def _gpt_next(self, ids):
        C = self.context_len
        ids = np.asarray(ids, dtype=np.int32)[-C:]
        tin = self.plan.tensor(self._in)
        tin[0, :len(ids)] = ids
        tin[0, len(ids):] = 0
        self.plan.forward(False)
        return np.array(self.plan.tensor(self._out)[0, len(ids) - 1], dtype=np.float32)

    def encode(self, text):
        """GPT: text -> token ids (the checkpoint's tokenizer)."""
        b = text.encode()
        cap = len(b) + 1
        ids = ffi.new("int32_t[]", cap)
        n = ffi.new("int64_t *")
        self.context.check(lib.ct_tokenizer_encode(self._tok, b, len(b), ids, cap, n), "encode")
        return [ids[i] for i in range(n[0])]

    def decode(self, ids):
        arr = ffi.new("int32_t[]", [int(i) for i in ids] or [0])
        out = ffi.new("char **")
        n = ffi.new("size_t *")
        self.context.check(lib.ct_tokenizer_decode_alloc(self._tok, arr, len(ids), out, n), "decode")
        s = bytes(ffi.buffer(out[0], n[0]))
        lib.ct_free(self.context.ptr, out[0])
        return s.decode("utf-8", "replace")

    def sample(self, prompt="\n", tokens=200, temperature=1.0, top_k=0, seed=0):
        """GPT: the prompt and `tokens` generated tokens, drawn as `ctrain sample` draws them (the same
        text for the same seed, temperature and top_k)."""
        if self.kind != "gpt":
            raise UnsupportedError("sample() needs a GPT checkpoint (model gpt); this is an image model")
        if not temperature > 0:
            raise ValueError("temperature must be > 0")
        seq = self.encode(prompt) if prompt else []
        if not seq:
            from ._native import ERRORS
            raise ERRORS[lib.CT_E_INVALID_ARG]("the prompt is empty; give at least one character of the vocabulary")
        rng, text = seed & 0xFFFFFFFFFFFFFFFF, b""
        out = []
        for _ in range(int(tokens)):
            lg = self._gpt_next(seq)
            rng, i = _sample_id([float(v) for v in lg], float(temperature), int(top_k), rng)
            seq.append(i)
            out.append(i)
        return prompt + self.decode(out)


def _read_state(ctx, path):
    st = ffi.new("ct_train_state *")
    lib.ct_train_state_init(st)
    ctx.check(lib.ct_checkpoint_load(ctx.ptr, os.fsencode(path), ffi.NULL, ffi.NULL, st), "load")
    if not st.recipe_json[0]:
        from ._native import ERRORS
        raise ERRORS[lib.CT_E_CONFIG]("checkpoint '%s' holds no recipe (not written by ctrain train)"
                                      % string(st.path))
    return st


def load(checkpoint, model=None, batch=256, threads=0):
    """A Model from a checkpoint (a save dir, following `latest`, or a step dir) written by ctrain.train or
    `ctrain train`. Image models (mlp, cnn, linear, resnet*, ...) and GPT; model=fn for a checkpoint of a
    custom model (the fn given to ctrain.train). batch: rows predict() runs at once."""
    ctx = Context(threads=threads)
    st = _read_state(ctx, checkpoint)
    r = ffi.new("ct_recipe *")
    lib.ct_recipe_default(r)
    ctx.check(lib.ct_recipe_parse_json(ctx.ptr, st.recipe_json, r), "the checkpoint's recipe")
    rd = _recipe.to_dict(r)
    g = Graph(ctx)
    name = rd["model"] if isinstance(rd["model"], str) else rd["model"].get("type")
    tok = None
    if name == "gpt":
        tp = ffi.new("ct_tokenizer **")
        if rd.get("tokenizer", "char") == "char":
            data, n = ffi.new("char **"), ffi.new("size_t *")
            ctx.check(lib.ct_text_read_file(ctx.ptr, os.path.join(string(st.path), "tokenizer.vocab").encode(),
                                            data, n))
            s = lib.ct_tokenizer_char_from_vocab(ctx.ptr, data[0], n[0], tp)
            lib.ct_free(ctx.ptr, data[0])
            ctx.check(s)
        else:
            ctx.check(lib.ct_train_tokenizer(ctx.ptr, r, ffi.NULL, 0, tp))
        tok = ffi.gc(tp[0], lib.ct_tokenizer_free)
        gc = ffi.new("ct_gpt_config *")
        ctx.check(lib.ct_train_gpt_config(ctx.ptr, r, lib.ct_tokenizer_vocab_size(tok), gc))
        gc.dropout = 0.0
        x = g.input("ids", "i32", [1, gc.context])
        logits = g.model_gpt(x, gc)
        batch, clen = 1, int(gc.context)
    elif lib.ct_model_family_of(r.model) == lib.CT_MODEL_FAMILY_TEXT:
        raise UnsupportedError("ctrain.load: %s checkpoints are not supported yet (image models and gpt are)"
                               % name)
    else:
        c, h, w, k = _image_shape(rd)
        x = g.input("images", "f32", [batch, c, h, w])
        if model is not None:
            logits = model(g, x, k)
        else:
            out = ffi.new("ct_node *")
            g.ctx_check(lib.ct_model_build(g.ptr, x, r, k, out), "model")
            logits = out[0]
        clen = None
    plan = g.compile(None, [logits])
    ctx.check(lib.ct_checkpoint_load(ctx.ptr, os.fsencode(checkpoint), plan.ptr, ffi.NULL, ffi.NULL), "load")
    m = Model(ctx, rd, plan, x, logits, batch, tok, clen)
    m.step = int(st.step)
    m.path = string(st.path)
    return m


IDX_NORM = {"mnist": (0.1307, 0.3081), "fashion-mnist": (0.2860, 0.3530)}


def load_idx(data_dir, split="t10k", mean=0.1307, std=0.3081):
    """An IDX image dataset (MNIST, Fashion-MNIST: <dir>/<split>-images-idx3-ubyte[.gz] and labels) as
    (images float32 (N, C, H, W) normalized (x/255 - mean)/std, labels int32 (N)): copies, loaded by the
    library's own reader (ct_dataset_load_idx, as training reads it)."""
    ctx = Context()
    ds = ffi.new("ct_dataset *")
    ctx.check(lib.ct_dataset_load_idx(ctx.ptr, os.fsencode(data_dir), split.encode(), mean, std, ds), "load_idx")
    try:
        n, c, h, w = int(ds.n), int(ds.c), int(ds.h), int(ds.w)
        x = np.frombuffer(ffi.buffer(ds.images, 4 * n * c * h * w), np.float32).reshape(n, c, h, w).copy()
        y = np.frombuffer(ffi.buffer(ds.labels, 4 * n), np.int32).copy()
    finally:
        lib.ct_dataset_free(ctx.ptr, ds)
    return x, y


def image_data(recipe="recipes/mnist_mlp.json", split="t10k", **overrides):
    """The images and labels an MNIST / Fashion-MNIST recipe trains ("train") or evaluates ("t10k") on,
    normalized as the trainer does (see load_idx)."""
    rd = recipe if isinstance(recipe, dict) and "optimizer" in recipe and "data_dir" in recipe \
        else _recipe.resolve(recipe, **overrides)
    if rd["dataset"] not in IDX_NORM:
        raise UnsupportedError("image_data: only the IDX datasets (mnist, fashion-mnist), not '%s'" % rd["dataset"])
    mean, std = IDX_NORM[rd["dataset"]]
    return load_idx(rd["data_dir"] or os.path.join("data", rd["dataset"]), split, mean, std)
