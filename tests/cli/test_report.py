"""``trackpoint report``: the statistics, the tree and the diff it computes, and the command.

The page itself is tested in a browser (``test_report_browser.py``); here the data, checked
against numpy on the same values, and what the command writes and how it fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trackpoint as tp
from trackpoint.cli import main
from trackpoint.tools._report_stats import BINS, ChangeStats, TensorStats, sample_step
from trackpoint.tools.report import report

KEY = "model/{}/.ATTRIBUTES/VARIABLE_VALUE"


def _model(**values: np.ndarray) -> tp.Module:
    model = tp.Module()
    for name, value in values.items():
        setattr(model, name, tp.Variable(value))
    return model


def _embedded(html: str) -> dict:
    raw = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.DOTALL)
    assert raw is not None
    return json.loads(raw.group(1))


def test_statistics_of_a_streamed_tensor_are_numpy_s(tmp_path: Path) -> None:
    """A 12 MB tensor is read in 2 MiB chunks: the statistics combine them exactly."""
    values = np.random.default_rng(0).standard_normal(3_000_000).astype(np.float32) * 3 + 1000
    values[:50_000] = 0
    values[7] = np.nan
    values[9] = np.inf
    values[11] = -np.inf
    path = tp.Checkpoint(model=_model(w=values)).write(str(tmp_path / "ckpt"))
    stats = report(path)["tensors"][KEY.format("w")]
    finite = values[np.isfinite(values)].astype(np.float64)
    assert stats["nan"] == 1 and stats["inf"] == 2
    assert stats["zeros"] == pytest.approx((50_000 - 3) / 3_000_000)  # three of them became NaN and Inf
    assert stats["min"] == finite.min() and stats["max"] == finite.max()
    assert stats["mean"] == pytest.approx(finite.mean(), rel=1e-6)  # float32 values summed in float32
    assert stats["std"] == pytest.approx(finite.std(), rel=1e-5)  # float32 values, float32 products
    hist = stats["hist"]
    assert hist["lo"] <= finite.min() and hist["hi"] >= finite.max()
    assert sum(hist["counts"]) == stats["binned"]
    step = sample_step(3_000_000)
    assert abs(stats["binned"] - 3_000_000 // step) <= 3  # every step-th element, of those finite


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=400),
    st.integers(1, 50),
)
def test_the_histogram_counts_each_value_in_its_bin_whatever_the_chunks(values: list[float], cut: int) -> None:
    array = np.array(values, np.float32)
    stats = TensorStats(array.size)
    for start in range(0, array.size, cut):
        stats.add(array[start : start + cut])
    hist = stats.result()["hist"]
    counts, lo, hi = np.array(hist["counts"]), hist["lo"], hist["hi"]
    assert counts.sum() == array.size and len(counts) <= BINS and counts[0] > 0 and counts[-1] > 0
    width = (hi - lo) / len(counts)
    position = (array.astype(np.float64) - lo) / width
    expected = np.bincount(np.clip(position.astype(np.int64), 0, len(counts) - 1), minlength=len(counts))
    near_edge = np.abs(position - np.round(position)) < 1e-6
    assert np.abs(expected - counts).sum() <= 2 * near_edge.sum()  # only values on an edge may fall either side
    # Summed in float32: within float32's precision of the largest value.
    scale = float(np.abs(array).max())
    assert stats.result()["mean"] == pytest.approx(array.astype(np.float64).mean(), abs=1e-6 * scale + 1e-6)


def test_change_statistics() -> None:
    old = np.array([1.0, 2.0, 3.0, 4.0])
    new = old.copy()
    new[2] += 0.5
    change = ChangeStats()
    change.add(old[:3], new[:3])
    change.add(old[3:], new[3:])
    result = change.result()
    assert result["rel_l2"] == pytest.approx(0.5 / np.linalg.norm(old))
    assert result["cosine"] == pytest.approx(old @ new / np.linalg.norm(old) / np.linalg.norm(new))
    assert result["max_abs"] == 0.5


def test_the_tree_puts_slots_under_their_variables_and_sums_subtrees(tmp_path: Path) -> None:
    model = tp.Module()
    model.dense = tp.Module()
    model.dense.kernel = tp.Variable(np.ones((3, 4), np.float32))
    model.dense.bias = tp.Variable(np.ones(4, np.float32))
    optimizer = tp.optimizers.Adam(0.1)
    optimizer.apply_gradients(
        [(np.ones((3, 4), np.float32), model.dense.kernel), (np.ones(4, np.float32), model.dense.bias)]
    )
    path = tp.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "ckpt"))
    tree = report(path)["tree"]
    dense = next(c for c in next(c for c in tree["children"] if c["name"] == "model")["children"])
    assert dense["name"] == "dense"
    kernel = next(c for c in dense["children"] if c["name"] == "kernel")
    assert kernel["kind"] == "variable" and kernel["shape"] == [3, 4]
    assert sorted(c["name"] for c in kernel["children"]) == ["optimizer/m", "optimizer/v"]
    assert all(c["kind"] == "slot" for c in kernel["children"])
    assert kernel["params"] == 3 * 12 and dense["params"] == 3 * 16 and dense["bytes"] == 4 * 3 * 16


def test_a_diff_finds_changes_renames_additions_and_removals(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    big = rng.standard_normal(1_000_000).astype(np.float32)
    moved = rng.standard_normal(300).astype(np.float32)  # summarised in a batch
    moved_far = rng.standard_normal(10_000).astype(np.float32)  # read on its own
    old = tp.Checkpoint(model=_model(big=big, moved=moved, far=moved_far, gone=np.ones(5, np.float32)))
    old_path = old.write(str(tmp_path / "a"))
    changed = big.copy()
    changed[123_456] += 1.0  # one element of a large tensor
    new_model = _model(big=changed, renamed=moved, went=moved_far, new=np.zeros(2, np.float32))
    new_path = tp.Checkpoint(model=new_model).write(str(tmp_path / "b"))
    diff = report(old_path, new_path)["diff"]
    assert sorted(diff["renamed"]) == [
        [KEY.format("far"), KEY.format("went")],
        [KEY.format("moved"), KEY.format("renamed")],
    ]
    assert diff["added"] == [KEY.format("new")] and diff["removed"] == [KEY.format("gone")]
    first = diff["changed"][0]
    assert first["key"] == KEY.format("big")
    assert first["rel_l2"] == pytest.approx(1.0 / np.linalg.norm(big.astype(np.float64)), rel=1e-6)
    assert first["max_abs"] == pytest.approx(1.0, rel=1e-6)
    assert diff["layers"] == [{"name": "model", "rel_l2": pytest.approx(first["rel_l2"]), "tensors": 1}]


def test_safetensors_weights_are_reported(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    save_file({"encoder.layer.0.weight": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(tmp_path / "m.safetensors"))
    data = report(str(tmp_path / "m.safetensors"))
    assert data["inputs"][0]["kind"] == "safetensors" and data["inputs"][0]["params"] == 6
    encoder = data["tree"]["children"][0]
    assert encoder["name"] == "encoder" and encoder["children"][0]["children"][0]["children"][0]["kind"] == "variable"
    assert data["tensors"]["encoder.layer.0.weight"]["mean"] == 2.5


def test_the_command_writes_one_self_contained_page(tmp_path: Path, capsys) -> None:
    hostile = '<script>alert(1)</script>\x1b[31m"\u202e'
    path = tp.save_tensors(str(tmp_path / "ckpt"), {hostile: np.ones(3, np.float32), "w": np.zeros(2, np.float32)})
    out = tmp_path / "report.html"
    assert main(["report", path, "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    html = out.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in html and "\x1b" not in html  # the key is data, escaped inside JSON
    assert not re.search(r"""(src|href)=["']?https?:""", html)  # nothing fetched from a network
    data = _embedded(html)
    assert hostile in data["tensors"]


def test_a_missing_or_damaged_input_exits_1_naming_it(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path / "nothing"), "-o", str(tmp_path / "r.html")]) == 1
    assert "nothing" in capsys.readouterr().err
    path = tp.save_tensors(str(tmp_path / "ckpt"), {"w": np.ones(1000, np.float32)})
    data = Path(path + ".data-00000-of-00001")
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert main(["report", path, "-o", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err
    assert "w" in err and "checksum" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


@pytest.mark.slow
def test_memory_stays_bounded_by_a_chunk(tmp_path: Path) -> None:
    """A 256 MiB tensor, and a diff of two: the process's peak grows by a few chunks, not by the tensor."""
    values = np.ones(64 << 20, np.float32)
    a = tp.save_tensors(str(tmp_path / "a"), {"w": values})
    values[5] = 2
    b = tp.save_tensors(str(tmp_path / "b"), {"w": values})
    del values
    script = (
        "import resource, sys\n"
        "from trackpoint.tools.report import report\n"
        "import numpy, trackpoint, xxhash\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "report(*sys.argv[1:])\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    for args in ([a], [a, b]):
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True)
        grown_kib = int(done.stdout.split()[-1])
        assert grown_kib < 48 << 10, (args, grown_kib)  # under 48 MiB for a 256 MiB tensor (two)


def test_progress_reaches_the_total(tmp_path: Path) -> None:
    """Small tensors count a batch at a time, large ones each; the count only grows, to the total."""
    values = {f"t{i}": np.ones(10, np.float32) for i in range(5)}
    values |= {f"big{i}": np.ones(2 << 20, np.float32) for i in range(2)}  # 8 MiB: each read in parts
    path = tp.save_tensors(str(tmp_path / "ckpt"), values)
    calls: list[tuple[int, int]] = []
    report(path, None, lambda done, total: calls.append((done, total)))
    total = sum(value.nbytes for value in values.values())
    assert len(calls) == 3 and all(t == total for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and calls[-1][0] == total


def test_a_diff_lists_added_keys_in_order_and_its_progress_reaches_the_total(tmp_path: Path) -> None:
    """Same output whatever the process's hash seed; progress counts only what is read (an old
    tensor whose shape changed is not)."""
    old = {"w": np.ones(10, np.float32), "v": np.ones(20_000, np.float32), "gone": np.ones(3, np.float32)}
    new = {"w": np.ones(12, np.float32), "v": np.ones(30_000, np.float32)}
    new |= {f"add{i}": np.full(4, i, np.float32) for i in (3, 0, 5, 1, 4, 2)}
    a, b = tp.save_tensors(str(tmp_path / "a"), old), tp.save_tensors(str(tmp_path / "b"), new)
    script = (
        "import json, sys\nfrom trackpoint.tools.report import report\ncalls = []\n"
        "data = report(sys.argv[1], sys.argv[2], lambda d, t: calls.append((d, t)))\n"
        "print(json.dumps([data['diff']['added'], calls[-1]]))\n"
    )
    runs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", script, a, b], capture_output=True, text=True, check=True, env=env)
        runs.append(json.loads(done.stdout))
    assert runs[0] == runs[1]
    added, (done_bytes, total) = runs[0]
    assert added == sorted(added) == [f"add{i}" for i in range(6)]
    assert done_bytes == total == sum(v.nbytes for v in new.values()) + old["gone"].nbytes
