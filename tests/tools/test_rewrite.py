"""``tp.rewrite``: moves, drops, adds and casts give a consistent checkpoint, and bad rules change nothing."""

from __future__ import annotations

import os
import pathlib

import ml_dtypes
import numpy as np
import pytest

import trackpoint as tp
from tests.helpers import traced_peak
from trackpoint import cli
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph.keys import OBJECT_GRAPH_KEY
from trackpoint._graph.object_graph import read_object_graph
from trackpoint.tools._object_paths import tf_paths
from trackpoint.tools.rewrite import Step, plan_rewrite


def assert_consistent(prefix: str) -> None:
    """The checkpoint at ``prefix`` is one TF could have written: every check of the object graph."""
    assert tp.verify_checkpoint(prefix) == []
    with BundleReader(prefix) as bundle:
        graph = read_object_graph(bundle)
        assert graph is not None
        stored = set(tp.load_checkpoint(prefix).get_variable_to_shape_map()) - {OBJECT_GRAPH_KEY}
    paths = tf_paths(graph)
    # Node ids: breadth first along children, then the slot variables.
    assert list(paths) == list(range(len(graph.nodes)))
    children = {c.node_id for n in graph.nodes for c in n.children}
    referenced = set()
    for node_id, node in enumerate(graph.nodes):
        for attr in node.attributes:
            assert attr.checkpoint_key.startswith(f"{paths[node_id]}/.ATTRIBUTES/"), (paths[node_id], attr)
            found = {k for k in stored if k == attr.checkpoint_key or k.startswith(attr.checkpoint_key + "-")}
            assert found, attr.checkpoint_key
            referenced |= found
        for slot in node.slot_variables:
            assert graph.nodes[slot.slot_variable_node_id].attributes
            assert slot.slot_variable_node_id not in children
            assert graph.nodes[slot.original_variable_node_id].attributes
            assert paths[slot.slot_variable_node_id] == (
                f"{paths[slot.original_variable_node_id]}/.OPTIMIZER_SLOT/{paths[node_id]}/{slot.slot_name}"
            )
    assert referenced == stored, stored - referenced

    # has_checkpoint_values: true exactly where a node or a descendant holds values.
    def holds(node_id: int, seen: frozenset[int] = frozenset()) -> bool:
        node = graph.nodes[node_id]
        if node.attributes or node.slot_variables:
            return True
        return any(holds(c.node_id, seen | {node_id}) for c in node.children if c.node_id not in seen | {node_id})

    for node_id, node in enumerate(graph.nodes):
        assert node.has_checkpoint_values.value == holds(node_id), paths[node_id]


class Net(tp.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = tp.Module()
        self.encoder.w = tp.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
        self.head = tp.Variable(np.array([0.5, -1.5, 2.25], np.float32), name="head")
        self.step = tp.Variable(np.int64(5), name="step")


def _source(tmp_path: pathlib.Path) -> tuple[str, dict[str, np.ndarray]]:
    net = Net()
    opt = tp.optimizers.Adam(0.1)
    opt.apply_gradients([(np.ones((2, 3), np.float32), net.encoder.w), (np.ones(3, np.float32), net.head)])
    path = tp.Checkpoint(model=net, optimizer=opt).write(str(tmp_path / "src" / "ckpt"))
    reader = tp.load_checkpoint(path)
    return path, {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


def _files(directory: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()} if directory.is_dir() else {}


W = "model/encoder/w/.ATTRIBUTES/VARIABLE_VALUE"
HEAD = "model/head/.ATTRIBUTES/VARIABLE_VALUE"


def test_a_moved_subtree_restores_into_the_moved_structure(tmp_path) -> None:
    src, before = _source(tmp_path)
    out = tp.rewrite(src, str(tmp_path / "out" / "ckpt"), rename={"model/encoder": "model/backbone/encoder"})
    assert_consistent(out)
    net = Net()
    net.backbone = tp.Module()
    net.backbone.encoder = net.encoder
    del net.encoder
    w = net.backbone.encoder.w
    opt = tp.optimizers.Adam(0.1)
    opt.apply_gradients([(np.zeros((2, 3), np.float32), w), (np.zeros(3, np.float32), net.head)])  # makes slots
    tp.Checkpoint(model=net, optimizer=opt).read(out).assert_consumed()
    np.testing.assert_array_equal(w.numpy(), before[W])
    # The slots followed their variable, under its new path.
    m = opt.get_slot(w, "m")
    assert m is not None
    np.testing.assert_array_equal(
        m.numpy(), before["model/encoder/w/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"]
    )
    keys = set(tp.load_checkpoint(out).get_variable_to_shape_map())
    assert "model/backbone/encoder/w/.OPTIMIZER_SLOT/optimizer/v/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert not any(k.startswith("model/encoder") for k in keys)


def test_no_rules_give_back_the_same_graph_keys_and_bytes_of_values(tmp_path) -> None:
    src, before = _source(tmp_path)
    out = tp.rewrite(src, str(tmp_path / "same"))
    assert read_object_graph(BundleReader(out)) == read_object_graph(BundleReader(src))
    reader = tp.load_checkpoint(out)
    assert set(reader.get_variable_to_shape_map()) == set(before)
    for key, value in before.items():
        assert np.asarray(reader.get_tensor(key)).tobytes() == np.asarray(value).tobytes()


def test_dropping_a_slot_name_drops_it_for_every_variable(tmp_path) -> None:
    src, _ = _source(tmp_path)
    out = tp.rewrite(src, str(tmp_path / "out"), drop=[".OPTIMIZER_SLOT/m"])
    assert_consistent(out)
    keys = set(tp.load_checkpoint(out).get_variable_to_shape_map())
    assert not [k for k in keys if "/optimizer/m/" in k]
    assert len([k for k in keys if "/optimizer/v/" in k]) == 2


def test_dropping_one_variables_slot_or_the_variable_itself(tmp_path) -> None:
    src, _ = _source(tmp_path)
    one = tp.rewrite(src, str(tmp_path / "one"), drop=["model/head/.OPTIMIZER_SLOT/optimizer/v"])
    assert_consistent(one)
    keys = set(tp.load_checkpoint(one).get_variable_to_shape_map())
    assert "model/head/.OPTIMIZER_SLOT/optimizer/v/.ATTRIBUTES/VARIABLE_VALUE" not in keys
    assert "model/head/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE" in keys
    gone = tp.rewrite(src, str(tmp_path / "gone"), drop=["model/head"])
    assert_consistent(gone)
    assert not [k for k in tp.load_checkpoint(gone).get_variable_to_shape_map() if k.startswith("model/head")]
    no_optimizer = tp.rewrite(src, str(tmp_path / "noopt"), drop=["optimizer"])
    assert_consistent(no_optimizer)
    assert not [k for k in tp.load_checkpoint(no_optimizer).get_variable_to_shape_map() if "OPTIMIZER" in k]


def test_an_added_variable_gets_its_parents_and_restores(tmp_path) -> None:
    src, _ = _source(tmp_path)
    out = tp.rewrite(src, str(tmp_path / "out"), add={"model/adapter/scale": np.full(4, 2.0, np.float32)})
    assert_consistent(out)
    net = Net()
    net.adapter = tp.Module()
    net.adapter.scale = tp.Variable(np.zeros(4, np.float32))
    tp.Checkpoint(model=net).read(out).expect_partial()
    np.testing.assert_array_equal(net.adapter.scale.numpy(), np.full(4, 2.0, np.float32))


def test_a_cast_covers_the_subtree_and_its_slots_but_not_its_ints(tmp_path) -> None:
    src, before = _source(tmp_path)
    out = tp.rewrite(src, str(tmp_path / "out"), cast={"model": "bfloat16"})
    assert_consistent(out)
    reader = tp.load_checkpoint(out)
    dtypes = reader.get_variable_to_dtype_map()
    assert dtypes[W] == ml_dtypes.bfloat16
    assert dtypes["model/head/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"] == ml_dtypes.bfloat16
    assert dtypes["model/step/.ATTRIBUTES/VARIABLE_VALUE"] == np.int64
    assert dtypes["optimizer/beta1_power/.ATTRIBUTES/VARIABLE_VALUE"] == np.float32
    np.testing.assert_array_equal(reader.get_tensor(HEAD), before[HEAD].astype(ml_dtypes.bfloat16))


def test_an_int_cast_checks_every_value_fits(tmp_path) -> None:
    src, _ = _source(tmp_path)
    out = tp.rewrite(src, str(tmp_path / "ok"), cast={"model/step": "int8"})
    assert tp.load_variable(out, "model/step/.ATTRIBUTES/VARIABLE_VALUE").dtype == np.int8
    big = tp.save_tensors(str(tmp_path / "big"), {"n": np.array([1, 300], np.int64)})
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"'n' to int8 .*\[-128, 127\].*wider"):
        tp.rewrite(big, str(tmp_path / "bad" / "deeper" / "x"), cast={"n": "int8"})
    assert not (tmp_path / "bad").exists()  # the directories it made for the output go too


@pytest.mark.parametrize(
    ("cast", "message"),
    [
        ({"model/step": "float32"}, r"covers no float tensor .*int64.*never cast"),
        ({"model/head": "bool"}, r"not a dtype a cast may produce"),
        ({"model/head": "floaty"}, r"not a dtype a cast may produce"),
    ],
)
def test_casts_that_would_change_values_silently_are_refused(tmp_path, cast, message) -> None:
    src, _ = _source(tmp_path)
    with pytest.raises(tp.errors.InvalidArgumentError, match=message):
        tp.rewrite(src, str(tmp_path / "out" / "x"), cast=cast)
    assert not (tmp_path / "out").exists()


def test_a_failed_cast_leaves_an_existing_destination_as_it_was(tmp_path) -> None:
    src = tp.save_tensors(str(tmp_path / "src"), {"a": np.ones(3), "b": np.array([1.0, 1e300])})
    dst_dir = tmp_path / "dst"
    tp.save_tensors(str(dst_dir / "ckpt"), {"old": np.zeros(2)})
    held = _files(dst_dir)
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"'b' to float16 .*infinity.*1e\+300"):
        tp.rewrite(src, str(dst_dir / "ckpt"), cast={"a": "float16", "b": "float16"})
    assert _files(dst_dir) == held  # no temporary file left, nothing replaced


@pytest.mark.parametrize(
    ("rules", "error", "message"),
    [
        ({"rename": {"model/nope": "x"}}, tp.errors.NotFoundError, r"no object 'model/nope'.*'encoder', 'head'"),
        ({"rename": {"model": "model/inner/model"}}, tp.errors.InvalidArgumentError, r"own subtree"),
        ({"rename": {"model/head": "model/step"}}, tp.errors.InvalidArgumentError, r"'model/step' already exists"),
        ({"rename": {"": "x"}}, tp.errors.InvalidArgumentError, r"root cannot be moved"),
        ({"rename": {"model": "model"}}, tp.errors.InvalidArgumentError, r"already there"),
        ({"rename": {"model//head": "x"}}, tp.errors.InvalidArgumentError, r"not an object path"),
        ({"add": {"model/.ATTRIBUTES": np.ones(1)}}, tp.errors.InvalidArgumentError, r"not an object path"),
        ({"add": {"model/head": np.ones(1)}}, tp.errors.InvalidArgumentError, r"'model/head' already exists"),
        ({"add": {"model/head/x": np.ones(1)}}, tp.errors.InvalidArgumentError, r"under the variable"),
        ({"add": {"model/o": np.ones(1, "datetime64[s]")}}, tp.errors.InvalidArgumentError, r"no TensorFlow checkp"),
        ({"add": {"model/o": np.ones(1, object)}}, tp.errors.InvalidArgumentError, r"add 'model/o'.*int is not bytes"),
        ({"drop": [".OPTIMIZER_SLOT/nope"]}, tp.errors.NotFoundError, r"slots present: 'm', 'v'"),
        ({"drop": ["model/missing"]}, tp.errors.NotFoundError, r"no object 'model/missing'"),
        ({"cast": {"model/missing": "float16"}}, tp.errors.NotFoundError, r"no object 'model/missing'"),
    ],
)
def test_bad_rules_raise_naming_the_path_and_write_nothing(tmp_path, rules, error, message) -> None:
    src, _ = _source(tmp_path)
    with pytest.raises(error, match=message):
        tp.rewrite(src, str(tmp_path / "out" / "ckpt"), **rules)
    assert not (tmp_path / "out").exists()


def test_the_root_edge_of_a_rooted_checkpoint_stays(tmp_path) -> None:
    net = Net()
    src = tp.Checkpoint(root=net, opt=tp.Module()).write(str(tmp_path / "rooted"))
    for rules in ({"drop": ["root"]}, {"rename": {"root": "x"}}):
        with pytest.raises(tp.errors.InvalidArgumentError, match="'root' is the root itself"):
            tp.rewrite(src, str(tmp_path / "out" / "x"), **rules)
    out = tp.rewrite(src, str(tmp_path / "ok"), rename={"encoder": "backbone/encoder"})
    assert_consistent(out)
    assert "backbone/encoder/w/.ATTRIBUTES/VARIABLE_VALUE" in tp.load_checkpoint(out).get_variable_to_shape_map()


def test_the_source_is_never_the_destination(tmp_path) -> None:
    src, _ = _source(tmp_path)
    with pytest.raises(tp.errors.InvalidArgumentError, match="is the source"):
        tp.rewrite(src, src, rename={"model": "net"})


def test_name_based_checkpoints_are_rewritten_by_key(tmp_path) -> None:
    src = tp.save_tensors(
        str(tmp_path / "tf1"),
        {
            "layer/kernel": np.ones((2, 2), np.float32),
            "layer/bias": np.zeros(2),
            "layers": np.ones(1),
            "step": np.int64(3),
        },
    )
    out = tp.rewrite(
        src,
        str(tmp_path / "out"),
        rename=[("layer", "encoder/layer")],
        drop=["layers"],
        add={"encoder/scale": np.ones(2, np.float32)},
        cast={"encoder": "float16"},
    )
    reader = tp.load_checkpoint(out)
    assert reader.get_variable_to_dtype_map() == {
        "encoder/layer/kernel": np.float16,
        "encoder/layer/bias": np.float16,
        "encoder/scale": np.float16,
        "step": np.int64,
    }
    with pytest.raises(tp.errors.InvalidArgumentError, match="'step' already exists"):
        tp.rewrite(src, str(tmp_path / "x"), rename={"layers": "step"})
    with pytest.raises(tp.errors.NotFoundError, match="no key is or starts with 'lay/'"):
        tp.rewrite(src, str(tmp_path / "x"), rename={"lay": "x"})
    with pytest.raises(tp.errors.InvalidArgumentError, match="rename: an empty key"):
        tp.rewrite(src, str(tmp_path / "x"), rename={"": "x"})
    everything = tp.rewrite(src, str(tmp_path / "half"), cast={"": "float16"})  # "" is every key
    assert set(tp.load_checkpoint(everything).get_variable_to_dtype_map().values()) == {np.dtype("f2"), np.dtype("i8")}


def test_cli_rewrite(tmp_path, capsys) -> None:
    src, _ = _source(tmp_path)
    np.save(tmp_path / "bias.npy", np.arange(3, dtype=np.float32))
    out = str(tmp_path / "cli" / "ckpt")
    status = cli.main(
        [
            "rewrite",
            src,
            out,
            "--rename",
            "model/encoder=model/backbone/encoder",
            "--drop",
            ".OPTIMIZER_SLOT/v",
            "--add",
            f"model/bias={tmp_path / 'bias.npy'}",
            "--add",
            "model/scale=float32:[1, 2]",
            "--cast",
            "model/head=float64",
        ]
    )
    assert status == 0, capsys.readouterr().err
    assert f"wrote {out}" in capsys.readouterr().out
    assert_consistent(out)
    reader = tp.load_checkpoint(out)
    np.testing.assert_array_equal(reader.get_tensor("model/bias/.ATTRIBUTES/VARIABLE_VALUE"), np.arange(3))
    np.testing.assert_array_equal(reader.get_tensor("model/scale/.ATTRIBUTES/VARIABLE_VALUE"), [1.0, 2.0])
    assert reader.get_tensor(HEAD).dtype == np.float64
    assert cli.main(["verify", out]) == 0
    assert cli.main(["rewrite", src, str(tmp_path / "bad"), "--rename", "model/encoder"]) == 1
    assert "write it as LEFT=RIGHT" in capsys.readouterr().err
    assert cli.main(["rewrite", src, str(tmp_path / "bad"), "--add", "x=float32:[1,"]) == 1
    assert "DTYPE:JSON" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "bad.index")


def test_a_plan_lists_what_a_rewrite_would_write_and_writes_nothing(tmp_path, capsys) -> None:
    src, _ = _source(tmp_path)
    rules = {"rename": {"model/encoder": "model/enc"}, "drop": [".OPTIMIZER_SLOT/m"], "cast": {"model/head": "float16"}}
    steps = plan_rewrite(src, **rules)
    out = tp.rewrite(src, str(tmp_path / "real"), **rules)
    written = set(tp.load_checkpoint(out).get_variable_to_shape_map()) - {OBJECT_GRAPH_KEY}
    assert {step.key for step in steps} == written
    assert Step(W, "model/enc/w/.ATTRIBUTES/VARIABLE_VALUE", None) in steps
    assert Step(HEAD, HEAD, "float16") in steps
    dry = str(tmp_path / "dry" / "ckpt")
    assert (
        cli.main(
            ["rewrite", src, dry, "--rename", "model/encoder=model/enc", "--drop", ".OPTIMIZER_SLOT/m", "--dry-run"]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert f"{W} -> model/enc/w/.ATTRIBUTES/VARIABLE_VALUE" in text
    assert "model/head/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE -> (dropped)" in text
    assert "nothing was written" in text
    assert not (tmp_path / "dry").exists()


def test_names_with_dots_and_slashes_are_written_escaped_as_keys_spell_them(tmp_path) -> None:
    model = tp.Module()
    model.dct = {"k/1": tp.Variable(np.ones(2, np.float32)), "x.y": tp.Variable(np.zeros(1, np.float32))}
    src = tp.Checkpoint(model=model).write(str(tmp_path / "src"))
    out = tp.rewrite(src, str(tmp_path / "out"), rename={"model/dct/k.S1": "model/other/a.Sb..c"})
    assert_consistent(out)
    keys = set(tp.load_checkpoint(out).get_variable_to_shape_map())
    assert "model/other/a.Sb..c/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert "model/dct/x..y/.ATTRIBUTES/VARIABLE_VALUE" in keys
    fresh = tp.Module()
    fresh.dct = {"x.y": tp.Variable(np.ones(1, np.float32))}
    fresh.other = {"a/b.c": tp.Variable(np.zeros(2, np.float32))}
    tp.Checkpoint(model=fresh).read(out).assert_consumed()
    np.testing.assert_array_equal(fresh.other["a/b.c"].numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(fresh.dct["x.y"].numpy(), [0.0])


@pytest.mark.slow
def test_a_rewrite_holds_one_tensor_at_a_time(tmp_path) -> None:

    size = 12 << 20  # 48 MiB of float32 each
    src = tp.save_tensors(str(tmp_path / "src"), {f"w{n}": np.full(size, n, np.float32) for n in range(3)})
    out, peak = traced_peak(lambda: tp.rewrite(src, str(tmp_path / "out"), rename={"w0": "v0"}))
    assert peak < size * 4 + (16 << 20), peak / 2**20
    assert float(tp.load_variable(out, "v0")[0]) == 0.0


def _chain(prefix: str, depth: int, every: bool) -> str:
    """A ``depth``-deep chain of ``a`` children; the deepest node (or, with ``every``, each) holds a value
    under a short key that does not spell its path, as a hostile file would."""
    from trackpoint._format._proto import trackable_object_graph_pb2 as gpb
    from trackpoint._format.bundle_writer import BundleWriter

    graph = gpb.TrackableObjectGraph()
    tensors = []
    for i in range(depth + 1):
        node = graph.nodes.add()
        if i < depth:
            node.children.add(node_id=i + 1, local_name="a")
        if i and (every or i == depth):
            node.attributes.add(name="VARIABLE_VALUE", full_name="x", checkpoint_key=f"k{i}")
            tensors.append((f"k{i}", np.float32(i)))
    writer = BundleWriter(prefix)
    for key, value in tensors:
        writer.add(key, value)
    writer.add(OBJECT_GRAPH_KEY, graph.SerializeToString())
    writer.finish()
    return prefix


@pytest.mark.slow
def test_a_50000_deep_chain_costs_linear_memory(tmp_path) -> None:
    """Object paths are spelled out only for the nodes that hold values: building every path of a
    50,000-deep chain took ~7 GiB (quadratic in the depth)."""

    src = _chain(str(tmp_path / "src"), 50_000, every=False)
    out, peak = traced_peak(lambda: tp.rewrite(src, str(tmp_path / "out"), cast={"": "float16"}))
    assert peak < 100 << 20, peak
    key = "/".join(["a"] * 50_000) + "/.ATTRIBUTES/VARIABLE_VALUE"
    assert tp.load_variable(out, key) == np.float16(50_000)


@pytest.mark.slow
def test_the_corpus_deep_chain_rewrites_in_linear_memory(tmp_path) -> None:

    corpus = pathlib.Path(__file__).resolve().parents[1] / "corrupt" / "corpus" / "graph_deep_chain" / "ckpt"
    peak = traced_peak(lambda: tp.rewrite(str(corpus), str(tmp_path / "out")))[1]
    assert peak < 100 << 20, peak


def test_a_chain_whose_every_node_needs_a_long_new_key_is_refused(tmp_path, monkeypatch) -> None:
    """Short keys in the file, paths quadratic in the depth: refused once the new keys pass a bound,
    before memory grows with them."""
    from trackpoint.tools import _object_paths

    monkeypatch.setattr(_object_paths, "MAX_PATH_CHARS", 1 << 20)
    src = _chain(str(tmp_path / "src"), 3_000, every=True)
    with pytest.raises(tp.errors.DataLossError, match=r"src: the object graph nests objects so deep"):
        tp.rewrite(src, str(tmp_path / "out"))
    assert not list(tmp_path.glob("out*"))


def test_object_paths_are_tfs_and_spelled_out_only_when_looked_up() -> None:
    from trackpoint._format._proto import trackable_object_graph_pb2 as gpb

    graph = gpb.TrackableObjectGraph()
    root, model, opt, _w, _m, empty, _deep = (graph.nodes.add() for _ in range(7))
    root.children.add(node_id=1, local_name="model")
    root.children.add(node_id=2, local_name="opt")
    model.children.add(node_id=3, local_name="w.x/y")
    model.children.add(node_id=5, local_name="")
    empty.children.add(node_id=6, local_name="z")
    opt.slot_variables.add(original_variable_node_id=3, slot_name="m", slot_variable_node_id=4)
    paths = tf_paths(graph)
    assert paths._spelled == {0: ""}
    assert dict(paths) == {
        0: "",
        1: "model",
        2: "opt",
        3: "model/w..x.Sy",
        5: "model/",
        6: "model//z",
        4: "model/w..x.Sy/.OPTIMIZER_SLOT/opt/m",
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x=int8:300", r"300 is outside int8's range \[-128, 127\]"),
        ("x=uint8:-1", r"-1 is outside uint8's range \[0, 255\]"),
        ("x=int64:1.5", r"1.5 is not an integer, which int64 would truncate"),
        ("x=float16:1e10", r"10000000000.0 would become inf in float16"),
        ("x=bfloat16:[1, 1e39]", r"1e\+39 would become inf in bfloat16"),
        ("x=float64:" + "1" * 400, r"is too large for float64"),
        ("x=int32:true", r"true is a bool, and int32 is not"),
        ("x=bool:1", r"1 is a number, and bool is not"),
        ("x=int8:[1, [2]]", r"one rectangular JSON array"),
    ],
)
def test_an_added_value_that_would_not_keep_its_value_is_a_usage_error(tmp_path, capsys, spec, message) -> None:
    """numpy would raise OverflowError (int8:300) or convert silently (1.5 -> 1, 1e10 -> inf, true -> 1)."""
    from trackpoint.cli._surgery import parse_add

    with pytest.raises(tp.errors.InvalidArgumentError, match=message):
        parse_add(spec)
    src = tp.save_tensors(str(tmp_path / "src"), {"w": np.ones(2, np.float32)})
    assert cli.main(["rewrite", src, str(tmp_path / "out"), "--add", spec]) == 1
    err = capsys.readouterr().err
    assert "--add" in err and "Traceback" not in err
    assert not list(tmp_path.glob("out*"))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("x=int64:2.0", np.int64(2)),
        ("x=uint64:18446744073709551615", np.uint64(2**64 - 1)),
        ("x=float16:[0.1, 65504]", np.float16([0.1, 65504])),
        ("x=bfloat16:[1, 2]", np.array([1, 2], ml_dtypes.bfloat16)),
        ("x=float32:NaN", np.float32("nan")),
        ("x=bool:[true, false]", np.array([True, False])),
        ("x=complex64:[1, 2.5]", np.complex64([1, 2.5])),
    ],
)
def test_an_added_value_that_keeps_its_value_is_accepted(spec, expected) -> None:
    from trackpoint.cli._surgery import parse_add

    _, got = parse_add(spec)
    assert got.dtype == np.asarray(expected).dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("target", ["float16", "bfloat16"])
def test_a_cast_is_checked_chunk_by_chunk_into_one_result(tmp_path, target) -> None:
    """A 32 MiB float32 cast peaked at 128 MiB (whole-tensor float64 copies and masks); now the source
    buffer, the result and a few MiB."""

    n = 8 << 20
    values = np.ones(n, np.float32)
    values[-1] = 1e30  # only the last chunk overflows: every chunk is checked, the index is the tensor's
    src = tp.save_tensors(str(tmp_path / "src"), {"w": values[:-1], "bad": values.reshape(2, -1)})
    out, peak = traced_peak(lambda: tp.rewrite(src, str(tmp_path / "out"), cast={"w": target}))
    assert peak < n * 4 + n * 2 + (16 << 20), peak / 2**20
    assert str(tp.load_variable(out, "w").dtype) == target
    if target == "float16":
        with pytest.raises(tp.errors.InvalidArgumentError, match=r"'bad' to float16 .*1e\+30.* at \[1, 4194303\]"):
            tp.rewrite(src, str(tmp_path / "bad"), cast={"bad": target})


def test_an_unwritable_destination_is_a_write_error_with_its_remedy(tmp_path, monkeypatch) -> None:
    import errno

    from trackpoint._format import bundle_writer

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    src = tp.save_tensors(str(tmp_path / "src"), {"w": np.ones(2, np.float32)})
    monkeypatch.setattr(bundle_writer.BundleWriter, "finish", denied)
    with pytest.raises(tp.errors.WriteError, match=r"new/ck: .*Permission denied.*Fix the directory's permissions"):
        tp.rewrite(src, str(tmp_path / "new" / "ck"))
    assert not (tmp_path / "new").exists()


def test_rewrite_and_average_list_keys_as_the_reader_does(tmp_path) -> None:
    """The slices of a partitioned tensor are hidden as the reader hides them: rewrite and average
    list the tensor once, whole."""
    policy = tp.sharding.MaxShardSizePolicy(max_shard_size=64)
    options = tp.CheckpointOptions(experimental_sharding_callback=policy)
    src = tp.save_tensors(str(tmp_path / "src"), {"w": np.arange(64, dtype=np.float32).reshape(8, 8)}, options)
    with BundleReader(src) as bundle:
        assert len(bundle.entry("w").slices) > 1
    out = tp.rewrite(src, str(tmp_path / "out"), rename={"w": "v"})
    assert tp.list_variables(out) == [("v", [8, 8])]
    mean = tp.average([src, src], str(tmp_path / "mean"))
    assert tp.list_variables(mean) == tp.list_variables(src) == [("w", [8, 8])]
    np.testing.assert_array_equal(tp.load_variable(out, "v"), np.arange(64).reshape(8, 8))
