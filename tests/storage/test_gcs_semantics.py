"""gs:// checkpoints against a fake GCS (tests/storage/fake_gcs.py: the PyPI emulator, which ignores
preconditions, behind a proxy that checks ``ifGenerationMatch`` as GCS does). What is proven here
is trackpoint's use of GCS's conditions (``ifGenerationMatch=0`` for every object of a commit, the
state object swapped on its generation), not GCS itself."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from tests.storage.together import save_together
from trackpoint._format.state_file import read_state_versioned, write_state

KEY = "model/w/.ATTRIBUTES/VARIABLE_VALUE"


def _model(value: float = 0.0) -> tp.Module:
    m = tp.Module()
    m.w = tp.Variable(np.full((16, 16), value, np.float32))
    return m


def test_the_emulator_alone_ignores_preconditions(fake_gcs, gcs_bucket) -> None:
    """Why the proxy: two creates of one object both succeed straight at the emulator."""
    import gcsfs

    direct = gcsfs.GCSFileSystem(endpoint_url=fake_gcs.direct, token="anon", skip_instance_cache=True)
    direct.pipe_file(f"{gcs_bucket[5:]}/x", b"first", mode="create")
    direct.pipe_file(f"{gcs_bucket[5:]}/x", b"second", mode="create")  # GCS would answer 412
    checked = gcsfs.GCSFileSystem(endpoint_url=fake_gcs.endpoint, token="anon", skip_instance_cache=True)
    with pytest.raises(FileExistsError):
        checked.pipe_file(f"{gcs_bucket[5:]}/x", b"third", mode="create")


def test_a_manager_saves_restores_and_keeps_max_to_keep_on_gcs(gcs_bucket) -> None:
    model = _model()
    manager = tp.CheckpointManager(tp.Checkpoint(model=model), f"{gcs_bucket}/run", max_to_keep=2)
    for step in range(1, 4):
        model.w.assign(np.full((16, 16), float(step), np.float32))
        manager.save()
    assert manager.checkpoints == [f"{gcs_bucket}/run/ckpt-2", f"{gcs_bucket}/run/ckpt-3"]
    assert tp.latest_checkpoint(f"{gcs_bucket}/run") == f"{gcs_bucket}/run/ckpt-3"
    restored = _model()
    tp.Checkpoint(model=restored).restore(f"{gcs_bucket}/run").assert_consumed()
    assert restored.w.numpy()[0, 0] == 3.0
    with pytest.raises(tp.errors.NotFoundError):
        tp.load_variable(f"{gcs_bucket}/run/ckpt-1", KEY)


def test_a_second_writer_of_a_committed_prefix_is_refused(gcs_bucket, monkeypatch) -> None:
    url = tp.Checkpoint(model=_model(1.0)).write(f"{gcs_bucket}/run/ckpt-1")
    with pytest.raises(tp.errors.WriteError, match="is committed"):
        tp.Checkpoint(model=_model(2.0)).write(url)  # refused early, before anything is uploaded
    # A writer that passed the early checks just before the first committed (they are not
    # atomic with the commit): the conditional creates refuse it, and it leaves nothing.
    from trackpoint._storage import object_bundles

    monkeypatch.setattr(object_bundles, "clear_abandoned", lambda prefix: None)
    with pytest.raises(tp.errors.WriteError, match="exists already"):
        tp.Checkpoint(model=_model(2.0)).write(url)
    assert tp.load_variable(url, KEY)[0, 0] == 1.0
    assert tp.verify_checkpoint(url) == []


def test_the_state_object_is_swapped_on_its_generation(gcs_bucket) -> None:
    directory = f"{gcs_bucket}/run"
    assert write_state(directory, f"{directory}/ckpt-1", version=None)
    assert not write_state(directory, f"{directory}/ckpt-9", version=None)
    _, generation = read_state_versioned(directory)
    assert write_state(directory, f"{directory}/ckpt-2", version=generation)
    assert not write_state(directory, f"{directory}/ckpt-3", version=generation)  # that generation is gone
    assert tp.get_checkpoint_state(directory).model_checkpoint_path == f"{directory}/ckpt-2"


def test_two_managers_at_once_lose_neither_update_on_gcs(gcs_bucket) -> None:
    managers = [
        tp.CheckpointManager(tp.Checkpoint(model=_model(v)), f"{gcs_bucket}/run", max_to_keep=None, checkpoint_name=n)
        for v, n in ((1.0, "a"), (2.0, "b"))
    ]
    save_together(managers, rounds=3)
    listed = set(tp.get_checkpoint_state(f"{gcs_bucket}/run").all_model_checkpoint_paths)
    assert listed == {f"{gcs_bucket}/run/{n}-{i}" for n in "ab" for i in range(1, 4)}


def test_a_data_upload_whose_answer_is_lost_is_recognised_by_its_md5(fake_gcs, gcs_bucket) -> None:
    uploads: list[str] = []
    dropped: list[str] = []

    def fault(method: str, path: str, query: str) -> str | None:
        if method == "POST" and path.startswith("/upload/"):
            uploads.append(path)
            if len(uploads) == 1 and not dropped:  # the data object (the index is compared byte by byte)
                dropped.append(path)
                return "drop-after"
        return None

    fake_gcs.proxy.fault = fault
    try:
        url = tp.Checkpoint(model=_model(6.0)).write(f"{gcs_bucket}/run/ckpt-1")
    finally:
        fake_gcs.proxy.fault = None
    assert dropped
    assert tp.load_variable(url, KEY)[0, 0] == 6.0
