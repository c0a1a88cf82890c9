"""ctrain._native - loads libctrain.so through cffi in ABI mode (ffi.cdef of the
generated _cdef.h + ffi.dlopen: no compiler needed) and turns ct_status
codes into ctrain.Error exceptions.

Where the library is looked for, first found wins:
  1. $CTRAIN_LIB (a path to libctrain.so*)
  2. this package's own folder (`make install-python` copies it there)
  3. the repository's build/ (running from a checkout: PYTHONPATH=python)
  4. the system's (`make install`: /usr/local/lib, ldconfig's cache)
"""
import ctypes.util
import glob
import os

import cffi

HERE = os.path.dirname(os.path.abspath(__file__))

ffi = cffi.FFI()
with open(os.path.join(HERE, "_cdef.h")) as _f:
    ffi.cdef(_f.read())


def _candidates():
    env = os.environ.get("CTRAIN_LIB")
    if env:
        yield env
        return
    for d in (HERE, os.path.join(os.path.dirname(os.path.dirname(HERE)), "build")):
        for name in ("libctrain.so", "libctrain.so.2"):
            p = os.path.join(d, name)
            if os.path.exists(p):
                yield p
        for p in sorted(glob.glob(os.path.join(d, "libctrain.so.*"))):
            yield p
    for d in ("/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu"):
        p = os.path.join(d, "libctrain.so.2")
        if os.path.exists(p):
            yield p
    found = ctypes.util.find_library("ctrain")
    if found:
        yield found


def _load():
    # libgomp reads its spin setting once, when it is loaded (docs/abi.md): set it before the library is,
    # as the `ctrain` CLI does (ct_openmp_limit_spin), unless the user chose one.
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = "10000"
    tried = []
    for p in _candidates():
        try:
            return ffi.dlopen(p), p
        except OSError as e:
            tried.append("%s (%s)" % (p, e))
    raise ImportError("ctrain: libctrain.so not found; build it (make) or install it (make install), or set "
                      "CTRAIN_LIB to its path. Tried: " + ("; ".join(tried) or "nothing found"))


lib, lib_path = _load()


def string(p):
    """A C string (const char *) as str; None for NULL."""
    return None if p == ffi.NULL else ffi.string(p).decode("utf-8", "replace")


# ---- errors ------------------------------------------------------------------------------------------------


class Error(Exception):
    """A ctrain error: `status` ("CT_E_CONFIG"), `code` ("E40010"), `message` (the library's, naming the
    problem and what to do) and `advice` (the status's generic advice)."""

    status = None
    code = None

    def __init__(self, message, status=None, code=None, advice=None):
        prefix = "%s %s: " % (code or self.code, status or self.status)
        super().__init__(message if message.startswith(prefix) else prefix + message)  # the library's has it
        self.message = message
        if status:
            self.status = status
        if code:
            self.code = code
        self.advice = advice


def _class_name(status_name):
    # CT_E_INVALID_ARG -> InvalidArgError, CT_E_OOM -> OomError
    return "".join(w.capitalize() for w in status_name[len("CT_E_"):].split("_")) + "Error"


# One subclass per ct_status code, from the C enum (status.h): ctrain.ConfigError, ctrain.IoError, ...
ERRORS = {}
for _value, _name in sorted(ffi.typeof("ct_status").elements.items()):
    if _name.startswith("CT_E_"):
        _cls = type(_class_name(_name), (Error,),
                    {"status": _name, "code": string(lib.ct_status_code(_value)),
                     "__doc__": "%s (%s): %s" % (_name, string(lib.ct_status_code(_value)),
                                                 string(lib.ct_status_advice(_value)))})
        ERRORS[_value] = _cls
        globals()[_cls.__name__] = _cls


def error_for(status, message):
    cls = ERRORS.get(int(status), ERRORS[lib.CT_E_INTERNAL])
    return cls(message or string(lib.ct_status_advice(status)), advice=string(lib.ct_status_advice(status)))


def check(ctx, status, what=None):
    """Raises the Error subclass of a failed ct_status with the context's message."""
    if status == lib.CT_OK:
        return
    msg = string(lib.ct_context_last_error(ctx)) if ctx is not None and ctx != ffi.NULL else ""
    msg = msg or what or ""  # the library's message names the problem; `what` only when it set none
    if ctx is not None and ctx != ffi.NULL:
        lib.ct_context_clear_error(ctx)
    raise error_for(status, msg)


class Context:
    """Owns a ct_context (threads, seed, allocator, the last error)."""

    def __init__(self, threads=0, seed=0, recipe=None):
        out = ffi.new("ct_context **")
        if recipe is not None:
            s = lib.ct_train_context_create(recipe, out)
        else:
            o = ffi.new("ct_context_opts *")
            lib.ct_context_opts_default(o)
            o.num_threads = threads
            o.seed = seed
            s = lib.ct_context_create(o, out)
        check(None, s, "cannot create a ctrain context")
        self.ptr = ffi.gc(out[0], lib.ct_context_free)

    def check(self, status, what=None):
        check(self.ptr, status, what)
