"""ctrain.arrays - NumPy views of ctrain tensors.

view(t, owner) is zero-copy: the array points into the plan's memory (a
parameter arena, an input, an output) and keeps `owner` (the object that
frees that memory) alive, so the array stays valid as long as it exists.
Writes through it change the tensor. A copy is made only for BF16 / F16
tensors (NumPy has no bfloat16; F16 is viewed, BF16 converted to float32):
`copy=True` forces one."""
import numpy as np

from ._native import ffi, lib

DTYPES = {lib.CT_F32: np.float32, lib.CT_F16: np.float16, lib.CT_I32: np.int32, lib.CT_I64: np.int64,
          lib.CT_U8: np.uint8}


class View(np.ndarray):
    """A NumPy array over ctrain memory; `_ctrain_owner` keeps that memory alive."""

    def __array_finalize__(self, obj):
        self._ctrain_owner = getattr(obj, "_ctrain_owner", None)


def view(t, owner, copy=False):
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    n = 1
    for d in shape:
        n *= d
    if t.data == ffi.NULL or n == 0:
        return np.zeros(shape, np.float32)
    if t.dtype == lib.CT_BF16:  # no bfloat16 in NumPy: widen (a copy)
        raw = np.frombuffer(ffi.buffer(t.data, 2 * n), np.uint16)
        return (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    dt = np.dtype(DTYPES[int(t.dtype)])
    strides = tuple(int(t.strides[i]) * dt.itemsize for i in range(t.ndim))
    span = 1 + sum((s - 1) * st for s, st in zip(shape, (int(t.strides[i]) for i in range(t.ndim))))
    buf = ffi.buffer(t.data, span * dt.itemsize)
    a = np.ndarray(shape, dt, buffer=buf, strides=strides).view(View)
    a._ctrain_owner = owner
    return a.copy() if copy else a
