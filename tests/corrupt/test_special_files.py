"""A checkpoint file that is not a regular file, or that cannot be read, fails at once and clearly.

A FIFO in place of a ``.index`` once hung every reader forever and ``/dev/zero`` was read
until memory ran out, so each case runs in a child process with a time limit and an
address-space limit (see ``special_file_worker.py``): a regression fails the test instead of
hanging the run.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import numpy as np
import pytest

import trackpoint as tp

pytestmark = pytest.mark.slow  # a worker process per case: seconds in all

WORKER = os.path.join(os.path.dirname(__file__), "special_file_worker.py")
ADDRESS_SPACE = 4 << 30
TIME_LIMIT = 20  # seconds for a whole child; each operation should take well under one
NOBODY = 65534


def _checkpoint(directory: pathlib.Path) -> str:
    """A one-shard object-based checkpoint with a ``checkpoint`` state file; its prefix."""
    model = tp.Module()
    model.w = tp.Variable(np.arange(6, dtype=np.float32))
    return tp.Checkpoint(model=model).save(str(directory / "ckpt"))


def _make_fifo(path: str) -> None:
    os.mkfifo(path)


def _make_dev_zero(path: str) -> None:
    os.symlink("/dev/zero", path)


def _make_socket(path: str) -> None:
    # A bound Unix socket leaves its file behind when closed. The address is relative, so
    # pytest's long temporary paths cannot exceed the 108 bytes a socket address may hold.
    here = os.getcwd()
    os.chdir(os.path.dirname(path))
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(os.path.basename(path))
    finally:
        os.chdir(here)


def _make_directory(path: str) -> None:
    os.mkdir(path)


def _make_fifo_symlink(path: str) -> None:
    target = path + "-target-fifo"
    os.mkfifo(target)
    os.symlink(target, path)


KINDS = {
    "fifo": _make_fifo,
    "dev_zero": _make_dev_zero,
    "socket": _make_socket,
    "directory": _make_directory,
    "symlink_to_fifo": _make_fifo_symlink,
}


def replace_with_special(tmp_path: pathlib.Path, which: str, kind: str) -> tuple[str, str]:
    """Put a special file of ``kind`` in place of the checkpoint's ``which`` file.

    Returns:
        ``(path to pass to the API, path of the special file)``.
    """
    prefix = _checkpoint(tmp_path)
    target, argument = {
        "index": (prefix + ".index", prefix),
        "data": (prefix + ".data-00000-of-00001", prefix),
        "state": (str(tmp_path / "checkpoint"), str(tmp_path)),
    }[which]
    os.remove(target)
    KINDS[kind](target)
    return argument, target


OPERATIONS = ["load_checkpoint", "verify_checkpoint", "restore", "cli_inspect"]


def run_worker(operations: str, *paths: str, time_limit: float = TIME_LIMIT) -> list[dict[str, object]]:
    """What each of ``operations`` (``"all"`` or a comma-separated list) did on each path, from a child."""
    try:
        result = subprocess.run(
            [sys.executable, WORKER, str(ADDRESS_SPACE), operations, *paths],
            capture_output=True,
            text=True,
            timeout=time_limit,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"reading did not finish within {time_limit}s; last started: {out.splitlines()[-1:]}")
    assert result.returncode == 0, result.stderr[-4000:]
    return [record for line in result.stdout.splitlines() if "operation" in (record := json.loads(line))]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("which", ["index", "data", "state"])
def test_a_special_file_in_place_of_a_checkpoint_file_fails_at_once(tmp_path, which: str, kind: str) -> None:
    argument, special = replace_with_special(tmp_path, which, kind)
    records = run_worker(",".join(OPERATIONS), argument)
    assert [r["operation"] for r in records] == OPERATIONS
    for record in records:
        assert record["trackpoint"] is True, record
        message = str(record["message"])
        assert special in message and "not a regular file" in message, record
        assert float(record["seconds"]) < 5, record  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_the_command_line_reports_a_special_index_and_exits_1(tmp_path, kind: str) -> None:
    prefix, special = replace_with_special(tmp_path, "index", kind)

    def limit_memory() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    try:
        result = subprocess.run(
            [sys.executable, "-m", "trackpoint", "inspect", prefix],
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT,
            preexec_fn=limit_memory,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"trackpoint inspect on a {kind} index did not finish within {TIME_LIMIT}s")
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and special in result.stderr and "not a regular file" in result.stderr


def test_symlinks_to_regular_files_are_still_read(tmp_path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    prefix = _checkpoint(real)
    linked = tmp_path / "linked"
    linked.mkdir()
    for file in real.iterdir():
        (linked / file.name).symlink_to(file)
    model = tp.Module()
    model.w = tp.Variable(np.zeros(6, np.float32))
    tp.Checkpoint(model=model).restore(str(linked)).assert_consumed()
    assert model.w.numpy().tolist() == list(range(6))
    assert tp.verify_checkpoint(str(linked)) == []
    assert tp.load_checkpoint(str(linked / os.path.basename(prefix))).get_tensor(
        "model/w/.ATTRIBUTES/VARIABLE_VALUE"
    ).tolist() == list(range(6))


def test_a_symlink_loop_in_place_of_the_index_is_no_valid_path(tmp_path) -> None:
    prefix = _checkpoint(tmp_path)
    index = pathlib.Path(prefix + ".index")
    index.unlink()
    index.symlink_to(tmp_path / "loop")
    (tmp_path / "loop").symlink_to(index)
    with pytest.raises(tp.errors.InvalidArgumentError, match="not a valid path for a checkpoint index"):
        tp.load_checkpoint(prefix)


# -- files that exist but cannot be opened -------------------------------------------------

_UNREADABLE_CHILD = f"""
import json, os, sys
import trackpoint as tp
import trackpoint.cli
if os.getuid() == 0:
    # root reads any file whatever its mode: read as nobody (after the imports, which
    # may live under a directory nobody cannot enter)
    os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
try:
    if sys.argv[1] == "restore":
        tp.Checkpoint(model=tp.Module()).restore(sys.argv[2]).expect_partial()
    else:
        with tp.load_checkpoint(sys.argv[2]) as reader:
            for key in reader.get_variable_to_shape_map():
                reader.get_tensor(key)
    print(json.dumps(None))
except Exception as exc:
    print(json.dumps([[c.__name__ for c in type(exc).__mro__], str(exc)]))
"""


def _can_drop_privileges() -> bool:
    if os.getuid() != 0:
        return True
    probe = subprocess.run(
        [sys.executable, "-c", f"import os; os.setgid({NOBODY}); os.setuid({NOBODY})"], capture_output=True, check=False
    )
    return probe.returncode == 0


@pytest.fixture
def shared_directory() -> Iterator[pathlib.Path]:
    """A new directory that user nobody may enter (pytest's own are private to their owner)."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix="tp-unreadable-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


@pytest.mark.parametrize("which", ["index", "data", "state"])
@pytest.mark.parametrize("operation", ["load", "restore"])
def test_an_unreadable_file_raises_permission_denied(shared_directory, which: str, operation: str) -> None:
    if not _can_drop_privileges():
        pytest.skip("running as root without the right to switch to user nobody, so no file can be made unreadable")
    prefix = _checkpoint(shared_directory)
    target = {
        "index": prefix + ".index",
        "data": prefix + ".data-00000-of-00001",
        "state": str(shared_directory / "checkpoint"),
    }[which]
    os.chmod(target, 0)  # what denies the read: the file's own mode, not its directory's
    argument = str(shared_directory) if which == "state" else prefix
    result = subprocess.run(
        [sys.executable, "-c", _UNREADABLE_CHILD, operation, argument],
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
        cwd="/",
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    outcome = json.loads(result.stdout)
    assert outcome is not None, "the unreadable file was read"
    classes, message = outcome
    assert classes[:3] == ["PermissionDeniedError", "CheckpointError", "PermissionError"], outcome
    assert target in message and "permission" in message.lower(), message
