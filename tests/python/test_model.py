"""ctrain.load: parameters (zero-copy), predict, save, the PyTorch state_dict round trip, GPT predict and
sample (the CLI's text), and the generated graph builder run as a plan."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import ctrain
from conftest import CLI, ROOT


def test_predict_gives_the_runs_accuracy(py_run):
    d, res = py_run
    m = ctrain.load(str(d))
    x, y = ctrain.image_data("recipes/mnist_mlp.json", "t10k")
    assert x.shape == (10000, 1, 28, 28) and y.shape == (10000,)
    logits = m.predict(x)
    assert logits.shape == (10000, 10) and logits.dtype == np.float32
    assert (logits.argmax(1) == y).mean() == res.eval_accuracy
    assert np.array_equal(m.predict(x[:300].reshape(300, 784)), logits[:300])  # (N, 784) works too


def test_parameters_are_zero_copy_views(py_run):
    m = ctrain.load(str(py_run[0]))
    p = m.parameters()
    assert list(p) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]
    assert p["fc1.weight"].shape == (1024, 784) and p["fc1.weight"].dtype == np.float32
    x, _ = ctrain.image_data("recipes/mnist_mlp.json", "t10k")
    before = m.predict(x[:8])
    p["fc3.bias"][3] += 100.0  # written through the view: the model changes
    m.changed()
    after = m.predict(x[:8])
    assert (after.argmax(1) == 3).all() and not np.array_equal(before, after)
    again = m.parameters()["fc3.bias"]
    assert again.ctypes.data == p["fc3.bias"].ctypes.data  # the same memory, no copy
    del m  # the views keep the model's memory alive
    assert p["fc1.weight"].sum() == p["fc1.weight"].sum()


def _read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], np.float32).reshape(v["shape"])
            for k, v in head.items() if k != "__metadata__"}


def test_save_writes_safetensors(py_run, tmp_path):
    m = ctrain.load(str(py_run[0]))
    m.save(str(tmp_path / "w.safetensors"))
    got = _read_safetensors(str(tmp_path / "w.safetensors"))
    assert set(got) == set(m.parameters())
    for k, v in m.parameters().items():
        assert np.array_equal(got[k], v)


def test_state_dict_round_trip_with_pytorch(py_run):
    torch = pytest.importorskip("torch")
    m = ctrain.load(str(py_run[0]))
    sd = m.state_dict()
    assert all(isinstance(v, torch.Tensor) for v in sd.values())
    net = torch.nn.Sequential()
    net.add_module("flat", torch.nn.Flatten())
    for i, (a, b) in enumerate([(784, 1024), (1024, 1024), (1024, 10)]):
        net.add_module("fc%d" % (i + 1), torch.nn.Linear(a, b))
        if i < 2:
            net.add_module("relu%d" % (i + 1), torch.nn.ReLU())
    net.load_state_dict(sd, strict=True)
    x, _ = ctrain.image_data("recipes/mnist_mlp.json", "t10k")
    with torch.no_grad():
        ref = net(torch.from_numpy(x[:64])).numpy()
    np.testing.assert_allclose(m.predict(x[:64]), ref, rtol=1e-4, atol=1e-4)
    # and back: PyTorch's changed weights into ctrain, exactly
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(0.5)
    m.load_state_dict(net.state_dict())
    for k, v in m.parameters().items():
        assert np.array_equal(v, net.state_dict()[k].numpy())
    with torch.no_grad():
        ref = net(torch.from_numpy(x[:64])).numpy()
    np.testing.assert_allclose(m.predict(x[:64]), ref, rtol=1e-4, atol=1e-4)
    bad = dict(net.state_dict())
    bad["fc1.weight"] = bad["fc1.weight"][:, :10]
    with pytest.raises(ctrain.ShapeError):
        m.load_state_dict(bad)
    del bad["fc1.weight"]
    with pytest.raises(ctrain.InvalidArgError, match="missing"):
        m.load_state_dict(bad)


@pytest.fixture(scope="module")
def gpt_ckpt(tmp_path_factory):
    if not os.path.exists(os.path.join(ROOT, "data", "text", "moby-dick.txt")):
        pytest.skip("data/text/moby-dick.txt missing: run scripts/setup.sh")
    d = tmp_path_factory.mktemp("gpt") / "ck"
    ctrain.train("recipes/gpt_char_small.json", max_steps=4, eval_every=4, eval_batches=2, n_layer=1, d_model=32,
                 n_head=2, context=32, batch_size=4, warmup_steps=0, save_dir=str(d), progress=False)
    return d


def test_gpt_predict_and_sample_match_the_cli(gpt_ckpt):
    m = ctrain.load(str(gpt_ckpt))
    ids = m.encode("Call me Ishmael")
    assert m.decode(ids) == "Call me Ishmael"
    lg = m.predict([ids, ids[:5]])
    assert lg.shape == (2, m.predict(ids).shape[1]) and np.array_equal(lg[0], m.predict(ids)[0])
    assert np.array_equal(lg[1], m.predict(ids[:5])[0])  # next-token logits after each row's last token
    assert np.array_equal(m.predict(np.array([ids]))[0], lg[0])
    for args in (dict(tokens=40, seed=3, top_k=5, temperature=0.8), dict(tokens=40, seed=7)):
        text = m.sample("The whale", **args)
        cli = subprocess.run([CLI, "sample", "--checkpoint", str(gpt_ckpt), "--prompt", "The whale", "--tokens",
                              str(args["tokens"]), "--seed", str(args["seed"]), "--top-k", str(args.get("top_k", 0)),
                              "--temperature", str(args.get("temperature", 1.0))],
                             capture_output=True, check=True).stdout.decode("utf-8", "replace")
        assert text + "\n" == cli


def test_load_errors(tmp_path, py_run):
    with pytest.raises(ctrain.IoError):
        ctrain.load(str(tmp_path / "nothing"))
    with pytest.raises(ctrain.UnsupportedError, match="GPT"):
        ctrain.load(str(py_run[0])).sample("x")


def test_generated_builder_compiles_and_runs():
    ops = ctrain.Graph.ops()
    for name in ("input", "param", "linear", "conv2d", "relu", "cross_entropy", "attention", "model_mlp"):
        assert name in ops
    g = ctrain.Graph()
    x = g.input("x", "f32", [4, 8])
    y = g.input("y", "i32", [4])
    h = g.relu(g.dense(x, 16, "fc1"))
    logits = g.dense(h, 3, "fc2")
    loss = g.cross_entropy(logits, y)
    assert logits.shape == (4, 3) and logits.dtype == "f32" and loss.shape == ()
    with pytest.raises(ctrain.ShapeError):
        g.add(x, logits)
    with pytest.raises(ValueError):
        g.input("z", "no_such_dtype", [1])
    p = g.compile(loss, [logits])
    p.tensor(x)[...] = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    p.tensor(y)[...] = [0, 1, 2, 0]
    p.forward(True)
    l0 = p.loss()
    p.backward()
    grads = p.parameters(grads=True)
    assert set(grads) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"} and np.abs(grads["fc2.bias"]).sum() > 0
    params = p.parameters()
    for k in params:  # one SGD step through the zero-copy views lowers the loss
        params[k] -= 0.5 * grads[k]
    p.params_changed()
    p.forward(True)
    assert p.loss() < l0
