"""``tp.merge``: per-task parts become one checkpoint, data files copied as they are, clashes refused."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import trackpoint as tp
from trackpoint import cli
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.bundle_writer import BundleWriter
from trackpoint._graph.object_graph import read_object_graph

REAL = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real"


def _parts(tmp_path: pathlib.Path) -> list[str]:
    a = tp.save_tensors(str(tmp_path / "temp" / "part-00000-of-00002"), {"w": np.ones(3), "s": b"x"})
    b = tp.save_tensors(str(tmp_path / "temp" / "part-00001-of-00002"), {"b": np.arange(4), "c": np.float32(2)})
    return [a, b]


def test_parts_merge_into_one_checkpoint_with_their_data_files_unchanged(tmp_path) -> None:
    parts = _parts(tmp_path)
    out = tp.merge(parts, str(tmp_path / "ckpt"))
    assert tp.verify_checkpoint(out) == []
    reader = tp.load_checkpoint(out)
    assert sorted(reader.get_variable_to_shape_map()) == ["b", "c", "s", "w"]
    assert reader.get_tensor("s") == b"x"
    np.testing.assert_array_equal(reader.get_tensor("b"), np.arange(4))
    for shard, part in enumerate(parts):
        merged = tmp_path / f"ckpt.data-{shard:05d}-of-00002"
        assert merged.read_bytes() == pathlib.Path(part + ".data-00000-of-00001").read_bytes()
    assert all(pathlib.Path(p + ".index").exists() for p in parts)  # the parts are left as they were


def test_slices_of_one_tensor_in_several_parts_are_joined(tmp_path) -> None:
    big = np.arange(40, dtype=np.float32).reshape(10, 4)
    parts = []
    for n, rows in enumerate([(0, 4), (4, 10)]):
        writer = BundleWriter(str(tmp_path / f"part{n}"))
        writer.add_slice("big", (10, 4), ((rows[0], rows[1] - rows[0]), (0, 4)), big[rows[0] : rows[1]])
        writer.finish()
        parts.append(str(tmp_path / f"part{n}"))
    out = tp.merge(parts, str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(tp.load_variable(out, "big"), big)
    assert tp.verify_checkpoint(out) == []


def test_a_key_in_two_parts_is_refused_naming_both(tmp_path) -> None:
    a = tp.save_tensors(str(tmp_path / "p0"), {"w": np.ones(1)})
    b = tp.save_tensors(str(tmp_path / "p1"), {"w": np.ones(1)})
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"'w' is in both .*p0 and .*p1"):
        tp.merge([a, b], str(tmp_path / "out" / "ckpt"))
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_slices_that_disagree_are_refused(tmp_path) -> None:
    parts = []
    for n, shape in enumerate([(10, 4), (12, 4)]):
        writer = BundleWriter(str(tmp_path / f"part{n}"))
        writer.add_slice("big", shape, ((2 * n, 2), (0, 4)), np.zeros((2, 4), np.float32))
        writer.finish()
        parts.append(str(tmp_path / f"part{n}"))
    with pytest.raises(tp.errors.InvalidArgumentError, match="slices of 'big' .* disagree"):
        tp.merge(parts, str(tmp_path / "ckpt"))
    assert not (tmp_path / "ckpt.index").exists()


def test_missing_parts_and_bad_outputs_are_refused(tmp_path) -> None:
    parts = _parts(tmp_path)
    with pytest.raises(tp.errors.NotFoundError):
        tp.merge([parts[0], str(tmp_path / "nope")], str(tmp_path / "ckpt"))
    with pytest.raises(tp.errors.InvalidArgumentError, match="is one of the parts"):
        tp.merge(parts, parts[1])
    with pytest.raises(tp.errors.InvalidArgumentError, match="list of part prefixes"):
        tp.merge(parts[0], str(tmp_path / "ckpt"))
    pathlib.Path(parts[1] + ".data-00000-of-00001").unlink()
    with pytest.raises(tp.errors.NotFoundError):
        tp.merge(parts, str(tmp_path / "ckpt"))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ckpt")) == []


@pytest.mark.skipif(not REAL.is_dir(), reason=f"the real-world checkpoints are not at {REAL}")
def test_the_parts_a_tf2_multi_device_save_left_merge_into_its_layout(tmp_path) -> None:
    """tf2-shahed-temp-part0/1 are a later save's parts than tf2-shahed-cp-sharded (its values and
    variable names differ), but merged they lay out every tensor exactly as TF's merge did there."""
    parts = [
        str(REAL / "tf2-shahed-temp-part0" / "part-00000-of-00002"),
        str(REAL / "tf2-shahed-temp-part1" / "part-00001-of-00002"),
    ]
    out = tp.merge(parts, str(tmp_path / "cp.ckpt"))
    assert tp.verify_checkpoint(out) == []
    merged = {e.key: e for e in BundleReader(out).entries()}
    reference_prefix = str(REAL / "tf2-shahed-cp-sharded" / "cp.ckpt")
    reference = {e.key: e for e in BundleReader(reference_prefix).entries()}
    assert merged.keys() == reference.keys()
    for key, entry in merged.items():
        expected = reference[key]
        assert (entry.dtype_enum, entry.shape, entry.shard_id, entry.offset) == (
            expected.dtype_enum,
            expected.shape,
            expected.shard_id,
            expected.offset,
        ), key
        if key != "_CHECKPOINTABLE_OBJECT_GRAPH":
            assert entry.size == expected.size, key
    # The graphs differ only in the variables' full names (Keras numbered the layers on).
    graphs = [read_object_graph(BundleReader(p)) for p in (out, reference_prefix)]
    for graph in graphs:
        for node in graph.nodes:
            for attr in node.attributes:
                attr.ClearField("full_name")
    assert graphs[0] == graphs[1]
    second = (tmp_path / "cp.ckpt.data-00001-of-00002").read_bytes()
    assert second == pathlib.Path(parts[1] + ".data-00000-of-00001").read_bytes()
    # Values are the parts' own.
    reader = tp.load_checkpoint(out)
    for part in parts:
        part_reader = tp.load_checkpoint(part)
        for key in part_reader.get_variable_to_shape_map():
            if key != "_CHECKPOINTABLE_OBJECT_GRAPH":
                assert np.asarray(reader.get_tensor(key)).tobytes() == np.asarray(part_reader.get_tensor(key)).tobytes()


def test_cli_merge(tmp_path, capsys) -> None:
    parts = _parts(tmp_path)
    out = str(tmp_path / "ckpt")
    assert cli.main(["merge", *parts, "-o", out]) == 0
    assert f"wrote {out}: 4 tensors" in capsys.readouterr().out
    assert cli.main(["merge", parts[0], parts[0], "-o", str(tmp_path / "again")]) == 1
    assert "is in both" in capsys.readouterr().err


def test_a_failed_merge_removes_the_directories_it_made(tmp_path, monkeypatch) -> None:
    import errno

    from trackpoint.tools import merge as merge_module

    def no_space(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(merge_module, "write_index", no_space)
    with pytest.raises(tp.errors.WriteError, match=r"new/deeper/ck: .*No space left.*Free disk space"):
        tp.merge(_parts(tmp_path), str(tmp_path / "new" / "deeper" / "ck"))
    assert not (tmp_path / "new").exists()
