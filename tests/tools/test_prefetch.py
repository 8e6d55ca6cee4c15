"""Every tool asks for the next large tensor to be read from the disk while it works on this one.

A spy wraps the real ``prefetch`` (which still runs) and records what was asked for; whether a
prefetch really fills the page cache is ``tests/format/test_readahead.py``'s to show.
"""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._format.bundle_reader import BundleReader
from trackpoint.tools._safetensors_format import SafetensorsFile
from trackpoint.tools.average import average
from trackpoint.tools.rewrite import rewrite

MiB = 1 << 20
LARGE = [f"model/large/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(4)]


@pytest.fixture
def asked(monkeypatch) -> list[str]:
    names: list[str] = []
    bundle_prefetch, file_prefetch = BundleReader.prefetch, SafetensorsFile.prefetch

    def on_bundle(self, entry):
        names.append(entry.key)
        bundle_prefetch(self, entry)

    def on_file(self, name):
        names.append(name)
        file_prefetch(self, name)

    monkeypatch.setattr(BundleReader, "prefetch", on_bundle)
    monkeypatch.setattr(SafetensorsFile, "prefetch", on_file)
    return names


def _checkpoint(path, offset: float = 0) -> str:
    model = tp.Module()
    model.large = [tp.Variable(np.full(MiB // 4 + i, i + offset, np.float32)) for i in range(4)]
    model.small = [tp.Variable(np.full(8, i, np.float32)) for i in range(3)]
    return tp.Checkpoint(model=model).write(str(path))


def _all_but_one(asked: list[str], large: list[str], inputs: int = 1) -> None:
    """Each large tensor was asked for once per input, but for the first one worked on, which may
    have been read at once."""
    found = [name for name in asked if name in large]
    assert all(found.count(name) == inputs for name in set(found)), asked
    assert len(set(found)) >= len(large) - 1, asked


def test_tf_to_safetensors_prefetches_the_next_tensor(tmp_path, asked) -> None:
    tp.convert(_checkpoint(tmp_path / "a" / "ckpt"), str(tmp_path / "st"), keys="tf")
    _all_but_one(asked, LARGE)


def test_safetensors_to_tf_prefetches_the_next_tensor(tmp_path, asked) -> None:
    tp.convert(_checkpoint(tmp_path / "a" / "ckpt"), str(tmp_path / "st"))
    asked.clear()
    tp.convert(str(tmp_path / "st"), str(tmp_path / "back" / "ckpt"))
    _all_but_one(asked, [f"model.large.{i}" for i in range(4)])


def test_rewrite_prefetches_the_next_tensor(tmp_path, asked) -> None:
    rewrite(_checkpoint(tmp_path / "a" / "ckpt"), str(tmp_path / "b" / "ckpt"), rename={"model": "net"})
    _all_but_one(asked, LARGE)


def test_average_prefetches_the_next_tensor_of_every_input(tmp_path, asked) -> None:
    a, b = _checkpoint(tmp_path / "a" / "ckpt"), _checkpoint(tmp_path / "b" / "ckpt", 1)
    out = average([a, b], str(tmp_path / "mean" / "ckpt"))
    _all_but_one(asked, LARGE, inputs=2)
    np.testing.assert_array_equal(tp.load_variable(out, LARGE[0]), np.full(MiB // 4, 0.5, np.float32))
