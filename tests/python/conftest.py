"""Fixtures of the Python package's tests (tests/python_test.sh runs them): the repository root as the
working directory (recipes/ and data/ are relative), the CLI, and the shared short MNIST runs."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.environ.get("CTRAIN_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))
os.chdir(ROOT)

CLI = os.environ.get("CTRAIN_CLI", os.path.join(ROOT, "build", "ctrain"))
STEPS = 20  # the short run of recipes/mnist_mlp.json every bit-for-bit test compares


def need_mnist():
    if not os.path.exists(os.path.join(ROOT, "data", "mnist")):
        pytest.skip("data/mnist missing: run scripts/setup.sh")


@pytest.fixture(scope="session")
def cli_run(tmp_path_factory):
    """`ctrain train --recipe recipes/mnist_mlp.json --set max_steps=20`: its checkpoint and output."""
    need_mnist()
    d = tmp_path_factory.mktemp("cli") / "ck"
    out = subprocess.run([CLI, "train", "--recipe", "recipes/mnist_mlp.json", "--set", "max_steps=%d" % STEPS,
                          "--set", "save_dir=%s" % d], capture_output=True, text=True, check=True).stdout
    return d, out


@pytest.fixture(scope="session")
def py_run(tmp_path_factory):
    """The same run through ctrain.train (a dict override of save_dir)."""
    need_mnist()
    import ctrain
    d = tmp_path_factory.mktemp("py") / "ck"
    res = ctrain.train("recipes/mnist_mlp.json", max_steps=STEPS, save_dir=str(d), progress=False)
    return d, res


def step_file(d, name="model.safetensors"):
    return os.path.join(str(d), "step-%06d" % STEPS, name)
