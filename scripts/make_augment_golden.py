#!/usr/bin/python3
"""scripts/make_augment_golden.py - tests/golden/augment.ctg: the image
transforms of src/data/augment.c computed by torchvision's functional ops
(Debian's python3-torchvision 0.14) on the same images and crop parameters.

For each case i the file holds
  img.<i>   U8  (H, W, C)  the source pixels (HWC, as ct_image)
  crop.<i>  I32 (8)        top, left, h, w, flip, train, size, resize
  out.<i>   F32 (C, S, S)  the transformed image
and meta.mean / meta.std F32 (3) (the normalization of every case).

train 1: F.resized_crop(x, top, left, h, w, [S, S], BILINEAR, antialias=False),
         then F.hflip when flip, then F.normalize;
train 0: F.resize(x, resize, BILINEAR, antialias=False) (the shorter side),
         F.center_crop(S), F.normalize (the crop box is the whole image);
x = the uint8 image as float / 255 (ToTensor), so the result carries no
uint8 rounding of torchvision's own. Crop boxes: fixed corner cases plus
RandomResizedCrop.get_params drawn by torchvision itself (torch.manual_seed).
Deterministic: running it twice writes the same bytes.

usage: /usr/bin/python3 scripts/make_augment_golden.py [--out tests/golden/augment.ctg]
"""
import argparse
import os
import struct

import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode

DT_F32, DT_I32, DT_U8 = 0, 1, 2
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def write(path, recs):
    with open(path, "wb") as f:
        f.write(b"CTG1")
        f.write(struct.pack("<I", len(recs)))
        for name, dt, t in recs:
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)) + nb + struct.pack("<II", dt, t.dim()))
            for d in t.shape:
                f.write(struct.pack("<Q", d))
            f.write(t.contiguous().numpy().tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden", "augment.ctg"))
    a = ap.parse_args()
    torch.manual_seed(1234)
    mean, std = MEAN, STD
    cases = []  # (H, W, C, top, left, h, w, flip, train, size, resize)
    # fixed boxes: whole image, corners, 1-pixel, upscale and downscale, odd sizes
    cases += [(32, 32, 3, 0, 0, 32, 32, 0, 1, 32, 0), (37, 53, 3, 5, 7, 20, 31, 1, 1, 24, 0),
              (37, 53, 3, 36, 52, 1, 1, 0, 1, 8, 0), (64, 48, 3, 0, 0, 64, 48, 1, 1, 17, 0),
              (20, 30, 1, 3, 4, 10, 10, 0, 1, 40, 0), (32, 32, 3, 8, 8, 16, 16, 1, 1, 32, 0)]
    # RandomResizedCrop.get_params from torchvision itself, flip from torch.rand
    for (H, W, S) in [(37, 53, 24), (40, 30, 16), (50, 36, 20), (32, 32, 20), (15, 90, 16)]:
        for _ in range(3):
            i, j, h, w = T.RandomResizedCrop.get_params(torch.empty(3, H, W), [0.08, 1.0], [3 / 4, 4 / 3])
            cases.append((H, W, 3, i, j, h, w, int(torch.rand(1).item() < 0.5), 1, S, 0))
    # eval: Resize(shorter side) + CenterCrop
    cases += [(37, 53, 3, 0, 0, 37, 53, 0, 0, 24, 28), (64, 48, 3, 0, 0, 64, 48, 0, 0, 32, 0),
              (32, 32, 3, 0, 0, 32, 32, 0, 0, 32, 0), (50, 36, 1, 0, 0, 50, 36, 0, 0, 20, 24),
              (33, 31, 3, 0, 0, 33, 31, 0, 0, 20, 23)]
    recs = [("meta.mean", DT_F32, torch.tensor(mean, dtype=torch.float32)),
            ("meta.std", DT_F32, torch.tensor(std, dtype=torch.float32))]
    for n, (H, W, C, top, left, h, w, flip, train, S, resize) in enumerate(cases):
        img = torch.randint(0, 256, (H, W, C), dtype=torch.uint8)
        x = img.permute(2, 0, 1).float() / 255.0
        if train:
            y = F.resized_crop(x, top, left, h, w, [S, S], InterpolationMode.BILINEAR, antialias=False)
            if flip:
                y = F.hflip(y)
        else:
            y = F.resize(x, resize if resize else S, InterpolationMode.BILINEAR, antialias=False)
            y = F.center_crop(y, [S, S])
        y = F.normalize(y, mean[:C], std[:C])
        recs.append(("img.%d" % n, DT_U8, img))
        recs.append(("crop.%d" % n, DT_I32, torch.tensor([top, left, h, w, flip, train, S, resize], dtype=torch.int32)))
        recs.append(("out.%d" % n, DT_F32, y.to(torch.float32)))
    write(a.out, recs)
    print("wrote %s: %d cases" % (a.out, len(cases)))


if __name__ == "__main__":
    main()
