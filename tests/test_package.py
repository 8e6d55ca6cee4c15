"""Package-level promises: no framework imports, a pinned public surface."""

from __future__ import annotations

import doctest
import importlib.metadata
import pathlib
import pickle
import pickletools
import pkgutil
import re
import subprocess
import sys
import traceback
import types
import typing

import numpy as np
import pytest

import trackpoint as tp


@pytest.mark.slow  # a fresh interpreter in a child process: seconds
def test_import_pulls_in_no_framework() -> None:
    code = (
        "import sys, trackpoint, trackpoint.cli, trackpoint.cli._demo, trackpoint.reader, trackpoint.tools.convert\n"
        # The adapters of frameworks that need no framework to import: they take the objects given.
        "import trackpoint.keras, trackpoint.jax, trackpoint.compat\n"
        "optional = {'tensorflow', 'torch', 'jax', 'keras', 'flax', 'optax', 'safetensors', 'fsspec', 's3fs', 'gcsfs'}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in optional)\n"
        "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_tools_package_is_not_hidden_by_the_functions_it_exports() -> None:
    """``tp.convert`` is a function; the package holding it is ``trackpoint.tools``, importable by name."""
    import importlib

    for name in ("convert", "rewrite", "average", "merge"):
        module = importlib.import_module(f"trackpoint.tools.{name}")
        assert getattr(module, name) is getattr(tp, name)
        assert callable(getattr(tp, name))


@pytest.mark.slow  # a fresh interpreter in a child process: seconds
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
        "NameBasedSaverStatus",
        "NoDependency",
        "PythonState",
        "RestoreReport",
        "Trackable",
        "ValueChange",
        "Variable",
        "average",
        "convert",
        "errors",
        "get_checkpoint_state",
        "latest_checkpoint",
        "list_variables",
        "load_checkpoint",
        "load_variable",
        "merge",
        "optimizers",
        "repair_checkpoint",
        "rewrite",
        "save_tensors",
        "set_storage_options",
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
    source = pathlib.Path(tp.__file__).parent
    forbidden = re.compile(r"\b(import pickle|from pickle|cPickle|dill|marshal\.loads|eval\(|exec\(|yaml\.load)")
    offenders = [
        str(path)
        for path in source.rglob("*.py")
        if not path.name.endswith("_pb2.py") and forbidden.search(path.read_text())
    ]
    assert offenders == []


# -- public names report the module users import them from ---------------------------------

_PUBLIC = [name for name in tp.__all__ if not isinstance(getattr(tp, name), types.ModuleType)]
# Of tp.sharding, the classes (Shard is a type alias; ShardByDevicePolicy is ShardByTaskPolicy, as in TF).
_SHARDING = [name for name in tp.sharding.__all__ if isinstance(getattr(tp.sharding, name), type)]


@pytest.mark.parametrize(
    ("module", "name"),
    [(tp, name) for name in _PUBLIC] + [(tp.sharding, name) for name in _SHARDING],
    ids=[f"tp.{name}" for name in _PUBLIC] + [f"tp.sharding.{name}" for name in _SHARDING],
)
def test_public_names_report_the_module_they_are_imported_from(module: types.ModuleType, name: str) -> None:
    obj = getattr(module, name)
    assert obj.__module__ == module.__name__
    if isinstance(obj, type):
        assert repr(obj) == f"<class '{module.__name__}.{obj.__name__}'>"
        assert pickle.loads(pickle.dumps(obj)) is obj  # pickled by the public name, found again by it
        typing.get_type_hints(obj)  # annotations still resolve, though trackpoint's namespace lacks their names


def test_a_traceback_names_the_public_class() -> None:
    with pytest.raises(tp.errors.InvalidArgumentError) as caught:
        tp.CheckpointOptions(experimental_sharding_callback="x")  # type: ignore[arg-type]
    assert "trackpoint.errors.InvalidArgumentError" in "".join(traceback.format_exception(caught.value))
    assert "trackpoint.Variable" in repr(type(tp.Variable(1.0)))


def test_instances_pickle_under_the_public_names() -> None:
    variable = tp.Variable(np.arange(3, dtype=np.float32), name="w")
    data = pickle.dumps(variable, protocol=4)
    globals_named = {
        (arg if isinstance(arg, str) else "")
        for op, arg, _ in pickletools.genops(data)
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE")
    }
    assert "trackpoint" in globals_named and "Variable" in globals_named
    assert not any(name.startswith("trackpoint._") for name in globals_named)
    clone = pickle.loads(data)
    assert type(clone) is tp.Variable and clone.numpy().tolist() == [0.0, 1.0, 2.0]
    for value in (
        tp.CheckpointOptions(enable_async=True),
        tp.ValueChange("(root).w", "VARIABLE_VALUE", "value", "d"),
        tp.CheckpointDiff(added=("(root).b",)),
        tp.Module(),
    ):
        assert type(pickle.loads(pickle.dumps(value))) is type(value)


def test_the_examples_of_methods_still_run_under_doctest() -> None:
    """doctest looks for a class's methods in the module the class reports, so the methods must
    report ``trackpoint`` too, or ``pytest --doctest-modules`` silently skips their examples."""
    finder = doctest.DocTestFinder()
    modules = [tp] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(tp.__path__, "trackpoint.")
        if "_proto" not in info.name and not info.name.endswith("__main__")
    ]
    found = {".".join(test.name.split(".")[-2:]) for module in modules for test in finder.find(module) if test.examples}
    expected = set()
    for module, name in [(tp, name) for name in _PUBLIC] + [(tp.sharding, name) for name in _SHARDING]:
        obj = getattr(module, name)
        for attribute, member in vars(obj).items() if isinstance(obj, type) else ():
            function = getattr(member, "__func__", getattr(member, "fget", member))
            if isinstance(function, types.FunctionType) and ">>>" in (function.__doc__ or ""):
                expected.add(f"{obj.__name__}.{attribute}")
    assert "CheckpointView.match" in expected and "CheckpointView.diff" in expected
    assert expected - found == set()


def test_one_version_everywhere(capsys) -> None:
    pyproject = (pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"$', pyproject, re.MULTILINE)
    assert declared is not None
    assert tp.__version__ == declared.group(1) == importlib.metadata.version("trackpoint")
    source = pathlib.Path(tp.__file__).read_text()
    assert re.search(r"__version__\s*=\s*[\"']", source) is None  # not a second copy of the number
    from trackpoint.cli import main

    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out == f"trackpoint {declared.group(1)}\n"
