#!/usr/bin/python3
"""scripts/torchvision_to_safetensors.py - torchvision weights <-> ctrain.

ctrain's ResNet / EfficientNet / Swin builders (ct_model_vision, src/models/)
use torchvision 0.14's state_dict names and shapes, except that torchvision's
batchnorm counters (*.num_batches_tracked) and Swin's relative_position_index
buffers (a function of the window size) are not kept. This script converts
once in either direction (Debian: python3-torch, python3-torchvision).

  torchvision_to_safetensors.py --arch resnet50 [--state-dict W.pth]
        [--num-classes 1000] [--in-channels 3] [--seed 0] --out resnet50.safetensors
      torchvision's model (a saved state_dict, e.g. downloaded pretrained
      weights, or a seeded random init) -> an F32 safetensors file that
      ctrain loads with the recipe key init_weights (ct_weights_load).
  torchvision_to_safetensors.py --arch resnet50 --to-torch model.safetensors
        [--num-classes N] [--in-channels C] --out resnet50.pth
      a ctrain file (ct_weights_save, or a checkpoint's model.safetensors)
      -> a torchvision state_dict, loaded with load_state_dict(strict=True)
      (num_batches_tracked set to 0) before it is saved.
--in-channels replaces the first convolution for C-channel images (1 for
MNIST-style data), as ctrain's builders do when the input has C channels.
"""
import argparse
import json
import os
import struct
import sys

import torch
import torch.nn as nn
import torchvision.models as tvm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_safetensors import load_file  # noqa: E402


def build(arch, num_classes, in_channels):
    m = getattr(tvm, arch)(num_classes=num_classes)
    if in_channels != 3:
        if arch.startswith("resnet"):
            c = m.conv1
            m.conv1 = nn.Conv2d(in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, bias=False)
        elif arch.startswith("swin"):
            c = m.features[0][0]
            m.features[0][0] = nn.Conv2d(in_channels, c.out_channels, c.kernel_size, c.stride)
        else:
            c = m.features[0][0]
            m.features[0][0] = nn.Conv2d(in_channels, c.out_channels, c.kernel_size, c.stride, c.padding, bias=False)
    return m


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", required=True, help="resnet18|34|50|101, efficientnet_b0..b4, swin_t|s|b")
    ap.add_argument("--state-dict", help="a torch.save'd state_dict (default: torchvision's init, seeded)")
    ap.add_argument("--to-torch", metavar="SAFETENSORS", help="convert a ctrain file back to a state_dict")
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--in-channels", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    m = build(a.arch, a.num_classes, a.in_channels)
    if a.to_torch:
        tensors, _ = load_file(a.to_torch)
        sd = {k: torch.as_tensor(v) if not torch.is_tensor(v) else v for k, v in tensors.items()}
        for k, v in m.state_dict().items():
            if k.endswith("num_batches_tracked"):
                sd[k] = torch.zeros_like(v)
            elif k.endswith("relative_position_index"):  # Swin: fixed by the window size
                sd[k] = v
        m.load_state_dict(sd, strict=True)  # every name and shape, nothing extra
        torch.save(m.state_dict(), a.out)
        print("%s: %d tensors -> %s (torchvision %s, strict load ok)" % (a.to_torch, len(tensors), a.out, a.arch))
        return
    if a.state_dict:
        m.load_state_dict(torch.load(a.state_dict, map_location="cpu"), strict=True)
    sd = {k: v for k, v in m.state_dict().items()
          if not k.endswith(("num_batches_tracked", "relative_position_index"))}
    write_safetensors(a.out, sd)
    print("%s: %d tensors, %d parameters -> %s" % (a.arch, len(sd), sum(p.numel() for p in m.parameters()), a.out))


if __name__ == "__main__":
    main()
