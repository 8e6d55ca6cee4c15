"""Run every reading path on one checkpoint path in a fresh process, one JSON line per path.

Used by ``test_special_files.py`` and ``test_api_walk.py``: a FIFO or a device in place of a
checkpoint file once hung a read forever or read without bound, so these reads run in a
child the test can time out, under an address-space limit, and report what each raised.

Usage: ``python special_file_worker.py ADDRESS_SPACE OPERATIONS PATH...``, where OPERATIONS is
``all`` or a comma-separated list of names from :data:`OPERATIONS`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import time
from collections.abc import Callable


def _load(path: str) -> None:
    import trackpoint as tp

    with tp.load_checkpoint(path) as reader:
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)


def _verify(path: str) -> None:
    import trackpoint as tp

    damage = tp.verify_checkpoint(path)
    if damage:  # verify reports damage instead of raising: surface it the same way
        raise tp.errors.DataLossError("; ".join(d.message for d in damage))


def _restore(path: str) -> None:
    import trackpoint as tp

    model = tp.Module()
    tp.Checkpoint(model=model).restore(path).expect_partial()


def _directory(path: str) -> str:
    return path if os.path.isdir(path) else os.path.dirname(path)


def _list_and_load(path: str) -> None:
    import trackpoint as tp

    for key, _ in tp.list_variables(path):
        tp.load_variable(path, key + ":0")


def _state(path: str) -> None:
    import trackpoint as tp

    tp.get_checkpoint_state(_directory(path))
    tp.latest_checkpoint(_directory(path))


def _view(path: str) -> None:
    import trackpoint as tp

    view = tp.CheckpointView(path)
    view.tree()
    view.diff(path)


def _manager(path: str) -> None:
    import trackpoint as tp

    tp.CheckpointManager(tp.Checkpoint(model=tp.Module()), _directory(path), max_to_keep=2).restore_or_initialize()


def _cli(*command: str) -> Callable[[str], None]:
    def run(path: str) -> None:
        import trackpoint as tp
        from trackpoint import cli

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = cli.main([command[0], path, *command[1:]])
        if status != 0:
            raise tp.errors.CheckpointError(f"exit status {status}: {err.getvalue()}")

    return run


OPERATIONS: dict[str, Callable[[str], None]] = {
    "load_checkpoint": _load,
    "verify_checkpoint": _verify,
    "restore": _restore,
    "cli_inspect": _cli("inspect", "--all-tensors"),
    "list_and_load": _list_and_load,
    "state": _state,
    "view": _view,
    "manager": _manager,
    "cli_verify": _cli("verify"),
    "cli_tree": _cli("tree"),
}


def main(argv: list[str]) -> int:
    limit = int(argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    names = list(OPERATIONS) if argv[2] == "all" else argv[2].split(",")
    import trackpoint as tp

    for path in argv[3:]:
        for name in names:
            print(json.dumps({"start": name, "path": path}), flush=True)  # a hang shows where
            start = time.monotonic()
            record: dict[str, object] = {"operation": name, "path": path}
            try:
                OPERATIONS[name](path)
                record["raised"] = None
            except BaseException as exc:  # noqa: BLE001 - reporting exactly what escaped is the point
                record.update(
                    raised=type(exc).__name__, trackpoint=isinstance(exc, tp.errors.CheckpointError), message=str(exc)
                )
            record["seconds"] = time.monotonic() - start
            print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
