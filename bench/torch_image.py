#!/usr/bin/python3
"""bench/torch_image.py - decode + augment throughput of torchvision's
ImageFolder + DataLoader on the folder bench/bench_image.c reads, with the
same transforms: read_image (torchvision.io, RGB; Debian has no PIL) ->
float / 255 -> RandomResizedCrop(S, antialias=False) + RandomHorizontalFlip
-> Normalize (train), or Resize(S, antialias=False) + CenterCrop(S) (eval);
batches of 64, shuffled, num_workers = threads (0: the main process).
usage: /usr/bin/python3 bench/torch_image.py DIR [threads 2] [epochs 1] [size 32] [train 1] [batch 64]"""
import sys
import time

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder
from torchvision.io import ImageReadMode, read_image


def load(path):
    return read_image(path, ImageReadMode.RGB)


def main():
    a = sys.argv[1:]
    root = a[0]
    threads = int(a[1]) if len(a) > 1 else 2
    epochs = int(a[2]) if len(a) > 2 else 1
    size = int(a[3]) if len(a) > 3 else 32
    train = int(a[4]) if len(a) > 4 else 1
    batch = int(a[5]) if len(a) > 5 else 64
    torch.set_num_threads(1)
    norm = T.Normalize([0.286] * 3, [0.353] * 3)
    if train:
        tf = T.Compose([T.ConvertImageDtype(torch.float32), T.RandomResizedCrop(size, antialias=False),
                        T.RandomHorizontalFlip(), norm])
    else:
        tf = T.Compose([T.ConvertImageDtype(torch.float32), T.Resize(size, antialias=False), T.CenterCrop(size), norm])
    ds = ImageFolder(root, loader=load, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=threads,
                                     persistent_workers=threads > 0)
    n = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for x, y in dl:
            n += x.shape[0]
    dt = time.perf_counter() - t0
    print("torchvision images %d  seconds %.3f  images/s %.0f  workers %d  %s %dx%d" %
          (n, dt, n / dt, threads, "RandomResizedCrop+flip" if train else "Resize+CenterCrop", size, size))


if __name__ == "__main__":
    main()
