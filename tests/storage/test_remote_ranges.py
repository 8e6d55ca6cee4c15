"""Reading from an object store fetches only what is read: one tensor of a large checkpoint by a
ranged GET of about its size, neighbours together, a whole restore by one download; bytes of two
versions of an object are never mixed (moto's S3 server behind the logging proxy)."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._storage import ranged


def _model(value: float = 1.0, small: range = range(2000)) -> tp.Module:
    m = tp.Module()
    m.big = tp.Variable(np.full(4_000_000, value, np.float32))  # 16 MB, first in the data file
    m.small = {f"t{i:04d}": tp.Variable(np.full(256, value + i, np.float32)) for i in small}  # 1 KiB each
    return m


def _key(name: str) -> str:
    return f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE"


def _data_gets(proxy) -> list[str | None]:
    return [header for path, header in proxy.gets if ".data-" in path]


def _range_bytes(header: str) -> int:
    first, last = header.removeprefix("bytes=").split("-")
    return int(last) - int(first) + 1


def test_one_tensor_is_one_ranged_get_of_about_its_size(bucket, proxy) -> None:
    url = tp.Checkpoint(model=_model()).write(f"{bucket}/run/ckpt-1")
    proxy.gets.clear()
    value = tp.load_variable(url, _key("small/t0007"))
    np.testing.assert_array_equal(value, np.full(256, 8.0, np.float32))
    (header,) = _data_gets(proxy)  # one request for the tensor, none for the 16 MB beside it
    assert header is not None and _range_bytes(header) == 1024


def test_a_partial_restore_fetches_neighbours_together(bucket, proxy) -> None:
    """Every tenth of 2000 small tensors: a few ranged GETs (gaps under ranged.MAX_GAP are
    bridged), not 200, and not the 16 MB tensor."""
    url = tp.Checkpoint(model=_model(2.0)).write(f"{bucket}/run/ckpt-1")
    proxy.gets.clear()
    partial = tp.Module()
    partial.small = _model(0.0, small=range(0, 2000, 10)).small
    tp.Checkpoint(model=partial).read(url).assert_existing_objects_matched().expect_partial()
    assert [float(v.numpy()[0]) for v in partial.small.values()] == [2.0 + i for i in range(0, 2000, 10)]
    gets = _data_gets(proxy)
    assert all(h is not None for h in gets) and len(gets) <= 3, gets
    assert sum(_range_bytes(h) for h in gets) < 3 << 20


def test_a_whole_restore_downloads_each_data_object_once(bucket, proxy) -> None:
    url = tp.Checkpoint(model=_model(3.0)).write(f"{bucket}/run/ckpt-1")
    proxy.gets.clear()
    restored = _model(0.0)
    tp.Checkpoint(model=restored).read(url).assert_consumed()
    assert float(restored.big.numpy()[-1]) == 3.0 and float(restored.small["t1999"].numpy()[0]) == 3.0 + 1999
    # The object graph (a string tensor at the end of the data), then the whole object in one GET.
    (graph, whole) = _data_gets(proxy)
    assert graph is not None and _range_bytes(graph) < 1 << 20 and whole is None


def test_bytes_of_a_replaced_object_are_not_mixed_with_the_first(bucket, s3) -> None:
    url = tp.Checkpoint(model=_model(4.0, small=range(20))).write(f"{bucket}/run/ckpt-1")
    reader = tp.load_checkpoint(url)
    assert float(reader.get_tensor(_key("small/t0000"))[0]) == 4.0
    data = f"{url[5:]}.data-00000-of-00001"
    s3.pipe_file(data, bytes(s3.info(data)["size"]))  # replaced by zeros of the same size
    with pytest.raises(tp.errors.DataLossError, match="changed while it was read"):
        reader.get_tensor(_key("small/t0005"))


def test_spans_merge_and_subtract() -> None:
    assert ranged._merge([(10, 20), (0, 5), (21, 30), (100, 101)], gap=1) == [(0, 5), (10, 30), (100, 101)]
    assert ranged._subtract([(0, 10), (20, 30)], [(2, 4), (8, 25)]) == [(0, 2), (4, 8), (25, 30)]
    assert ranged._blocks([(0, 10)], 4) == [(0, 4), (4, 8), (8, 10)]


def test_verify_and_convert_fetch_the_data_together_not_tensor_by_tensor(bucket, proxy) -> None:
    url = tp.Checkpoint(model=_model(5.0, small=range(500))).write(f"{bucket}/run/ckpt-1")
    proxy.gets.clear()
    assert tp.verify_checkpoint(url) == []
    assert len(_data_gets(proxy)) <= 2, _data_gets(proxy)  # not 500
    proxy.gets.clear()
    tp.convert(url, f"{bucket}/hf")
    assert len(_data_gets(proxy)) <= 2, _data_gets(proxy)
