#!/usr/bin/env python3
"""Read a ctrain safetensors file (model.safetensors of a checkpoint, or a
file from ct_weights_save) into PyTorch without the safetensors package.

Format (docs/checkpoint-format.md): 8-byte little-endian header length N,
N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
"__metadata__": {str: str}}, then the raw little-endian data. ctrain adds
__metadata__.ctrain_crc32: the CRC32 of the whole file with those 8 hex
digits read as "00000000"; it is verified when present.

usage:
  load_safetensors.py --check FILE          names, shapes, sums and CRC32s
  load_safetensors.py --model mlp --hidden 64 FILE
  load_safetensors.py --model cnn --channels 16,32 FILE
        builds the PyTorch model with ctrain's layout, loads the file with
        load_state_dict(strict=True) and prints the logits' shape
        (--in-shape 1,28,28 and --classes 10 by default, as MNIST)
  load_safetensors.py --model mlp --hidden 64 --inputs X.f32 --expect Y.f32 FILE
        also runs the model (eval mode) on raw little-endian float32 inputs
        and compares the logits with ctrain's (exit 1 beyond 1e-4 relative)
  load_safetensors.py --verify FILE         layout and CRC32 only (no PyTorch)
In Python: from load_safetensors import load_file; tensors, meta = load_file(path)

Exit codes: 0 ok, 1 bad file or mismatch, 77 PyTorch missing (run
scripts/setup.sh).
"""
import argparse
import json
import struct
import sys
import zlib

torch = None  # imported on first use: --verify runs without PyTorch


def _need_torch():
    global torch
    if torch is None:
        try:
            import torch as t
        except ImportError:
            raise ImportError("PyTorch is missing: run scripts/setup.sh (installs python3-torch)")
        torch = t
    return torch

_DTYPES = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
           "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
_CRC_KEY = b'"ctrain_crc32":"'


class FormatError(Exception):
    pass


def read_raw(path):
    """Returns (header dict, metadata dict, data bytes), checking the layout
    and the ctrain CRC32 when the file has one."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise FormatError(f"{path}: truncated ({len(buf)} bytes)")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > len(buf) - 8:
        raise FormatError(f"{path}: header length {n} exceeds the file ({len(buf)} bytes): truncated")
    raw = buf[8:8 + n]
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: header is not valid JSON ({e})")
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    data = buf[8 + n:]
    pos = raw.find(_CRC_KEY)
    if pos >= 0:
        at = 8 + pos + len(_CRC_KEY)
        want = buf[at:at + 8].decode("ascii", "replace")
        crc = zlib.crc32(buf[:at] + b"00000000" + buf[at + 8:]) & 0xFFFFFFFF
        if f"{crc:08x}" != want:
            raise FormatError(f"{path}: CRC32 {crc:08x} but the file records {want}: corrupt")
    end = 0
    for name, e in header.items():
        b, en = e["data_offsets"]
        if not 0 <= b <= en <= len(data):
            raise FormatError(f"{path}: tensor {name} has data_offsets {b}..{en} outside the data ({len(data)} bytes)")
        end = max(end, en)
    if end != len(data):
        raise FormatError(f"{path}: the header describes {end} data bytes but the file holds {len(data)}")
    return header, meta, data


def load_file(path):
    """Returns ({name: torch.Tensor}, metadata) in file order."""
    _need_torch()
    header, meta, data = read_raw(path)
    out = {}
    for name, e in header.items():
        b, en = e["data_offsets"]
        dt = getattr(torch, _DTYPES[e["dtype"]])
        shape = [int(s) for s in e["shape"]]
        if en == b:
            t = torch.zeros(shape, dtype=dt)
        else:
            t = torch.frombuffer(bytearray(data[b:en]), dtype=dt).reshape(shape)
        out[name] = t
    return out, meta


def build_model(kind, sizes, in_shape=(1, 28, 28), classes=10):
    """A PyTorch module whose state_dict names match ctrain's models
    (src/models/mlp.c, src/models/cnn.c)."""
    nn = _need_torch().nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            dims = [in_shape[0] * in_shape[1] * in_shape[2]] + list(sizes) + [classes]
            for i in range(len(dims) - 1):
                setattr(self, f"fc{i + 1}", nn.Linear(dims[i], dims[i + 1]))
            self.n = len(dims) - 1

        def forward(self, x):
            x = x.flatten(1)
            for i in range(self.n):
                x = getattr(self, f"fc{i + 1}")(x)
                if i < self.n - 1:
                    x = torch.relu(x)
            return x

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            c, h, w = in_shape
            for i, oc in enumerate(sizes):
                setattr(self, f"conv{i + 1}", nn.Conv2d(c, oc, 3, padding=1, bias=False))
                setattr(self, f"bn{i + 1}", nn.BatchNorm2d(oc))
                c, h, w = oc, h // 2, w // 2
            self.fc = nn.Linear(c * h * w, classes)
            self.n = len(sizes)

        def forward(self, x):
            for i in range(self.n):
                x = torch.relu(getattr(self, f"bn{i + 1}")(getattr(self, f"conv{i + 1}")(x)))
                x = torch.nn.functional.max_pool2d(x, 2)
            return self.fc(x.flatten(1))

    return MLP() if kind == "mlp" else CNN()


def load_into(model, path):
    """Loads a ctrain file into model (strict). BatchNorm's num_batches_tracked,
    which ctrain does not keep, is left as it is."""
    tensors, _ = load_file(path)
    sd = model.state_dict()
    for k, v in sd.items():
        if k.endswith("num_batches_tracked") and k not in tensors:
            tensors[k] = v
    model.load_state_dict(tensors, strict=True)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--check", action="store_true", help="print name, shape, sum and CRC32 of every tensor")
    ap.add_argument("--model", choices=["mlp", "cnn"])
    ap.add_argument("--hidden", default="1024,1024")
    ap.add_argument("--channels", default="32,64")
    ap.add_argument("--in-shape", default="1,28,28", help="C,H,W of one input image")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--verify", action="store_true", help="check the layout and the CRC32 only (no PyTorch)")
    ap.add_argument("--inputs", help="raw float32 inputs (N*C*H*W) to run the model on")
    ap.add_argument("--expect", help="raw float32 logits (N*classes) ctrain computed for --inputs")
    a = ap.parse_args()
    try:
        if a.verify:
            header, meta, data = read_raw(a.file)
            print(f"OK {len(header)} tensors, {len(data)} data bytes, crc32 {meta.get('ctrain_crc32', 'none')}")
            return 0
        _need_torch()
    except (FormatError, KeyError, ValueError, TypeError, OSError) as e:
        print(f"load_safetensors.py: error: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        print(f"load_safetensors.py: {e}", file=sys.stderr)
        return 77
    try:
        if a.check:
            tensors, meta = load_file(a.file)
            for name, t in tensors.items():
                crc = zlib.crc32(t.contiguous().numpy().tobytes()) & 0xFFFFFFFF
                shape = "x".join(str(s) for s in t.shape) or "scalar"
                print(f"TENSOR {name} {shape} {t.double().sum().item():.17g} {crc:08x}")
            print(f"METADATA {json.dumps(meta, sort_keys=True)}")
        if a.model:
            sizes = [int(s) for s in (a.hidden if a.model == "mlp" else a.channels).split(",") if s]
            shape = tuple(int(s) for s in a.in_shape.split(","))
            m = load_into(build_model(a.model, sizes, in_shape=shape, classes=a.classes), a.file).eval()
            with torch.no_grad():
                y = m(torch.zeros(2, *shape))
            print(f"MODEL {a.model} loaded strictly: {sum(p.numel() for p in m.parameters())} parameters, "
                  f"logits {tuple(y.shape)}")
            if a.inputs and a.expect:
                with open(a.inputs, "rb") as f:
                    x = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(-1, *shape)
                with open(a.expect, "rb") as f:
                    want = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(x.shape[0], -1)
                with torch.no_grad():
                    got = m(x)
                err = ((got - want).abs() / want.abs().clamp(min=1e-2)).max().item()
                print(f"LOGITS {x.shape[0]} samples, max relative difference {err:.3g}")
                if not err <= 1e-4:
                    print("load_safetensors.py: error: PyTorch's logits differ from ctrain's", file=sys.stderr)
                    return 1
    except (FormatError, KeyError, ValueError, TypeError, RuntimeError, OSError) as e:
        print(f"load_safetensors.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
