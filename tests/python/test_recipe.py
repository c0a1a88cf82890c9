"""Recipes from Python: dicts, paths, overrides with --set's dotted keys, the key table, errors."""
import json

import pytest

import ctrain


def test_dict_and_path_give_the_same_recipe():
    with open("recipes/mnist_mlp.json") as f:
        d = json.load(f)
    assert ctrain.resolve_recipe(d) == ctrain.resolve_recipe("recipes/mnist_mlp.json")
    r = ctrain.resolve_recipe(d)
    assert r["hidden"] == [1024, 1024] and r["optimizer"]["name"] == "adamw" and r["epochs"] == 6


def test_overrides_use_dotted_keys():
    r = ctrain.resolve_recipe("recipes/mnist_mlp.json", **{"optimizer.lr": 0.01}, epochs=2,
                              hidden=[64, 32], augment=True, memory_budget="2G")
    assert r["optimizer"]["lr"] == pytest.approx(0.01) and r["epochs"] == 2 and r["hidden"] == [64, 32]
    assert r["augment"] is True and r["memory_budget"] == 2 << 30
    assert ctrain.resolve_recipe(None, optimizer__weight_decay=0.5)["optimizer"]["weight_decay"] == 0.5


def test_recipe_keys_table():
    keys = ctrain.recipe_keys()
    assert len(keys) > 100
    lr = keys["optimizer.lr"]
    assert lr["type"] == "float" and lr["default"] == pytest.approx(1e-3) and lr["flag"] == "--lr"
    assert lr["lo"] == 0.0 and lr["hi"] > 1 and "learning rate" in lr["help"]
    assert keys["model"]["type"] == "enum" and "mlp" in keys["model"]["choices"] and "gpt" in keys["model"]["choices"]
    assert keys["hidden"]["type"] == "list" and keys["hidden"]["default"] == [1024, 1024]
    assert keys["augment"]["type"] == "bool" and keys["augment"]["default"] is False
    assert keys["save_dir"]["type"] == "string" and keys["save_dir"]["lo"] is None


def test_unknown_key_raises_config_error():
    with pytest.raises(ctrain.ConfigError) as e:
        ctrain.resolve_recipe("recipes/mnist_mlp.json", optimizer__lrr=0.1)
    assert e.value.code == "E40010" and e.value.status == "CT_E_CONFIG"
    assert "optimizer.lrr" in e.value.message and isinstance(e.value, ctrain.Error)


def test_out_of_range_and_wrong_model_keys():
    with pytest.raises(ctrain.ConfigError, match="batch_size"):
        ctrain.resolve_recipe({"batch_size": 0})
    with pytest.raises(ctrain.ConfigError, match="tokenizer"):
        ctrain.resolve_recipe({"model": "mlp", "tokenizer": "byte"})
    with pytest.raises(ctrain.IoError) as e:
        ctrain.resolve_recipe("recipes/no_such_recipe.json")
    assert e.value.code == "E70001"
    with pytest.raises(TypeError):
        ctrain.resolve_recipe(42)
