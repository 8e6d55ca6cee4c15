"""Reading TF checkpoints from an object store (moto's S3 server on 127.0.0.1) by URL."""

from __future__ import annotations

import os

import numpy as np
import pytest

import trackpoint as tp
from trackpoint._format.bundle_reader import BundleReader


def _upload(s3, local_prefix: str, url_prefix: str) -> None:
    directory = os.path.dirname(local_prefix)
    base = os.path.basename(local_prefix)
    for name in os.listdir(directory):
        if name.startswith(base + "."):
            s3.put_file(os.path.join(directory, name), url_prefix.rsplit("/", 1)[0][5:] + "/" + name)
    s3.invalidate_cache()


def _model() -> tp.Module:
    m = tp.Module()
    m.w = tp.Variable(np.arange(12, dtype=np.float32).reshape(3, 4))
    m.b = tp.Variable(np.ones(4, np.float64))
    m.big = tp.Variable(np.random.default_rng(0).standard_normal(2_500_000))  # 20 MB: several parts of s3fs
    m.step = tp.Variable(7, dtype="int64")
    return m


def test_a_checkpoint_in_s3_reads_by_key_and_restores(tmp_path, bucket, s3) -> None:
    model = _model()
    local = tp.Checkpoint(model=model).write(str(tmp_path / "ckpt-1"))
    url = f"{bucket}/run/ckpt-1"
    _upload(s3, local, url)
    keys = dict(tp.list_variables(url))
    assert keys == dict(tp.list_variables(local))
    np.testing.assert_array_equal(tp.load_variable(url, "model/w/.ATTRIBUTES/VARIABLE_VALUE"), model.w.numpy())
    reader = tp.load_checkpoint(url)
    np.testing.assert_array_equal(reader.get_tensor("model/big/.ATTRIBUTES/VARIABLE_VALUE"), model.big.numpy())
    other = _model()
    for v in (other.w, other.b, other.big):
        v.assign(np.zeros(v.shape, v.dtype))
    tp.Checkpoint(model=other).read(url).assert_consumed()
    for a, b in zip((model.w, model.b, model.big, model.step), (other.w, other.b, other.big, other.step)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert len(tp.CheckpointView(url).descendants()) == len(tp.CheckpointView(local).descendants())


def test_a_missing_object_is_not_found_naming_the_url(bucket) -> None:
    with pytest.raises(tp.errors.NotFoundError, match=f"{bucket}/nothing/ckpt-1.index"):
        tp.load_checkpoint(f"{bucket}/nothing/ckpt-1")


@pytest.mark.slow  # s3fs's retries of a missing object: about a second
def test_a_missing_data_object_is_not_found_naming_it(tmp_path, bucket, s3) -> None:
    local = tp.Checkpoint(model=_model()).write(str(tmp_path / "ckpt-1"))
    url = f"{bucket}/run/ckpt-1"
    _upload(s3, local, url)
    s3.rm(f"{url[5:]}.data-00000-of-00001")
    with pytest.raises(tp.errors.NotFoundError, match=r"data-00000-of-00001"):
        tp.load_variable(url, "model/w/.ATTRIBUTES/VARIABLE_VALUE")


def test_a_damaged_data_object_is_data_loss_naming_the_key(tmp_path, bucket, s3) -> None:
    local = tp.Checkpoint(model=_model()).write(str(tmp_path / "ckpt-1"))
    data = f"{local}.data-00000-of-00001"
    with open(data, "r+b") as f:
        f.seek(100)  # inside the first tensor read
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    url = f"{bucket}/run/ckpt-1"
    _upload(s3, local, url)
    with pytest.raises(tp.errors.DataLossError, match="checksum mismatch"):
        tp.Checkpoint(model=_model()).read(url)


def test_an_object_replaced_while_a_restore_waits_is_refused(tmp_path, bucket, s3) -> None:
    """After a restore returns its files are released; a value kept for an object created later is
    read from the same version of the objects, or not at all."""
    local = tp.Checkpoint(model=_model()).write(str(tmp_path / "ckpt-1"))
    url = f"{bucket}/run/ckpt-1"
    _upload(s3, local, url)
    reader = BundleReader(url)
    reader.read("model/w/.ATTRIBUTES/VARIABLE_VALUE")
    m = _model()
    m.w.assign(m.w.numpy() + 1)
    other = tp.Checkpoint(model=m).write(str(tmp_path / "ckpt-2"))
    for suffix in (".index", ".data-00000-of-00001"):
        s3.put_file(other + suffix, url[5:] + suffix)
    s3.invalidate_cache()
    reader.release_files()
    with pytest.raises(tp.errors.CheckpointError, match="deleted or replaced"):
        reader.read("model/b/.ATTRIBUTES/VARIABLE_VALUE")
    reader.close()
