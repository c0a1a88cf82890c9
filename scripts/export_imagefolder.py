#!/usr/bin/env python3
"""scripts/export_imagefolder.py - Fashion-MNIST (or MNIST) gzipped IDX files
as a PNG ImageFolder that `ctrain train` (dataset imagefolder) and
torchvision.datasets.ImageFolder both read:

    OUT/train/<class>/<index>.png   from train-{images,labels}
    OUT/val/<class>/<index>.png     from t10k-{images,labels}

Each 28x28 gray image is padded with 2 black pixels on every side to 32x32
and stored as 8-bit RGB (the gray value in all three channels). Class folders
are named "0-t-shirt", "1-trouser", ... so their sorted order is the label
order. Only the standard library (any python3).

usage: scripts/export_imagefolder.py [--src data/fashion-mnist] [--out DIR]
       [--train-count N] [--val-count N] [--mnist]
(counts: the first N images of each split; 0 = all)
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

FASHION = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle-boot"]


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    if data[:2] != b"\0\0" or data[2] != 8:
        sys.exit("%s: not an unsigned-byte IDX file" % path)
    nd = data[3]
    dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
    return dims, memoryview(data)[4 + 4 * nd:]


def find(src, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(src, name)
        if os.path.exists(p):
            return p
    sys.exit("no %s[.gz] in %s (scripts/setup.sh installs Fashion-MNIST into data/)" % (stem, src))


def png_rgb(rows, w):
    """8-bit RGB PNG bytes of rows of w RGB pixels (filter 0 on every row)."""
    h = len(rows)
    raw = b"".join(b"\0" + r for r in rows)

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def export(src, prefix, out, count, names):
    (ni, h, w), images = read_idx(find(src, prefix + "-images-idx3-ubyte"))
    _, labels = read_idx(find(src, prefix + "-labels-idx1-ubyte"))
    n = ni if count <= 0 else min(count, ni)
    black = bytes(3 * (w + 4))
    for k, name in enumerate(names):
        os.makedirs(os.path.join(out, "%d-%s" % (k, name)), exist_ok=True)
    for i in range(n):
        img = images[i * h * w:(i + 1) * h * w]
        rows = [black, black]  # 28x28 -> 32x32 with a black border, gray -> RGB
        for y in range(h):
            rows.append(bytes(6) + bytes(v for v in img[y * w:(y + 1) * w] for _ in range(3)) + bytes(6))
        rows += [black, black]
        lab = labels[i]
        path = os.path.join(out, "%d-%s" % (lab, names[lab]), "%05d.png" % i)
        with open(path, "wb") as f:
            f.write(png_rgb(rows, w + 4))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=None, help="folder of the gzipped IDX files (default data/fashion-mnist)")
    ap.add_argument("--out", default="data/fashion-mnist-png", help="output ImageFolder root")
    ap.add_argument("--train-count", type=int, default=0, help="first N training images (0: all 60000)")
    ap.add_argument("--val-count", type=int, default=0, help="first N test images (0: all 10000)")
    ap.add_argument("--mnist", action="store_true", help="MNIST digits (class folders 0-zero, ...)")
    a = ap.parse_args()
    src = a.src or ("data/mnist" if a.mnist else "data/fashion-mnist")
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"] if a.mnist else FASHION
    nt = export(src, "train", os.path.join(a.out, "train"), a.train_count, names)
    nv = export(src, "t10k", os.path.join(a.out, "val"), a.val_count, names)
    print("wrote %d train and %d val PNG images (32x32 RGB) under %s" % (nt, nv, a.out))


if __name__ == "__main__":
    main()
