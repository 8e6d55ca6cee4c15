"""``tp.convert`` of a safetensors *directory* at an s3:// URL, against moto's S3 server: the
directory is found as a local one is (``model.safetensors``, else the sharded files' index, else
one candidate), by listing its objects, and converts to the same checkpoint as a local copy."""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

import trackpoint as tp

pytestmark = pytest.mark.slow  # conversions to and from the S3 server: about a second each

safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="safetensors is in the test extra")

TENSORS = {
    "model.dense.kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
    "model.dense.bias": np.ones(3, np.float32),
    "model.head.w": np.full((3, 1), 0.5, np.float64),
}


def _one_file(directory: pathlib.Path) -> None:
    safetensors_numpy.save_file(TENSORS, str(directory / "model.safetensors"), {"format": "pt"})


def _sharded(directory: pathlib.Path) -> None:
    """Two shards and their index, as ``transformers`` writes them."""
    names = sorted(TENSORS)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    for file_name, held in shards.items():
        safetensors_numpy.save_file({n: TENSORS[n] for n in held}, str(directory / file_name), {"format": "pt"})
    weight_map = {name: file_name for file_name, held in shards.items() for name in held}
    total = sum(value.nbytes for value in TENSORS.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


def _one_candidate(directory: pathlib.Path) -> None:
    safetensors_numpy.save_file(TENSORS, str(directory / "weights.safetensors"), {"format": "pt"})


@pytest.mark.parametrize("layout", [_one_file, _sharded, _one_candidate], ids=["one-file", "sharded", "one-candidate"])
@pytest.mark.parametrize("slash", ["", "/"], ids=["no-slash", "slash"])
def test_a_safetensors_directory_at_a_url_converts_as_a_local_one(bucket, s3, tmp_path, layout, slash) -> None:
    local = tmp_path / "hf"
    local.mkdir()
    layout(local)
    for name in os.listdir(local):
        s3.put_file(str(local / name), f"{bucket[5:]}/hf/{name}")
    s3.invalidate_cache()
    expected = tp.convert(str(local), str(tmp_path / "back" / "ckpt"))

    result = tp.convert(f"{bucket}/hf{slash}", f"{bucket}/back/ckpt")

    assert result.direction == expected.direction == "safetensors->tf"
    assert [(r.source, r.name) for r in result.mapping] == [(r.source, r.name) for r in expected.mapping]
    for name, value in TENSORS.items():
        key = name.replace(".", "/") + "/.ATTRIBUTES/VARIABLE_VALUE"
        np.testing.assert_array_equal(tp.load_variable(f"{bucket}/back/ckpt", key), value)
    s3.invalidate_cache()
    for suffix in (".index", ".data-00000-of-00001"):  # the very bytes of the local conversion
        assert s3.cat_file(f"{bucket[5:]}/back/ckpt{suffix}") == (tmp_path / "back" / f"ckpt{suffix}").read_bytes()


def test_a_url_directory_without_safetensors_weights_is_still_taken_for_a_tf_checkpoint(bucket) -> None:
    """A directory of TF checkpoints at a URL converts to safetensors as before."""
    model = tp.Module()
    model.w = tp.Variable(np.ones((2, 2), np.float32))
    tp.CheckpointManager(tp.Checkpoint(model=model), f"{bucket}/run", max_to_keep=1).save()
    result = tp.convert(f"{bucket}/run", f"{bucket}/hf-out")
    assert result.direction == "tf->safetensors" and [r.name for r in result.mapping] == ["model.w"]


def test_an_empty_place_at_a_url_is_not_found(bucket) -> None:
    with pytest.raises(tp.errors.NotFoundError):
        tp.convert(f"{bucket}/nothing-here", f"{bucket}/out/ckpt")
