"""``tp.rewrite`` on every real-world checkpoint of ``../shared/data/real``: the rules' layout is TF's own.

With no rules, the rewritten graph is the source graph (TF 2.21 marks ``has_checkpoint_values``
where older writers left it out) and every key and value comes back bit for bit: the paths,
ids and keys recomputed from the graph are exactly the ones TF wrote. With rules (drop every
optimizer slot, rename the root's first child) the result passes every consistency check.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import trackpoint as tp
from tests.tools.test_rewrite import assert_consistent
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._graph.keys import OBJECT_GRAPH_KEY, escape_local_name
from trackpoint._graph.object_graph import read_object_graph

REAL = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real"
DIRS = sorted(p.name for p in REAL.iterdir() if p.is_dir()) if REAL.is_dir() else []
# A per-device part of a multi-device save: its graph names the other part's keys too.
PARTS = {"tf2-shahed-temp-part0"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not DIRS, reason=f"the real-world checkpoints are not at {REAL} (CI has them beside the checkout)"
    ),
]


def _prefix(directory: pathlib.Path) -> str:
    (index,) = directory.rglob("*.index")
    return str(index)[: -len(".index")]


def _graph_without_marks(prefix: str):
    graph = read_object_graph(BundleReader(prefix))
    if graph is not None:
        for node in graph.nodes:
            node.ClearField("has_checkpoint_values")
    return graph


@pytest.mark.parametrize("name", DIRS)
def test_a_rewrite_without_rules_gives_back_the_checkpoint(tmp_path, name: str) -> None:
    src = _prefix(REAL / name)
    if name in PARTS:
        with pytest.raises(tp.errors.NotFoundError, match="merge the parts first"):
            tp.rewrite(src, str(tmp_path / "out"))
        return
    out = tp.rewrite(src, str(tmp_path / "out"))
    assert _graph_without_marks(out) == _graph_without_marks(src)
    graph = read_object_graph(BundleReader(src))
    if graph is None or graph.nodes[0].HasField("has_checkpoint_values"):
        # Laid out as TF 2.21 would, in the source's data order: the files come back byte for byte.
        assert pathlib.Path(out + ".index").read_bytes() == pathlib.Path(src + ".index").read_bytes()
        with BundleReader(src) as a, BundleReader(out) as b:
            for shard in range(a.num_shards):
                assert pathlib.Path(a.data_path(shard)).read_bytes() == pathlib.Path(b.data_path(shard)).read_bytes()
    before, after = tp.CheckpointReader(src), tp.CheckpointReader(out)
    assert after.get_variable_to_dtype_map() == before.get_variable_to_dtype_map()
    for key in set(before.get_variable_to_shape_map()) - {OBJECT_GRAPH_KEY}:  # the graph: compared above
        a, b = before.get_tensor(key), after.get_tensor(key)
        if isinstance(a, bytes) or np.asarray(a).dtype == object:
            assert np.array_equal(np.asarray(a, object), np.asarray(b, object)), key
        else:
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), key
    if read_object_graph(BundleReader(out)) is not None:
        assert_consistent(out)


def _has_graph(name: str) -> bool:
    with BundleReader(_prefix(REAL / name)) as reader:
        return read_object_graph(reader) is not None


# Name-based checkpoints have no objects to move: their rules work on keys (test_rewrite.py).
@pytest.mark.parametrize("name", [name for name in DIRS if name not in PARTS and _has_graph(name)])
def test_dropping_every_slot_and_renaming_a_child_stays_consistent(tmp_path, name: str) -> None:
    src = _prefix(REAL / name)
    with BundleReader(src) as reader:
        graph = read_object_graph(reader)
    slots = sorted({s.slot_name for n in graph.nodes for s in n.slot_variables})
    first = escape_local_name(graph.nodes[0].children[0].local_name)
    out = tp.rewrite(
        src,
        str(tmp_path / "out"),
        drop=[f".OPTIMIZER_SLOT/{escape_local_name(s)}" for s in slots],
        rename={first: "renamed/" + first},
    )
    assert_consistent(out)
    keys = tp.load_checkpoint(out).get_variable_to_shape_map()
    assert not [k for k in keys if "/.OPTIMIZER_SLOT/" in k]
    # Only the slots are gone; what the rename moved is all there, under whichever path TF's
    # breadth-first walk now finds first (Keras layers hang below two parents).
    kept = [k for k in tp.CheckpointReader(src).get_variable_to_shape_map() if "/.OPTIMIZER_SLOT/" not in k]
    assert len(keys) == len(kept)
    if any(k.startswith(first + "/") for k in kept):
        assert any(k.startswith(f"renamed/{first}/") for k in keys) or not all(
            k.startswith(f"{first}/") for k in kept if k != "_CHECKPOINTABLE_OBJECT_GRAPH" and "/" in k
        )
