"""ctrain.train: the CLI's result bit for bit, callbacks that stop a run, errors as exceptions, progress,
a custom model built in Python that matches the C-built one bit for bit."""
import filecmp
import re

import pytest

import ctrain
from conftest import STEPS, need_mnist, step_file

SMALL = {"model": "mlp", "hidden": [16], "dataset": "mnist", "batch_size": 1000, "prefetch": 0, "epochs": 3}


def test_same_weights_and_accuracy_as_the_cli(cli_run, py_run):
    (cd, out), (pd, res) = cli_run, py_run
    assert filecmp.cmp(step_file(cd), step_file(pd), shallow=False), "weights differ from the CLI's"
    acc = float(re.search(r"test accuracy ([0-9.]+)%", out).group(1))
    assert "%.2f" % (100 * res.eval_accuracy) == "%.2f" % acc
    assert res.steps == STEPS and len(res.history) == STEPS and len(res.evals) == 1
    h = res.history[0]
    assert h["step"] == 1 and h["epoch"] == 1 and h["samples"] == 128 and h["loss"] > 0.5


def test_result_unpacks_into_result_and_history():
    need_mnist()
    res, hist = ctrain.train(SMALL, max_steps=3, progress=False)
    assert res.steps == 3 and [m["step"] for m in hist] == [1, 2, 3]
    assert res.recipe["hidden"] == [16] and res.recipe["max_steps"] == 3


def test_on_step_stops_the_run():
    need_mnist()
    seen = []
    res = ctrain.train(SMALL, on_step=lambda m: seen.append(m["step"]) or m["step"] >= 4, progress=False)
    assert seen == [1, 2, 3, 4] and res.steps == 4 and res.stopped_early
    assert len(res.evals) == 1 and res.evals[0]["step"] == 4


def test_on_eval_stops_the_run():
    need_mnist()
    evals = []
    res = ctrain.train(SMALL, on_eval=lambda e: evals.append(e) or True, progress=False)
    assert res.steps == 60 and len(evals) == 1 and res.stopped_early  # one epoch of the three
    assert evals[0]["accuracy"] == res.eval_accuracy > 0.8 and evals[0]["epoch"] == 1


def test_exception_in_a_callback_stops_and_propagates():
    need_mnist()
    calls = []

    def boom(m):
        calls.append(m["step"])
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        ctrain.train(SMALL, on_step=boom, progress=False)
    assert calls == [1]


def test_errors_are_exceptions_with_codes(tmp_path):
    with pytest.raises(ctrain.IoError) as e:
        ctrain.train(SMALL, data_dir=str(tmp_path / "none"), progress=False)
    assert e.value.code == "E70001" and "setup.sh" in e.value.message
    with pytest.raises(ctrain.ConfigError, match="E40010"):
        ctrain.train(SMALL, epochs=-1, progress=False)
    with pytest.raises(ctrain.OomError) as e:
        ctrain.train(SMALL, memory_budget="1M", progress=False)
    assert e.value.code == "E60003"


def test_plain_progress_lines(capsys):
    need_mnist()
    ctrain.train(SMALL, max_steps=4, log_every=2, progress="plain")
    out = capsys.readouterr().out
    assert "step 2/4" in out and "step 4/4" in out and "eval acc" in out


def mlp(g, x, n_classes):
    """recipes/mnist_mlp.json's model, as src/models/mlp.c builds it, from Python."""
    h = g.flatten(x)
    for i, n in enumerate([1024, 1024]):
        g.graph_mark_block(h)
        h = g.dropout(g.relu(g.dense(h, n, "fc%d" % (i + 1))), 0.2)
    g.graph_mark_block(h)
    return g.dense(h, n_classes, "fc3")


def test_custom_model_matches_the_c_model_bit_for_bit(cli_run, tmp_path):
    cd, _ = cli_run
    res = ctrain.train("recipes/mnist_mlp.json", model=mlp, max_steps=STEPS, save_dir=str(tmp_path / "ck"),
                       progress=False)
    assert res.steps == STEPS
    assert filecmp.cmp(step_file(cd), step_file(tmp_path / "ck"), shallow=False)
    m = ctrain.load(str(tmp_path / "ck"), model=mlp)
    assert list(m.parameters()) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]


def test_custom_model_errors_raise():
    need_mnist()

    def bad(g, x, n_classes):
        return g.linear(x, g.param("w", [n_classes, 5]), None)  # 5 inputs: the images have 1x28x28

    with pytest.raises(ctrain.ShapeError):
        ctrain.train(SMALL, model=bad, max_steps=1, progress=False)

    def raises(g, x, n_classes):
        raise RuntimeError("my model")

    with pytest.raises(RuntimeError, match="my model"):
        ctrain.train(SMALL, model=raises, max_steps=1, progress=False)
    with pytest.raises(ctrain.ConfigError, match="text model"):
        ctrain.train({"model": "gpt", "dataset": "moby-dick"}, model=mlp, max_steps=1, progress=False)
