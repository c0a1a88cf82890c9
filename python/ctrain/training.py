"""ctrain.training - ctrain.train(): the recipe through the library's one
trainer (ct_train, the same as `ctrain train`), with Python callbacks per
step and per evaluation, a progress display and the metrics history."""
import os

from . import recipe as _recipe
from ._native import Context, Error, ffi, lib, string


class TrainResult:
    """What ctrain.train returns: the run's totals (ct_train_result), `history` (one dict per optimizer
    step: step, epoch, loss, acc, lr, samples, grad_norm, loss_scale, time), `evals` (one dict per
    evaluation: epoch, step, loss, accuracy, detail) and `recipe` (the full recipe that ran, a dict)."""

    def __init__(self, res, history, evals, recipe):
        self.steps = int(res.steps)
        self.seconds = float(res.seconds)
        self.eval_loss = float(res.eval_loss)
        self.eval_accuracy = float(res.eval_accuracy)
        self.stopped_early = bool(res.stopped_early)
        self.peak_bytes = int(res.peak_bytes)
        self.skipped_steps = int(res.skipped_steps)
        self.history = history
        self.evals = evals
        self.recipe = recipe

    def __repr__(self):
        return ("TrainResult(steps=%d, eval_loss=%.4f, eval_accuracy=%.4f, stopped_early=%s, seconds=%.1f)"
                % (self.steps, self.eval_loss, self.eval_accuracy, self.stopped_early, self.seconds))

    def __iter__(self):  # result, history = ctrain.train(...)
        return iter((self, self.history))


def _step_dict(m):
    d = {"step": int(m.step), "epoch": int(m.epoch), "loss": float(m.loss), "acc": float(m.acc), "lr": float(m.lr),
         "samples": float(m.samples), "time": float(m.time_s)}
    d["grad_norm"] = float(m.grad_norm) if m.grad_norm >= 0 else None
    d["loss_scale"] = float(m.loss_scale) if m.loss_scale >= 0 else None
    return d


class _Run:
    """The state the C callbacks reach through cb_user: Python callbacks, history, the first exception."""

    def __init__(self, on_step, on_eval, progress, model):
        self.on_step, self.on_eval, self.progress, self.model = on_step, on_eval, progress, model
        self.history, self.evals, self.exc = [], [], None
        self.handle = ffi.new_handle(self)


@ffi.callback("int(void *, const ct_metrics_step *, int64_t)", onerror=lambda *a: 1)
def _c_on_step(user, m, total):
    run = ffi.from_handle(user)
    d = _step_dict(m)
    run.history.append(d)
    try:
        if run.progress:
            run.progress.step(d, int(total))
        return 1 if run.on_step and run.on_step(d) else 0
    except BaseException as e:  # stop the run; ctrain.train raises it after ct_train returns
        run.exc = run.exc or e
        return 1


@ffi.callback("int(void *, int64_t, int64_t, const ct_task_eval *)", onerror=lambda *a: 1)
def _c_on_eval(user, epoch, step, ev):
    run = ffi.from_handle(user)
    d = {"epoch": int(epoch) + 1, "step": int(step), "loss": float(ev.loss), "accuracy": float(ev.accuracy),
         "detail": string(ev.detail)}
    run.evals.append(d)
    try:
        if run.progress:
            run.progress.evaluation(d)
        return 1 if run.on_eval and run.on_eval(d) else 0
    except BaseException as e:
        run.exc = run.exc or e
        return 1


@ffi.callback("ct_status(void *, ct_graph *, ct_node, int64_t, ct_node *)", onerror=lambda *a: lib.CT_E_INVALID_ARG)
def _c_build(user, g, x, n_classes, out):
    from .graph import Graph
    run = ffi.from_handle(user)
    try:
        logits = run.model(Graph._borrow(g), Graph._node(g, x), int(n_classes))
        out[0] = int(logits)
        return lib.CT_OK
    except Error as e:
        run.exc = run.exc or e
        return lib.CT_E_INVALID_ARG
    except BaseException as e:
        run.exc = run.exc or e
        return lib.CT_E_INVALID_ARG


def train(recipe=None, *, on_step=None, on_eval=None, model=None, progress=True, resume=None, **overrides):
    """Trains a recipe with ctrain's trainer (ct_train, as `ctrain train`).

    recipe     a dict (the JSON recipe's structure), a path to a JSON recipe, or None (the default recipe)
    overrides  recipe keys as `--set` takes them: ctrain.train(r, epochs=1, **{"optimizer.lr": 0.01});
               a keyword cannot hold a dot, so optimizer__lr=0.01 means optimizer.lr
    on_step    fn(metrics: dict) after every optimizer step; a true return stops the run
    on_eval    fn(evaluation: dict) after every evaluation; a true return stops the run
    model      fn(graph, x, n_classes) -> logits node: a custom image model built with ctrain.Graph's
               ops (it replaces the recipe's model; the recipe's data, optimizer, schedule, precision,
               checkpoints apply)
    progress   True: a tqdm bar if tqdm is installed, else plain lines every log_every steps; False: silent
    resume     a checkpoint (save dir or step dir) to continue bit for bit

    Returns a TrainResult (also `result, history = ctrain.train(...)`). Errors raise ctrain.Error
    subclasses (ConfigError E40010, IoError E70001, NonfiniteError E40020, ...)."""
    ctx0 = Context()
    base = None
    if resume is not None:  # the checkpoint's recipe (its paths for writing cleared), then recipe and overrides
        base = ffi.new("ct_recipe *")
        ctx0.check(lib.ct_train_resume_recipe(ctx0.ptr, os.fsencode(resume), base, ffi.NULL))
    r = _recipe.build(ctx0, recipe, overrides, base=base)
    ctx = Context(recipe=r)
    prog = None
    if progress:
        from .progress import Progress
        prog = Progress(progress, every=r.log_every)
    run = _Run(on_step, on_eval, prog, model)
    o = ffi.new("ct_train_opts *")
    lib.ct_train_opts_default(o)
    o.out = ffi.NULL
    o.on_step = _c_on_step
    o.on_eval = _c_on_eval
    o.cb_user = run.handle
    keep = []
    if resume is not None:
        keep.append(ffi.new("char[]", os.fsencode(resume)))
        o.resume = keep[-1]
    task = ffi.NULL
    if model is not None:
        tp = ffi.new("ct_task **")
        ctx.check(lib.ct_task_image_custom(ctx.ptr, r, _c_build, run.handle, tp))
        task = tp[0]
        o.task = task
    res = ffi.new("ct_train_result *")
    try:
        s = lib.ct_train(ctx.ptr, r, o, res)
    finally:
        if task != ffi.NULL:
            lib.ct_task_free(task)
        if prog:
            prog.close()
    if run.exc is not None:
        raise run.exc
    ctx.check(s, "training failed")
    result = TrainResult(res, run.history, run.evals, _recipe.to_dict(r))
    if prog:
        prog.summary(result)
    return result
