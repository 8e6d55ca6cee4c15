"""Every reading path of the public API, on every bad input we know of, raises only trackpoint errors.

The inputs: the damaged corpus, special files in place of each checkpoint file, and bad
keys and paths. The file cases run in one child process with a time limit (see
``special_file_worker.py``), since a FIFO once hung every reader.
"""

from __future__ import annotations

import collections
import pathlib
import shutil

import numpy as np
import pytest

import trackpoint as tp
from tests.corrupt.test_special_files import KINDS, replace_with_special, run_worker

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"


@pytest.mark.slow  # every reading path on every corpus file, and a worker process per special file: seconds
def test_every_reading_path_on_every_bad_file_raises_only_trackpoint_errors(tmp_path) -> None:
    corpus = tmp_path / "corpus"  # a copy: a manager may tidy the directory it is given
    shutil.copytree(CORPUS, corpus)
    paths = [str(case / "ckpt") for case in sorted(corpus.iterdir()) if case.is_dir()]
    for kind in sorted(KINDS):
        for which in ("index", "data", "state"):
            directory = tmp_path / f"{kind}-{which}"
            directory.mkdir()
            paths.append(replace_with_special(directory, which, kind)[0])
    records = run_worker("all", *paths, time_limit=240)
    assert len(records) == len(paths) * 10
    leaked = [r for r in records if r["raised"] is not None and not r["trackpoint"]]
    assert not leaked, "\n".join(f"{r['path']} {r['operation']}: {r['raised']}: {r['message']}" for r in leaked)
    slow = [r for r in records if float(r["seconds"]) > 10]  # type: ignore[arg-type]
    assert not slow, slow
    # The walk did reach the files: each special file fails every path that reads it.
    raised = collections.Counter(r["path"] for r in records if r["raised"] is not None)
    assert all(raised[path] for path in paths[-len(KINDS) * 3 :]), raised


BAD_KEYS: list[object] = ["", b"w", 3, None, ("w",), "\ud800", 1.5]


def test_bad_keys_and_names_raise_only_trackpoint_errors(tmp_path) -> None:
    prefix = tp.save_tensors(str(tmp_path / "ok"), {"w": np.arange(3)})
    calls = []
    for key in BAD_KEYS:
        calls.append(lambda key=key: tp.save_tensors(str(tmp_path / "bad"), {key: np.zeros(1)}))
        calls.append(lambda key=key: tp.load_checkpoint(prefix).get_tensor(key))
        calls.append(lambda key=key: tp.load_checkpoint(prefix).has_tensor(key))
        calls.append(lambda key=key: tp.load_variable(prefix, key))
        for path in (key, prefix + "\x00", str(tmp_path / "missing" / "ckpt")):
            calls.append(lambda path=path: tp.load_checkpoint(path))
            calls.append(lambda path=path: tp.verify_checkpoint(path))
            calls.append(lambda path=path: tp.latest_checkpoint(path))
            calls.append(lambda path=path: tp.CheckpointView(path))
    for call in calls:
        try:
            result = call()
        except tp.errors.CheckpointError:
            continue
        except Exception as exc:  # noqa: BLE001 - what leaks is the finding
            pytest.fail(f"{type(exc).__name__} leaked: {exc}")
        if isinstance(result, tp.CheckpointReader):
            result.close()
