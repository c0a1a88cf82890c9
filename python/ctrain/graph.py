"""ctrain.graph - the public graph builder (include/ctrain/graph.h and the
model builders of models.h) from Python.

Every builder method of ctrain.Graph is GENERATED at import time from the C
declarations (the generated _cdef.h): each `ct_status ct_OP(ct_graph *g, ...,
ct_node *out)` becomes `Graph.OP(...) -> Node`, with these rules for the
parameters, none written per op:
  ct_node            a Node (or its int id); None for CT_NONE (e.g. no bias)
  int n, const T *v  one sequence `v` (shapes, layer sizes, lists of nodes)
  const int *perm    a sequence
  const char *       a str
  enums              the enum's int or its name without the prefix ("f32", "kaiming_uniform", "relu")
  const S *cfg       a dict of S's fields (or a cdata S *)
  trailing scalars   defaults for a few well-known names (stride 1, pad 0, ...)
A user builds a model with them, names its parameters (the state_dict
names), and either trains it with ctrain.train(recipe, model=fn) or compiles
it here (Graph.compile) and runs the plan."""
import inspect
import re

from . import arrays
from ._native import Context, HERE, check, ffi, lib, string

# Defaults by parameter name (the PyTorch defaults), for the trailing parameters of any builder.
DEFAULTS = {"stride": 1, "pad": 0, "dilation": 1, "groups": 1, "trans_a": 0, "trans_b": 0, "keepdim": 0,
            "tanh_approx": 0, "label_smoothing": 0.0, "ignore_index": -100, "momentum": 0.1, "eps": 1e-5,
            "fan_in": 0, "causal": 1, "key_valid": None, "b": None, "beta": None, "init": "kaiming_uniform"}
SKIP = {"ct_compile", "ct_graph_set_tensor_group", "ct_model_build", "ct_graph_create"}


class Node(int):
    """A value of a graph (ct_node id) that knows its graph: shape, dtype, name, and + - * / @."""

    def __new__(cls, graph, i):
        n = int.__new__(cls, i)
        n.graph = graph
        return n

    @property
    def shape(self):
        nd = ffi.new("int *")
        sh = ffi.new("int64_t[8]")
        self.graph.ctx_check(lib.ct_node_shape(self.graph.ptr, self, nd, sh))
        return tuple(int(sh[i]) for i in range(nd[0]))

    @property
    def dtype(self):
        return string(lib.ct_dtype_name(lib.ct_node_dtype(self.graph.ptr, self)))

    @property
    def name(self):
        return string(lib.ct_node_name(self.graph.ptr, self))

    @property
    def op(self):
        return string(lib.ct_node_op_name(self.graph.ptr, self))

    def __add__(self, o):
        return self.graph.add(self, o)

    def __sub__(self, o):
        return self.graph.sub(self, o)

    def __mul__(self, o):
        return self.graph.scale(self, o) if isinstance(o, float) else self.graph.mul(self, o)

    def __truediv__(self, o):
        return self.graph.div(self, o)

    def __matmul__(self, o):
        return self.graph.matmul(self, o)

    def __repr__(self):
        try:
            return "Node(%d, %s %s %s)" % (int(self), self.op, self.dtype, list(self.shape))
        except Exception:
            return "Node(%d)" % int(self)


def _enum_value(ctype, v):
    if isinstance(v, str):
        els = ctype.elements  # {value: "CT_INIT_KAIMING_UNIFORM"}
        want = v.upper().replace("-", "_")
        hits = [val for val, name in els.items() if name.endswith("_" + want) or name == want]
        if len(hits) != 1:
            raise ValueError("%r is not one of %s" % (v, ", ".join(
                sorted(n.split("_", 2)[-1].lower() for n in els.values()))))
        return hits[0]
    return int(v)


def _parse_params(text):
    out = []
    for p in text.split(","):
        p = p.strip()
        m = re.match(r"^(.*?)(\w+)$", p)
        out.append((m.group(1).replace(" ", ""), m.group(2)))
    return out


def _builder_decls():
    src = re.sub(r"\s+", " ", open(HERE + "/_cdef.h").read())
    for m in re.finditer(r"ct_status (ct_\w+)\(ct_graph \*g, ([^)]*)\);", src):
        if m.group(1) not in SKIP:
            yield m.group(1), _parse_params(m.group(2))


def _make_method(cname, params):
    """The Python method for one C builder, from its parameter list (type, name)."""
    cfn = getattr(lib, cname)
    ret = params[-1][1] if params and params[-1][0] == "ct_node*" else None
    cparams = params[:-1] if ret else params
    plan = []  # (python name or None, kind, C type, C name)
    i = 0
    while i < len(cparams):
        ty, nm = cparams[i]
        nxt = cparams[i + 1] if i + 1 < len(cparams) else None
        if ty in ("int",) and nxt and nxt[0].startswith("const") and nxt[0].endswith("*") \
                and nxt[0][5:-1] in ("int64_t", "ct_node", "int"):
            plan.append((nxt[1], "seq", nxt[0][5:-1], None))
            i += 2
            continue
        if ty.startswith("const") and ty.endswith("*") and ty[5:-1] in ("int64_t", "int", "ct_node"):
            plan.append((nm, "arr", ty[5:-1], None))
        elif ty == "constchar*":
            plan.append((nm, "str", None, None))
        elif ty == "ct_node":
            plan.append((nm, "node", None, None))
        elif ty.startswith("const") and ty.endswith("*"):
            plan.append((nm, "struct", ty[5:-1], None))
        elif ty.startswith("ct_") and ffi.typeof(ty).kind == "enum":
            plan.append((nm, "enum", ty, None))
        else:
            plan.append((nm, "scalar", ty, None))
        i += 1
    sig, defaults_ok = [], True
    for nm, kind, _, _ in reversed(plan):
        if defaults_ok and nm in DEFAULTS:
            sig.append(inspect.Parameter(nm, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=DEFAULTS[nm]))
        else:
            defaults_ok = False
            sig.append(inspect.Parameter(nm, inspect.Parameter.POSITIONAL_OR_KEYWORD))
    signature = inspect.Signature(list(reversed(sig)))

    def method(self, *args, **kwargs):
        b = signature.bind(*args, **kwargs)
        b.apply_defaults()
        cargs, keep = [self.ptr], []
        for nm, kind, cty, _ in plan:
            v = b.arguments[nm]
            if kind == "seq":
                v = list(v)
                arr = ffi.new("%s[]" % cty, [int(x) for x in v] or [0])
                keep.append(arr)
                cargs += [len(v), arr]
            elif kind == "arr":
                arr = ffi.new("%s[]" % cty, [int(x) for x in v])
                keep.append(arr)
                cargs.append(arr)
            elif kind == "str":
                s = ffi.new("char[]", str(v).encode())
                keep.append(s)
                cargs.append(s)
            elif kind == "node":
                cargs.append(-1 if v is None else int(v))
            elif kind == "struct":
                if isinstance(v, dict):
                    c = ffi.new(cty + " *")
                    for k, x in v.items():
                        setattr(c, k, x.encode() if isinstance(x, str) else x)
                    v = c
                keep.append(v)
                cargs.append(v)
            elif kind == "enum":
                cargs.append(_enum_value(ffi.typeof(cty), v))
            else:
                cargs.append(v)
        if ret:
            out = ffi.new("ct_node *")
            cargs.append(out)
        self.ctx_check(cfn(*cargs), cname)
        return Node(self, out[0]) if ret else None

    method.__name__ = cname[3:]
    method.__signature__ = inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)]
                                             + list(signature.parameters.values()))
    method.__doc__ = "%s(%s) -> %s  (generated from include/ctrain: ct_status %s(ct_graph *g, %s))" % (
        cname[3:], ", ".join(p for p in signature.parameters), "Node" if ret else "None", cname,
        ", ".join("%s %s" % (t, n) for t, n in params))
    return method


class Graph:
    """A ctrain graph (ct_graph) under construction. Builder methods (input, param, linear, conv2d, relu,
    cross_entropy, model_mlp, ...) are generated from the C headers: see ctrain.graph's docstring and
    Graph.ops(). compile() gives a Plan."""

    def __init__(self, ctx=None):
        self.context = ctx or Context()
        out = ffi.new("ct_graph **")
        self.context.check(lib.ct_graph_create(self.context.ptr, out))
        self.ptr = ffi.gc(out[0], lib.ct_graph_free)

    @classmethod
    def _borrow(cls, ptr):
        """A Graph over a ct_graph the library owns (the trainer's model builder)."""
        g = cls.__new__(cls)
        g.context = None
        g.ptr = ptr
        return g

    @staticmethod
    def _node(ptr, i):
        return Node(Graph._borrow(ptr), i)

    def ctx_check(self, status, what=None):
        check(lib.ct_graph_context(self.ptr), status, what)

    @classmethod
    def ops(cls):
        """The generated builder methods: {name: signature}."""
        return {n: str(inspect.signature(getattr(cls, n))) for n in sorted(_GENERATED)}

    @property
    def num_nodes(self):
        return lib.ct_graph_num_nodes(self.ptr)

    # ---- a few layers made of the generated ops (PyTorch's initialization and names) -----------------------
    def dense(self, x, out_features, name, bias=True):
        """nn.Linear: `name`.weight (out, in) and `name`.bias, kaiming-uniform as PyTorch; x (..., in)."""
        fan_in = x.shape[-1]
        w = self.param(name + ".weight", [out_features, fan_in], "kaiming_uniform", fan_in)
        b = self.param(name + ".bias", [out_features], "kaiming_uniform", fan_in) if bias else None
        y = self.linear(x, w, b)
        self.node_set_name(y, name)
        return y

    def conv(self, x, out_channels, kernel, name, stride=1, pad=0, bias=True):
        """nn.Conv2d (square kernel, groups 1): `name`.weight (OC, C, k, k), `name`.bias."""
        c = x.shape[1]
        fan_in = c * kernel * kernel
        w = self.param(name + ".weight", [out_channels, c, kernel, kernel], "kaiming_uniform", fan_in)
        b = self.param(name + ".bias", [out_channels], "kaiming_uniform", fan_in) if bias else None
        y = self.conv2d(x, w, b, stride, pad)
        self.node_set_name(y, name)
        return y

    def compile(self, loss=None, outputs=(), precision="fp32", backward=None, **opts):
        """A Plan (ct_compile): loss a scalar node (None: forward only), outputs the nodes to read after
        forward. precision "fp32" | "bf16" | "fp16" | "bf16-pure" | "fp16-pure"; other ct_compile_opts
        fields as keywords (fusion_level=1, recompute_every=2, ...)."""
        o = ffi.new("ct_compile_opts *")
        lib.ct_compile_opts_default(o)
        o.precision = _enum_value(ffi.typeof("ct_precision"), precision.replace("-pure", "_pure"))
        o.build_backward = (loss is not None) if backward is None else int(backward)
        for k, v in opts.items():
            setattr(o, k, v)
        outs = ffi.new("ct_node[]", [int(n) for n in outputs] or [0])
        p = ffi.new("ct_plan **")
        self.ctx_check(lib.ct_compile(self.ptr, -1 if loss is None else int(loss), len(outputs), outs, o, p),
                       "compile")
        return Plan(p[0], self.context, loss)


_GENERATED = []
for _cname, _params in _builder_decls():
    setattr(Graph, _cname[3:], _make_method(_cname, _params))
    _GENERATED.append(_cname[3:])


class Plan:
    """A compiled plan (ct_plan): forward / backward, NumPy views of its tensors (zero-copy), parameters."""

    def __init__(self, ptr, ctx, loss):
        self.context = ctx
        self.ptr = ffi.gc(ptr, lib.ct_plan_free)
        self.loss_node = loss

    def _check(self, s, what=None):
        check(lib.ct_plan_context(self.ptr), s, what)

    def tensor(self, node, copy=False):
        """The value of a node (an input: write into it before forward) as a zero-copy NumPy view."""
        t = ffi.new("ct_tensor *")
        self._check(lib.ct_plan_tensor(self.ptr, int(node), t))
        return arrays.view(t, self, copy)

    def grad(self, param, copy=False):
        t = ffi.new("ct_tensor *")
        self._check(lib.ct_plan_grad(self.ptr, int(param), t))
        return arrays.view(t, self, copy)

    def forward(self, training=True):
        self._check(lib.ct_plan_forward(self.ptr, int(training)), "forward")

    def backward(self):
        self._check(lib.ct_plan_backward(self.ptr), "backward")

    def loss(self):
        v = ffi.new("float *")
        self._check(lib.ct_plan_loss(self.ptr, v))
        return float(v[0])

    def parameters(self, grads=False):
        """{name: array} of the parameters (zero-copy views of the parameter arena; grads=True: of the
        gradient arena)."""
        out = {}
        for i in range(lib.ct_plan_num_params(self.ptr)):
            nm = ffi.new("const char **")
            v = ffi.new("ct_tensor *")
            g = ffi.new("ct_tensor *")
            self._check(lib.ct_plan_param_info(self.ptr, i, nm, v, g))
            out[string(nm[0])] = arrays.view(g if grads else v, self)
        return out

    def buffers(self):
        out = {}
        for i in range(lib.ct_plan_num_buffers(self.ptr)):
            nm = ffi.new("const char **")
            v = ffi.new("ct_tensor *")
            self._check(lib.ct_plan_buffer_info(self.ptr, i, nm, v))
            out[string(nm[0])] = arrays.view(v, self)
        return out

    def params_changed(self):
        """Call after writing parameters through a view (mixed precision refreshes its weight copies)."""
        lib.ct_plan_params_changed(self.ptr)
