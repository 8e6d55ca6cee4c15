"""``tp.convert`` both ways: names, slots, sharding, strings, sliced tensors, atomic output, errors."""

from __future__ import annotations

import json
import os
import pathlib

import ml_dtypes
import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import traced_peak
from trackpoint._graph.keys import OBJECT_GRAPH_KEY
from trackpoint.tools._safetensors_format import SafetensorsFile

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def _model() -> tp.Module:
    model = tp.Module()
    model.dense = tp.Module()
    model.dense.kernel = tp.Variable(np.arange(12, dtype=np.float32).reshape(3, 4))
    model.dense.bias = tp.Variable(np.ones(4, np.float32))
    model.embed = tp.Variable(np.arange(6, dtype=np.float64).reshape(2, 3))
    return model


def _trained_checkpoint(directory: pathlib.Path) -> str:
    model = _model()
    optimizer = tp.optimizers.Adam(0.1)
    optimizer.apply_gradients([(np.ones_like(v.numpy()), v) for v in (model.dense.kernel, model.dense.bias)])
    return tp.Checkpoint(model=model, optimizer=optimizer).save(str(directory / "ckpt"))


def test_object_paths_by_default_without_slots_graph_or_save_counter(tmp_path) -> None:
    path = _trained_checkpoint(tmp_path)
    result = tp.convert(path, str(tmp_path / "hf"))
    loaded = safetensors_numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    # the optimizer's own variables (TF1 Adam's beta powers) are values like any other; its slots are not
    assert sorted(loaded) == [
        "model.dense.bias",
        "model.dense.kernel",
        "model.embed",
        "optimizer.beta1_power",
        "optimizer.beta2_power",
    ]
    assert np.array_equal(
        loaded["model.dense.kernel"], tp.load_variable(path, "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE")
    )
    assert [row.source for row in result.mapping if row.name == "model.embed"] == [
        "model/embed/.ATTRIBUTES/VARIABLE_VALUE"
    ]
    with SafetensorsFile(str(tmp_path / "hf" / "model.safetensors")) as f:
        assert f.metadata == {"format": "pt"}
    assert result.files == (str(tmp_path / "hf" / "model.safetensors"),)


def test_slots_and_save_counter_come_when_asked_and_raw_keys_on_request(tmp_path) -> None:
    path = _trained_checkpoint(tmp_path)
    names = {
        row.name
        for row in tp.convert(path, "unused", include_slots=True, include_save_counter=True, dry_run=True).mapping
    }
    assert "save_counter" in names
    assert "model.dense.kernel.OPTIMIZER_SLOT.optimizer.m" in names
    assert "model.dense.bias.OPTIMIZER_SLOT.optimizer.v" in names
    raw = tp.convert(path, "unused", keys="tf", dry_run=True).mapping
    assert {row.name for row in raw} == {row.source for row in raw}
    assert "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE" in {row.name for row in raw}
    assert not os.path.exists("unused")


def test_a_tf1_checkpoint_is_named_by_its_keys_with_dots(tmp_path) -> None:
    prefix = str(tmp_path / "tf1")
    tp.save_tensors(prefix, {"dense/kernel": np.ones((2, 2), np.float32), "global_step": np.int64(5)})
    result = tp.convert(prefix, str(tmp_path / "out.safetensors"))
    assert [(r.source, r.name) for r in result.mapping] == [
        ("dense/kernel", "dense.kernel"),
        ("global_step", "global_step"),
    ]
    assert safetensors_numpy.load_file(str(tmp_path / "out.safetensors"))["global_step"] == 5


def test_rules_rename_drop_and_transpose_for_a_torch_layout(tmp_path) -> None:
    path = _trained_checkpoint(tmp_path)
    result = tp.convert(
        path,
        str(tmp_path / "hf"),
        rename=[r"^model\.=", r"kernel$=weight"],
        drop=["embed", "^optimizer"],
        transpose=["kernel$"],
    )
    loaded = safetensors_numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    kernel = tp.load_variable(path, "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE")
    assert sorted(loaded) == ["dense.bias", "dense.weight"]
    assert np.array_equal(loaded["dense.weight"], kernel.T)
    (row,) = [r for r in result.mapping if r.name == "dense.weight"]
    assert row.transposed and row.shape == (4, 3)


def test_a_conflict_is_refused_naming_both_sources_and_nothing_is_written(tmp_path) -> None:
    path = _trained_checkpoint(tmp_path)
    with pytest.raises(tp.errors.InvalidArgumentError, match="'model/dense/bias/.*' and 'model/dense/kernel/.*'"):
        tp.convert(path, str(tmp_path / "hf"), rename=[r"(bias|kernel)$=w"])
    assert not (tmp_path / "hf").exists()


def test_strings_are_refused_unless_skipped_and_then_reported(tmp_path) -> None:
    prefix = str(tmp_path / "s")
    tp.save_tensors(
        prefix, {"w": np.ones(2, np.float32), "vocab": np.array([b"a", b"b"], object), "z": np.ones(2, np.complex128)}
    )
    with pytest.raises(
        tp.errors.InvalidArgumentError, match=r"2 tensor\(s\) cannot be stored.*'vocab'.*skip_unsupported"
    ):
        tp.convert(prefix, str(tmp_path / "hf"))
    assert not (tmp_path / "hf").exists()
    result = tp.convert(prefix, str(tmp_path / "hf"), skip_unsupported=True)
    assert dict(result.skipped).keys() == {"vocab", "z"}
    assert "string" in dict(result.skipped)["vocab"]
    assert list(safetensors_numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))) == ["w"]
    assert [r.name for r in tp.convert(prefix, str(tmp_path / "hf2"), drop=["vocab", "^z$"]).mapping] == ["w"]


def test_sharded_output_follows_the_hugging_face_layout_and_converts_back(tmp_path) -> None:
    tensors = {f"layer{i}/w": np.full((1000,), i, np.float32) for i in range(5)}  # 4000 bytes each
    prefix = str(tmp_path / "big")
    tp.save_tensors(prefix, tensors)
    out = tmp_path / "hf"
    result = tp.convert(prefix, str(out), max_shard_size="9KB")
    names = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert sorted(os.listdir(out)) == [*names, "model.safetensors.index.json"]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["metadata"] == {"total_size": 20_000}
    assert index["weight_map"] == {f"layer{i}.w": names[i // 2] for i in range(5)}
    assert result.files[-1] == str(out / "model.safetensors.index.json")
    for file_name in names:
        for name, value in safetensors_numpy.load_file(str(out / file_name)).items():
            assert index["weight_map"][name] == file_name and np.all(value == int(name[5]))
    back = tp.convert(str(out / "model.safetensors.index.json"), str(tmp_path / "back"))
    assert len(back.mapping) == 5
    assert np.array_equal(
        tp.load_variable(str(tmp_path / "back"), "layer3/w/.ATTRIBUTES/VARIABLE_VALUE"), tensors["layer3/w"]
    )
    assert tp.convert(str(out), "unused", dry_run=True).mapping == back.mapping  # the directory finds the index


def test_sliced_tensors_are_assembled(tmp_path) -> None:
    big = np.arange(40, dtype=np.float32).reshape(10, 4)
    prefix = str(tmp_path / "sliced")
    tp.save_tensors(
        prefix,
        {"big": big, "small": np.ones(3)},
        tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(64)),
    )
    assert len([n for n in os.listdir(tmp_path) if ".data-" in n]) > 1
    tp.convert(prefix, str(tmp_path / "x.safetensors"))
    assert np.array_equal(safetensors_numpy.load_file(str(tmp_path / "x.safetensors"))["big"], big)


def test_bfloat16_and_float8_are_preserved_both_ways(tmp_path) -> None:
    values = {
        "bf": np.array([1.0, -2.5, 3.140625], ml_dtypes.bfloat16),
        "e4m3": np.array([0.5, -448.0], ml_dtypes.float8_e4m3fn),
        "e5m2": np.array([1.5, 2.0], ml_dtypes.float8_e5m2),
    }
    prefix = str(tmp_path / "low")
    tp.save_tensors(prefix, values)
    tp.convert(prefix, str(tmp_path / "low.safetensors"))
    tp.convert(str(tmp_path / "low.safetensors"), str(tmp_path / "back"))
    for name, value in values.items():
        back = tp.load_variable(str(tmp_path / "back"), f"{name}/.ATTRIBUTES/VARIABLE_VALUE")
        assert back.dtype == value.dtype and back.tobytes() == value.tobytes()


def _safetensors(path: pathlib.Path, tensors: dict[str, np.ndarray]) -> str:
    safetensors_numpy.save_file(tensors, str(path))
    return str(path)


def test_safetensors_to_tf_builds_the_graph_tp_checkpoint_writes_for_the_same_modules(tmp_path) -> None:
    tensors = {
        "model.dense.kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
        "model.dense.bias": np.zeros(3, np.float32),
        "model.head.w": np.ones((3, 1), np.float64),
        "extra": np.array(4, np.int64),
    }
    src = _safetensors(tmp_path / "m.safetensors", tensors)
    ours = str(tmp_path / "ours" / "ckpt")
    tp.convert(src, ours)
    model = tp.Module()
    model.dense = tp.Module()
    model.dense.bias = tp.Variable(tensors["model.dense.bias"], name="model.dense.bias")
    model.dense.kernel = tp.Variable(tensors["model.dense.kernel"], name="model.dense.kernel")
    model.head = tp.Module()
    model.head.w = tp.Variable(tensors["model.head.w"], name="model.head.w")
    extra = tp.Variable(tensors["extra"], name="extra")
    checkpoint = tp.Checkpoint(model=model, extra=extra)
    checkpoint.save_counter.assign(0)
    theirs = checkpoint.write(str(tmp_path / "theirs" / "ckpt"))
    assert tp.load_variable(ours, OBJECT_GRAPH_KEY) == tp.load_variable(theirs, OBJECT_GRAPH_KEY)
    for suffix in (".index", ".data-00000-of-00001"):
        assert pathlib.Path(ours + suffix).read_bytes() == pathlib.Path(theirs + suffix).read_bytes()
    # and tp.Checkpoint restores it by name into fresh objects
    fresh = tp.Module()
    fresh.dense = tp.Module()
    fresh.dense.kernel = tp.Variable(np.zeros((2, 3), np.float32))
    fresh.dense.bias = tp.Variable(np.ones(3, np.float32))
    fresh.head = tp.Module()
    fresh.head.w = tp.Variable(np.zeros((3, 1)))
    tp.Checkpoint(model=fresh, extra=tp.Variable(np.int64(0))).restore(ours).assert_consumed()
    assert np.array_equal(fresh.dense.kernel.numpy(), tensors["model.dense.kernel"])


def test_safetensors_to_tf_without_save_counter(tmp_path) -> None:
    src = _safetensors(tmp_path / "m.safetensors", {"w": np.ones(2, np.float32)})
    tp.convert(src, str(tmp_path / "ckpt"), save_counter=False)
    assert [k for k, _ in tp.list_variables(str(tmp_path / "ckpt"))] == [
        OBJECT_GRAPH_KEY,
        "w/.ATTRIBUTES/VARIABLE_VALUE",
    ]
    root = tp.Module()
    root.w = tp.Variable(np.zeros(2, np.float32))
    tp.Checkpoint(root).read(str(tmp_path / "ckpt")).assert_consumed()


def test_a_hostile_index_cannot_reach_outside_its_directory(tmp_path) -> None:
    (tmp_path / "d").mkdir()
    _safetensors(tmp_path / "outside.safetensors", {"w": np.ones(1, np.float32)})
    index = tmp_path / "d" / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "../outside.safetensors"}}))
    with pytest.raises(tp.errors.InvalidArgumentError, match="outside the index's directory"):
        tp.convert(str(index), str(tmp_path / "ckpt"))
    index.write_text("{not json")
    with pytest.raises(tp.errors.DataLossError, match="not valid JSON"):
        tp.convert(str(index), str(tmp_path / "ckpt"))
    _safetensors(tmp_path / "d" / "a.safetensors", {"w": np.ones(1, np.float32), "v": np.ones(1, np.float32)})
    index.write_text(json.dumps({"weight_map": {"w": "a.safetensors", "u": "a.safetensors"}}))
    with pytest.raises(tp.errors.DataLossError, match="'u' is listed in a.safetensors, which lacks it"):
        tp.convert(str(index), str(tmp_path / "ckpt"))
    assert not list(tmp_path.glob("ckpt*"))


def test_a_damaged_source_leaves_no_destination(tmp_path) -> None:
    prefix = str(tmp_path / "src")
    tp.save_tensors(prefix, {"a": np.ones(1000, np.float32), "b": np.ones(1000, np.float32)})
    data = pathlib.Path(prefix + ".data-00000-of-00001")
    raw = bytearray(data.read_bytes())
    raw[-10] ^= 0xFF
    data.write_bytes(bytes(raw))
    out = tmp_path / "new" / "hf"
    with pytest.raises(tp.errors.DataLossError, match="checksum mismatch"):
        tp.convert(prefix, str(out))
    assert not (tmp_path / "new").exists()  # nothing left: no file, finished or temporary, nor the directories made
    (tmp_path / "kept").mkdir()
    with pytest.raises(tp.errors.DataLossError, match="checksum mismatch"):
        tp.convert(prefix, str(tmp_path / "kept" / "hf"))
    assert list((tmp_path / "kept").iterdir()) == []  # only what the conversion made goes; "kept" was there
    src = _safetensors(tmp_path / "m.safetensors", {"a": np.ones(1000, np.float32), "b": np.ones(1000, np.float32)})
    os.truncate(src, os.path.getsize(src) - 8)
    with pytest.raises(tp.errors.DataLossError):
        tp.convert(src, str(tmp_path / "back" / "ckpt"))
    assert not (tmp_path / "back").exists() or list((tmp_path / "back").iterdir()) == []


def test_a_tf_prefix_must_not_be_a_directory(tmp_path) -> None:
    src = _safetensors(tmp_path / "m.safetensors", {"w": np.ones(1, np.float32)})
    (tmp_path / "out").mkdir()
    with pytest.raises(tp.errors.InvalidArgumentError, match="prefix such as"):
        tp.convert(src, str(tmp_path / "out"))


def test_the_cli_dry_run_prints_the_mapping_table_and_writes_nothing(tmp_path, capsys) -> None:
    from trackpoint.cli import main

    path = _trained_checkpoint(tmp_path)
    status = main(
        ["convert", path, str(tmp_path / "hf"), "--dry-run", "--rename", r"^model\.=", "--transpose", "kernel$"]
    )
    out = capsys.readouterr().out
    assert status == 0 and not (tmp_path / "hf").exists()
    rows = [line.split() for line in out.splitlines()]
    assert ["model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", "dense.kernel", "float32", "[4,3]", "yes"] in rows
    assert "5 tensor(s) would be converted" in out
    assert main(["convert", path, str(tmp_path / "hf"), "--shard-size", "1KB"]) == 0
    assert (tmp_path / "hf" / "model.safetensors").exists()  # 104 bytes in all: one shard


def test_the_cli_refuses_malformed_rules_as_usage_errors(tmp_path, capsys) -> None:
    from trackpoint.cli import main

    for argv in (["--rename", "no-equals"], ["--drop", "["], ["--shard-size", "lots"]):
        with pytest.raises(SystemExit) as caught:
            main(["convert", "a", "b", *argv])
        assert caught.value.code == 2
    assert "has no '='" in capsys.readouterr().err
    status = main(["convert", str(tmp_path / "missing"), str(tmp_path / "hf")])
    assert status == 1 and "trackpoint convert:" in capsys.readouterr().err


def test_a_truncated_data_file_is_data_loss_and_leaves_no_file(tmp_path) -> None:
    prefix = str(tmp_path / "src")
    tp.save_tensors(prefix, {"a": np.ones(300_000, np.float32), "b": np.ones(10, np.float32)})
    data = prefix + ".data-00000-of-00001"
    os.truncate(data, os.path.getsize(data) - 1000)
    out = tmp_path / "hf"
    with pytest.raises(tp.errors.DataLossError) as caught:
        tp.convert(prefix, str(out))
    assert data in str(caught.value) or prefix in str(caught.value)
    assert not out.exists() or list(out.iterdir()) == []


def test_a_large_tensor_streams_in_pieces_bit_identical(tmp_path) -> None:
    value = np.random.default_rng(5).standard_normal((700, 1000)).astype(np.float32)  # 2.8 MB: three pieces
    prefix = tp.save_tensors(str(tmp_path / "src"), {"w": value, "s": np.float64(2.5)})
    tp.convert(prefix, str(tmp_path / "hf"))
    loaded = safetensors_numpy.load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert loaded["w"].tobytes() == value.tobytes() and loaded["s"] == 2.5


def test_new_weights_never_mix_with_older_ones_in_the_destination(tmp_path) -> None:
    """Shards go in place one by one before their index, and transformers loads a model.safetensors before
    an index: so sharded output over any earlier weights, or a single file beside an index, is refused
    with nothing written; a single file over a single file is replaced atomically."""
    prefix = tp.save_tensors(str(tmp_path / "ckpt"), {f"w{i}": np.full(1000, i, np.float32) for i in range(3)})
    out = tmp_path / "hf"
    tp.convert(prefix, str(out))
    tp.convert(prefix, str(out))  # one file over one file: replaced
    before = sorted(os.listdir(out))
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"model\.safetensors.*remove them"):
        tp.convert(prefix, str(out), max_shard_size="5KB")
    assert sorted(os.listdir(out)) == before == ["model.safetensors"]

    sharded = tmp_path / "sharded"
    tp.convert(prefix, str(sharded), max_shard_size="5KB")
    listed = sorted(os.listdir(sharded))
    for size in ("5KB", "9KB", "5GB"):  # the same shard names, other ones, or one file beside the index
        with pytest.raises(tp.errors.InvalidArgumentError, match="would mix with"):
            tp.convert(prefix, str(sharded), max_shard_size=size)
        assert sorted(os.listdir(sharded)) == listed


def test_options_of_the_other_direction_are_refused_not_ignored(tmp_path) -> None:
    st = _safetensors(tmp_path / "w.safetensors", {"model.w": np.ones(2, np.float32)})
    for option in ({"keys": "tf"}, {"include_slots": True}, {"include_save_counter": True}, {"max_shard_size": "1MB"}):
        name = next(iter(option))
        with pytest.raises(tp.errors.InvalidArgumentError, match=rf"{name} applies to a TF checkpoint source"):
            tp.convert(st, str(tmp_path / "ckpt"), **option)
    prefix = tp.save_tensors(str(tmp_path / "tf"), {"w": np.ones(2, np.float32)})
    with pytest.raises(tp.errors.InvalidArgumentError, match="save_counter=False applies to safetensors"):
        tp.convert(prefix, str(tmp_path / "hf"), save_counter=False)
    assert not (tmp_path / "ckpt.index").exists() and not (tmp_path / "hf").exists()


def test_include_graph_converts_back_to_the_same_checkpoint_that_restores(tmp_path) -> None:
    path = _trained_checkpoint(tmp_path)
    out = tmp_path / "hf"
    result = tp.convert(path, str(out), include_graph=True)
    names = {row.name for row in result.mapping}
    assert "model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE" in names  # slots kept
    assert "save_counter/.ATTRIBUTES/VARIABLE_VALUE" in names
    with SafetensorsFile(str(out / "model.safetensors")) as f:
        assert set(f.metadata) == {"format", "tf.object_graph", "tf.string_tensors"}
    back = str(tmp_path / "back" / "ckpt")
    tp.convert(str(out), back)
    with tp.CheckpointReader(path) as a, tp.CheckpointReader(back) as b:
        assert a.get_tensor(OBJECT_GRAPH_KEY) == b.get_tensor(OBJECT_GRAPH_KEY)
        assert a.get_variable_to_shape_map() == b.get_variable_to_shape_map()
    model, optimizer = _model(), tp.optimizers.Adam(0.1)
    optimizer.apply_gradients([(np.zeros_like(v.numpy()), v) for v in (model.dense.kernel, model.dense.bias)])
    tp.Checkpoint(model=model, optimizer=optimizer).restore(back).assert_consumed()
    slot = "model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"
    assert np.array_equal(optimizer.get_slot(model.dense.kernel, "m").numpy(), tp.load_variable(path, slot))


def test_include_graph_refuses_what_would_not_come_back_whole(tmp_path) -> None:
    path = _trained_checkpoint(tmp_path)
    for options in ({"rename": [r"^model\.="]}, {"drop": "bias"}, {"keys": "path"}):
        with pytest.raises(tp.errors.InvalidArgumentError, match="include_graph keeps the whole checkpoint"):
            tp.convert(path, str(tmp_path / "hf"), include_graph=True, **options)
    tf1 = tp.save_tensors(str(tmp_path / "tf1"), {"w": np.ones(2, np.float32)})
    with pytest.raises(tp.errors.InvalidArgumentError, match="no object graph to include"):
        tp.convert(tf1, str(tmp_path / "hf"), include_graph=True)
    assert not (tmp_path / "hf").exists()
    out = tmp_path / "whole"
    tp.convert(path, str(out), include_graph=True)
    with pytest.raises(tp.errors.InvalidArgumentError, match="convert back whole"):
        tp.convert(str(out), str(tmp_path / "back"), rename=["a=b"])


def test_damaged_embedded_graph_metadata_is_data_loss(tmp_path) -> None:
    path = _trained_checkpoint(tmp_path)
    out = tmp_path / "hf"
    tp.convert(path, str(out), include_graph=True)
    loaded = safetensors_numpy.load_file(str(out / "model.safetensors"))
    with SafetensorsFile(str(out / "model.safetensors")) as f:
        metadata = dict(f.metadata)
    broken = tmp_path / "broken"
    broken.mkdir()
    safetensors_numpy.save_file(loaded, str(broken / "model.safetensors"), {**metadata, "tf.object_graph": "!!"})
    with pytest.raises(tp.errors.DataLossError, match="metadata is damaged"):
        tp.convert(str(broken), str(tmp_path / "b1"))
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    del loaded["model/embed/.ATTRIBUTES/VARIABLE_VALUE"]
    safetensors_numpy.save_file(loaded, str(incomplete / "model.safetensors"), metadata)
    with pytest.raises(tp.errors.DataLossError, match="names 1 tensor.*model/embed"):
        tp.convert(str(incomplete), str(tmp_path / "b2"))
    assert not list(tmp_path.glob("b[12]*"))


def test_a_tensor_named_like_the_metadata_entry_is_refused_naming_its_key(tmp_path) -> None:
    src = tp.save_tensors(str(tmp_path / "src"), {"__metadata__": np.ones(1), "w": np.ones(2, np.float32)})
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"'__metadata__' would be named .*rename") as caught:
        tp.convert(src, str(tmp_path / "hf"))
    assert caught.value.key == "__metadata__" and src in str(caught.value)
    assert not (tmp_path / "hf").exists()
    result = tp.convert(src, str(tmp_path / "hf"), rename={"^__metadata__$": "metadata"})
    assert sorted(safetensors_numpy.load_file(result.files[0])) == ["metadata", "w"]


def test_a_key_that_is_not_utf8_is_refused_or_skipped_naming_it(tmp_path) -> None:
    bad = b"w\xff".decode("utf-8", "surrogateescape")  # how trackpoint reads such a key
    src = tp.save_tensors(str(tmp_path / "src"), {bad: np.ones(2, np.float32), "v": np.ones(1, np.float32)})
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"'w\\udcff' \(name not UTF-8\)") as caught:
        tp.convert(src, str(tmp_path / "hf"))
    assert caught.value.key == bad
    assert not (tmp_path / "hf").exists()
    result = tp.convert(src, str(tmp_path / "hf"), skip_unsupported=True)
    assert [key for key, _ in result.skipped] == [bad] and "not valid UTF-8" in result.skipped[0][1]
    assert list(safetensors_numpy.load_file(result.files[0])) == ["v"]


def test_a_hostile_index_is_data_loss_naming_it(tmp_path) -> None:
    _safetensors(tmp_path / "a.safetensors", {"w": np.ones(1, np.float32)})
    index = tmp_path / "x.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "a\0.safetensors"}}))
    with pytest.raises(tp.errors.DataLossError, match="NUL byte") as caught:
        tp.convert(str(index), str(tmp_path / "o1" / "ckpt"))
    assert str(index) in str(caught.value)
    index.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(tp.errors.DataLossError, match="nests too deeply") as caught:
        tp.convert(str(index), str(tmp_path / "o2" / "ckpt"))
    assert str(index) in str(caught.value)
    assert not list(tmp_path.glob("o*"))


def test_a_shard_header_beyond_the_limit_is_refused_before_anything_is_written(tmp_path, monkeypatch) -> None:
    from trackpoint.tools import _to_safetensors

    tensors = {"a_big": np.ones(40, np.float32)} | {f"layer{i}": np.ones(1, np.float32) for i in range(10)}
    src = tp.save_tensors(str(tmp_path / "src"), tensors)
    monkeypatch.setattr(_to_safetensors, "MAX_HEADER_BYTES", 400)
    # two shards: the first ('a_big' alone) fits, the second's ten headers do not; nothing is written at all
    with pytest.raises(tp.errors.InvalidArgumentError, match="00002-of-00002.safetensors: its safetensors header"):
        tp.convert(src, str(tmp_path / "hf"), max_shard_size=160)
    assert not (tmp_path / "hf").exists()
    result = tp.convert(src, str(tmp_path / "hf"), max_shard_size=16)  # fewer tensors a file: headers fit
    assert len(result.files) == 5  # a_big alone, the rest four by four (then two), and the index


def test_a_destination_that_cannot_be_a_file_or_directory_is_refused_naming_it(tmp_path) -> None:
    src = tp.save_tensors(str(tmp_path / "src"), {"w": np.ones(2, np.float32)})
    (tmp_path / "out.safetensors").mkdir()
    with pytest.raises(tp.errors.InvalidArgumentError, match="out.safetensors: is a directory"):
        tp.convert(src, str(tmp_path / "out.safetensors"))
    assert list((tmp_path / "out.safetensors").iterdir()) == []
    afile = tmp_path / "afile"
    afile.write_text("x")
    for dst in ("x.safetensors", "hf", "deeper/hf"):
        with pytest.raises(tp.errors.WriteError, match=f"{afile} is not a directory .*remove or rename it"):
            tp.convert(src, str(afile / dst))
    tp.convert(src, str(tmp_path / "hf"))
    with pytest.raises(tp.errors.WriteError, match=f"{afile} is not a directory .*remove or rename it"):
        tp.convert(str(tmp_path / "hf"), str(afile / "sub" / "ckpt"))  # safetensors -> TF checks it too
    assert afile.read_text() == "x"


def test_an_os_error_writing_safetensors_is_a_write_error_and_leaves_nothing(tmp_path, monkeypatch) -> None:
    import errno

    src = tp.save_tensors(str(tmp_path / "src"), {"w": np.ones(2, np.float32)})
    real_replace = os.replace

    def full_disk(a: str, b: str) -> None:
        if str(b).endswith(".safetensors"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(a, b)

    monkeypatch.setattr(os, "replace", full_disk)
    out = tmp_path / "new" / "hf"
    with pytest.raises(tp.errors.WriteError, match=f"could not write {out}: .*No space.*Free disk space"):
        tp.convert(src, str(out))
    assert not (tmp_path / "new").exists()


def test_safetensors_to_tf_transposes_in_bounded_memory(tmp_path) -> None:

    rows, columns = 2048, 4096  # float32: 32 MiB
    value = np.arange(rows * columns, dtype=np.float32).reshape(rows, columns)
    src = _safetensors(tmp_path / "m.safetensors", {"w": value})
    del value
    peak = traced_peak(lambda: tp.convert(src, str(tmp_path / "back" / "ckpt"), transpose="w", save_counter=False))[1]
    # one whole copy and a block of rows (16 MiB), not two whole copies (64 MiB, as a whole transpose took)
    assert peak < (32 << 20) + (24 << 20), peak
    back = tp.load_variable(str(tmp_path / "back" / "ckpt"), "w/.ATTRIBUTES/VARIABLE_VALUE")
    assert back.shape == (columns, rows)
    assert np.array_equal(back, np.arange(rows * columns, dtype=np.float32).reshape(rows, columns).T)


def test_rule_errors_name_the_source_file(tmp_path) -> None:
    src = _safetensors(tmp_path / "m.safetensors", {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})
    with pytest.raises(tp.errors.InvalidArgumentError, match=f"^{src}: 'a' and 'b' would both be named 'x'"):
        tp.convert(src, str(tmp_path / "o" / "ckpt"), rename="^.$=x")
    with pytest.raises(tp.errors.InvalidArgumentError, match=f"^{src}: --transpose matches 'a' of shape"):
        tp.convert(src, str(tmp_path / "o" / "ckpt"), transpose="a")
    prefix = tp.save_tensors(str(tmp_path / "tf"), {"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})
    with pytest.raises(tp.errors.InvalidArgumentError, match=f"^{prefix}: 'a' and 'b' would both be named 'x'"):
        tp.convert(prefix, str(tmp_path / "hf"), rename="^.$=x")
    with pytest.raises(tp.errors.InvalidArgumentError, match=f"^{prefix}: --transpose matches 'a' of shape"):
        tp.convert(prefix, str(tmp_path / "hf"), transpose="a")


@pytest.mark.parametrize("block_bytes", [64, 1 << 20])
def test_a_transpose_from_safetensors_is_exact_in_blocks_of_rows_or_pieces_of_one(
    tmp_path, monkeypatch, block_bytes: int
) -> None:
    from trackpoint.tools import _to_tf

    monkeypatch.setattr(_to_tf, "_BLOCK_BYTES", block_bytes)  # 64: three rows of 'narrow', a part of a row of 'wide'
    tensors = {
        "narrow": np.arange(200, dtype=np.float32).reshape(40, 5),
        "wide": np.arange(200, dtype=np.int64).reshape(5, 40),
        "empty": np.zeros((0, 3), np.float32),
    }
    src = _safetensors(tmp_path / "m.safetensors", tensors)
    prefix = str(tmp_path / "back" / "ckpt")
    tp.convert(src, prefix, transpose=".")
    for name, value in tensors.items():
        back = tp.load_variable(prefix, f"{name}/.ATTRIBUTES/VARIABLE_VALUE")
        assert back.dtype == value.dtype and np.array_equal(back, value.T), name
