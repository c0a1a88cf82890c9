"""ctrain.recipe - recipes from Python: a dict (the JSON recipe's structure),
a path to a JSON recipe, or None (the default), plus overrides under the same
dotted keys as `ctrain train --set KEY=VALUE` (recipe.h's key table)."""
import json
import math
import os

from ._native import Context, ffi, lib, string

_TYPES = {lib.CT_KEY_INT: "int", lib.CT_KEY_UINT: "uint", lib.CT_KEY_FLOAT: "float", lib.CT_KEY_BOOL: "bool",
          lib.CT_KEY_STRING: "string", lib.CT_KEY_ENUM: "enum", lib.CT_KEY_LIST: "list",
          lib.CT_KEY_BYTES: "bytes"}


def _typed(kind, text):
    """A key's text form (ct_recipe_get) as a Python value of its type."""
    if kind in ("int", "uint"):
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "bool":
        return text == "true"
    if kind == "list":
        return [int(v) for v in text.split(",") if v]
    if kind == "bytes":
        try:
            return int(text)
        except ValueError:
            return text
    return text


def _get(r, key):
    n = lib.ct_recipe_get(r, key.encode(), ffi.NULL, 0)
    if n < 0:
        return None
    buf = ffi.new("char[]", n + 1)
    lib.ct_recipe_get(r, key.encode(), buf, n + 1)
    return string(buf)


def recipe_keys():
    """The recipe key table (recipe.h, docs/recipes.md): {key: {"type", "default", "lo", "hi", "choices",
    "models", "flag", "help"}} in the table's order. lo / hi are None for keys without bounds."""
    d = ffi.new("ct_recipe *")
    lib.ct_recipe_default(d)
    out = {}
    for i in range(lib.ct_recipe_num_keys()):
        k = lib.ct_recipe_key_at(i)
        name = string(k.key)
        kind = _TYPES.get(k.type, str(k.type))
        mbuf = ffi.new("char[256]")
        lib.ct_recipe_models_text(k.models, mbuf, 256)
        numeric = kind in ("int", "uint", "float", "list", "bytes")
        out[name] = {
            "type": kind,
            "default": _typed(kind, _get(d, name)),
            "lo": k.lo if numeric and math.isfinite(k.lo) else None,
            "hi": k.hi if numeric and math.isfinite(k.hi) else None,
            "choices": string(k.choices).split("|") if k.choices != ffi.NULL else None,
            "models": string(mbuf),
            "flag": string(k.flag),
            "help": string(k.help),
        }
    return out


def value_text(value):
    """A Python value in the text form ct_recipe_set (and --set) reads."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def normalize_overrides(overrides):
    """{"optimizer.lr": 0.01} or {"optimizer__lr": 0.01} (a keyword argument cannot hold a dot) ->
    [("optimizer.lr", "0.01")]."""
    return [(k.replace("__", "."), value_text(v)) for k, v in overrides.items()]


def build(ctx, recipe=None, overrides=None, validate=True, base=None):
    """A ct_recipe (cdata, owned by Python) from a dict / path / None and overrides, on top of `base`
    (a ct_recipe *, e.g. a checkpoint's) or the default; errors raise ctrain.ConfigError (E40010) and
    friends naming the key."""
    r = ffi.new("ct_recipe *")
    if base is not None:
        r[0] = base[0]
    else:
        lib.ct_recipe_default(r)
    if isinstance(recipe, dict):
        ctx.check(lib.ct_recipe_parse_json(ctx.ptr, json.dumps(recipe).encode(), r), "recipe")
    elif isinstance(recipe, (str, os.PathLike)):
        ctx.check(lib.ct_recipe_load_file(ctx.ptr, os.fsencode(recipe), r))
    elif recipe is not None:
        raise TypeError("recipe must be a dict, a path to a JSON recipe or None, not %s" % type(recipe).__name__)
    for key, text in normalize_overrides(overrides or {}):
        ctx.check(lib.ct_recipe_set(ctx.ptr, r, key.encode(), text.encode()))
    if validate:
        ctx.check(lib.ct_recipe_validate(ctx.ptr, r))
    return r


def to_dict(r):
    """Every key of a ct_recipe as the JSON recipe's dict (ct_recipe_to_json_full)."""
    n = lib.ct_recipe_to_json_full(r, ffi.NULL, 0)
    buf = ffi.new("char[]", n + 1)
    lib.ct_recipe_to_json_full(r, buf, n + 1)
    return json.loads(string(buf))


def resolve(recipe=None, **overrides):
    """The full recipe (every key) that a recipe and overrides give, as a dict; raises on errors."""
    return to_dict(build(Context(), recipe, overrides))
