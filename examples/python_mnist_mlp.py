#!/usr/bin/env python3
"""examples/python_mnist_mlp.py - trains recipes/mnist_mlp.json from Python (ctrain.train, the same trainer
as `ctrain train`) and checks it against the CLI: the same test accuracy and the same final weights, bit for
bit. Then loads the checkpoint and predicts the test set with NumPy.

    make install-python            # or: PYTHONPATH=python (from the repository root)
    python3 examples/python_mnist_mlp.py [--steps N]   # N: a shorter run (default: the recipe's 6 epochs)

Run from the repository root (recipes/ and data/ are relative paths)."""
import argparse
import filecmp
import os
import re
import subprocess
import sys
import tempfile

import ctrain


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=0, help="max_steps (0: the whole recipe)")
    ap.add_argument("--cli", default="build/ctrain", help="the ctrain CLI to compare with ('' to skip)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctrain-example-")
    py_dir, cli_dir = os.path.join(tmp, "py"), os.path.join(tmp, "cli")

    res = ctrain.train("recipes/mnist_mlp.json", max_steps=a.steps, save_dir=py_dir)
    print("python: %d steps, test loss %.4f, test accuracy %.2f%%" % (res.steps, res.eval_loss,
                                                                      100 * res.eval_accuracy))
    model = ctrain.load(py_dir)
    x, y = ctrain.image_data("recipes/mnist_mlp.json", "t10k")
    acc = float((model.predict(x).argmax(1) == y).mean())
    print("predict: test accuracy %.2f%% from %d NumPy images" % (100 * acc, len(x)))
    if not a.cli:
        return 0
    out = subprocess.run([a.cli, "train", "--recipe", "recipes/mnist_mlp.json", "--set", "max_steps=%d" % a.steps,
                          "--set", "save_dir=" + cli_dir, "--quiet"], capture_output=True, text=True, check=True).stdout
    cli_acc = float(re.search(r"test accuracy ([0-9.]+)%", out).group(1))
    step = "step-%06d" % res.steps
    same = filecmp.cmp(os.path.join(py_dir, step, "model.safetensors"),
                       os.path.join(cli_dir, step, "model.safetensors"), shallow=False)
    print("cli:    test accuracy %.2f%%; final weights %s" % (cli_acc, "identical" if same else "DIFFER"))
    ok = same and "%.2f" % cli_acc == "%.2f" % (100 * res.eval_accuracy)
    print("bit for bit: %s" % ("yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
