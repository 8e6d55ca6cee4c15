"""Package-level promises: no framework imports, a pinned public surface."""

from __future__ import annotations

import subprocess
import sys

import trackpoint as tp


def test_import_pulls_in_no_framework() -> None:
    code = (
        "import sys, trackpoint, trackpoint.cli, trackpoint.demo, trackpoint.reader\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'tensorflow', 'torch', 'jax', 'keras'})\n"
        "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_first_save_and_restore_import_nothing_more(tmp_path) -> None:
    """What a job's first restore needs is imported with trackpoint, not on first use (``np.unique``
    imports ``numpy.ma``, about 6 ms; building protobuf classes at run time imports ``descriptor_pb2``)."""
    code = (
        "import sys, numpy as np, trackpoint as tp\n"
        "before = set(sys.modules)\n"
        "m = tp.Module(); m.vars = [tp.Variable(np.ones(3, np.float32)) for _ in range(3)]\n"
        "opt = tp.optimizers.Adam(0.1); opt.apply_gradients([(np.ones(3, np.float32), v) for v in m.vars])\n"
        "before = set(sys.modules)\n"
        f"path = tp.Checkpoint(model=m, optimizer=opt).save({str(tmp_path / 'ckpt')!r})\n"
        "tp.Checkpoint(model=m, optimizer=opt).restore(path).assert_consumed()\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_public_names_are_pinned_and_sorted() -> None:
    assert tp.__all__ == sorted(tp.__all__)
    assert tp.__all__ == [
        "AutoTrackable",
        "Checkpoint",
        "CheckpointDiff",
        "CheckpointLoadStatus",
        "CheckpointManager",
        "CheckpointOptions",
        "CheckpointReader",
        "CheckpointState",
        "CheckpointView",
        "Damage",
        "InitializationOnlyStatus",
        "Module",
        "NoDependency",
        "PythonState",
        "RestoreReport",
        "Trackable",
        "ValueChange",
        "Variable",
        "errors",
        "get_checkpoint_state",
        "latest_checkpoint",
        "list_variables",
        "load_checkpoint",
        "load_variable",
        "optimizers",
        "repair_checkpoint",
        "save_tensors",
        "sharding",
        "split_dependency",
        "verify_checkpoint",
    ]


def test_error_tree() -> None:
    errors = tp.errors
    assert issubclass(errors.NotFoundError, errors.CheckpointError)
    assert issubclass(errors.NotFoundError, FileNotFoundError)
    assert issubclass(errors.DataLossError, OSError) and issubclass(errors.DataLossError, errors.CheckpointError)
    assert issubclass(errors.InvalidArgumentError, ValueError)


def test_no_code_path_unpickles_or_evaluates_file_content() -> None:
    import pathlib
    import re

    source = pathlib.Path(tp.__file__).parent
    forbidden = re.compile(r"\b(import pickle|from pickle|cPickle|dill|marshal\.loads|eval\(|exec\(|yaml\.load)")
    offenders = [str(path) for path in source.rglob("*.py")
                 if not path.name.endswith("_pb2.py") and forbidden.search(path.read_text())]
    assert offenders == []
