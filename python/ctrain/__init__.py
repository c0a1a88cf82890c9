"""ctrain - train neural networks on CPUs from Python, over libctrain.so.

    import ctrain
    res = ctrain.train("recipes/mnist_mlp.json", epochs=1, on_step=lambda m: m["loss"] < 0.1)
    print(res.eval_accuracy, len(res.history))
    m = ctrain.load("runs/mnist")            # a checkpoint (save_dir)
    logits = m.predict(images)               # NumPy in, NumPy out
    ctrain.recipe_keys()["optimizer.lr"]     # type, default, bounds, help

The C library does the work (the same trainer as the `ctrain` CLI); this
package is a thin layer over it through cffi (ABI mode: no compiler at
install). README.md ("Python") and docs/python.md say more."""
from ._native import ERRORS, Context, Error, ffi, lib, lib_path  # noqa: F401
from ._native import (ConfigError, CorruptError, DistError, DtypeError, InternalError,  # noqa: F401
                      InvalidArgError, IoError, NonfiniteError, OomError, ShapeError, StateError,
                      UnsupportedError)
from .graph import Graph, Node, Plan  # noqa: F401
from .model import Model, image_data, load, load_idx  # noqa: F401
from .recipe import recipe_keys, resolve as resolve_recipe  # noqa: F401
from .training import TrainResult, train  # noqa: F401

__version__ = "0.3.0"
__all__ = ["train", "load", "load_idx", "image_data", "recipe_keys", "resolve_recipe", "Graph", "Node", "Plan", "Model", "TrainResult",
           "Error", "ConfigError", "CorruptError", "DistError", "DtypeError", "InternalError", "InvalidArgError",
           "IoError", "NonfiniteError", "OomError", "ShapeError", "StateError", "UnsupportedError"]
