#!/usr/bin/env python3
"""tests/fuzz/make_image_corpus.py - the seed corpus of the image target
(tests/fuzz/corpus/image/): small PNGs of every color type and bit depth
with palette and tRNS (written here with zlib), baseline RGB and gray JPEGs
(torchvision.io.encode_jpeg, when torchvision is there; else the committed
ones stay), CIFAR-10/100 records, and bad inputs (truncated, bad CRC, empty,
text, 2^32 pixels promised). CMYK JPEGs are covered by tests/test_image.c,
which writes them with libjpeg. Deterministic.
usage: tests/fuzz/make_image_corpus.py [corpus dir]"""
import os
import struct
import sys
import zlib

C = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "image")
os.makedirs(C, exist_ok=True)


def put(name, data):
    with open(os.path.join(C, name), "wb") as f:
        f.write(data)


def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png(w, h, color, depth, rows, extra=b"", interlace=0):
    """rows: raw bytes per row (without the filter byte)"""
    raw = b"".join(b"\0" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace)) +
            extra + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


W, H = 6, 5
put("rgb8.png", png(W, H, 2, 8, [bytes((x * 40 + y * 3 + c * 70) & 255 for x in range(W) for c in range(3)) for y in range(H)]))
put("gray8.png", png(W, H, 0, 8, [bytes((x * 40 + y * 9) & 255 for x in range(W)) for y in range(H)]))
put("gray1.png", png(W, H, 0, 1, [bytes([0b10110100]) for y in range(H)]))
put("rgba8.png", png(W, H, 6, 8, [bytes((x * 30 + c * 60 + y) & 255 for x in range(W) for c in range(4)) for y in range(H)]))
put("graya16.png", png(W, H, 4, 16, [bytes((x * 7 + c + y) & 255 for x in range(W) for c in range(4)) for y in range(H)]))
put("rgb16.png", png(W, H, 2, 16, [bytes((x * 11 + c * 5 + y) & 255 for x in range(W) for c in range(6)) for y in range(H)]))
plte = chunk(b"PLTE", bytes(range(0, 48, 4))) + chunk(b"tRNS", bytes([255, 0, 128]))
put("palette4-trns.png", png(W, H, 3, 4, [bytes([0x01, 0x23, 0x10]) for y in range(H)], plte))
ok = png(W, H, 2, 8, [bytes(range(y, y + 3 * W)) for y in range(H)])
put("truncated.png", ok[:len(ok) - 20])
put("bad-crc.png", ok[:40] + bytes([ok[40] ^ 1]) + ok[41:])
put("empty.png", b"")
put("text.jpg", b"this is not an image\n")
put("huge-dims.png", png(1 << 16, 1 << 16, 0, 8, [b""]))  # 4 G pixels promised, no data
# CIFAR: 1 record of CIFAR-10, 2 of CIFAR-100 (each also a bad input for the other)
put("cifar10-1.bin", bytes([7]) + bytes((i * 13) & 255 for i in range(3072)))
put("cifar100-2.bin", b"".join(bytes([3, 42 + k]) + bytes((i * 5 + k) & 255 for i in range(3072)) for k in range(2)))
try:  # JPEGs through torchvision (Debian's python3-torchvision)
    import torch
    from torchvision.io import encode_jpeg
    x = (torch.arange(3 * 8 * 10).reshape(3, 8, 10) * 5 % 256).to(torch.uint8)
    j = encode_jpeg(x, quality=90).numpy().tobytes()
    put("rgb.jpg", j)
    put("gray.jpg", encode_jpeg(x[:1], quality=90).numpy().tobytes())
    put("truncated.jpg", j[:len(j) // 2])
except ImportError:
    print("no torchvision: the JPEG seeds stay as committed")
print("image corpus: %d files in %s" % (len(os.listdir(C)), C))
