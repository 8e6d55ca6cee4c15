"""trackpoint: TensorFlow's object-based checkpoints in pure Python on numpy.

Reads and writes the exact files ``tf.train.Checkpoint`` writes, without importing TensorFlow.

Examples:
    >>> import numpy as np, tempfile, os
    >>> import trackpoint as tp
    >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> _ = tp.save_tensors(prefix, {"w": np.eye(2, dtype=np.float32)})
    >>> tp.load_variable(prefix, "w")
    array([[1., 0.],
           [0., 1.]], dtype=float32)
"""

from typing import TYPE_CHECKING

from trackpoint import errors, optimizers, sharding
from trackpoint._graph.status import (
    CheckpointLoadStatus,
    InitializationOnlyStatus,
    NameBasedSaverStatus,
    RestoreReport,
)
from trackpoint._saving import committer as _committer
from trackpoint._storage.storage_options import set_storage_options
from trackpoint._tracking.autotrackable import AutoTrackable, Module
from trackpoint._tracking.base import NoDependency, Trackable
from trackpoint._tracking.python_state import PythonState
from trackpoint._tracking.variables import Variable
from trackpoint.checkpoint import Checkpoint
from trackpoint.checkpoint_view import CheckpointDiff, CheckpointView, ValueChange
from trackpoint.manager import CheckpointManager
from trackpoint.options import CheckpointOptions
from trackpoint.reader import (
    CheckpointReader,
    CheckpointState,
    Damage,
    get_checkpoint_state,
    latest_checkpoint,
    list_variables,
    load_checkpoint,
    load_variable,
    repair_checkpoint,
    save_tensors,
    verify_checkpoint,
)
from trackpoint.split_dependency import split_dependency

if TYPE_CHECKING:  # imported on first use (see __getattr__): a program that only saves loads no tool
    from trackpoint.tools.average import average
    from trackpoint.tools.convert import convert
    from trackpoint.tools.merge import merge
    from trackpoint.tools.rewrite import rewrite

__all__ = [
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


def _report_public_module(obj: object, module: str) -> None:
    """Make ``obj`` (and, for a class, the functions defined in its body) report ``module``,
    the public module users import it from, instead of the private module that defines it:
    ``repr(type)``, tracebacks, pickles and documentation tools show that name.

    The methods follow their class because doctest (``pytest --doctest-modules``) looks for a
    class's methods only in the module the class reports: without them, their examples would
    silently stop running.
    """
    import typing  # here, not at the top: this module's namespace is the public API
    from types import FunctionType

    defined_in = obj.__module__
    if isinstance(obj, type) and "__annotations__" in vars(obj):
        # typing.get_type_hints() evaluates a class's string annotations in the namespace of the
        # module the class reports; evaluate them now, while that is still the defining module.
        try:
            hints = typing.get_type_hints(obj, include_extras=True)
        except NameError:  # a name imported only for type checkers: leave the strings as they are
            pass
        else:
            obj.__annotations__ = {name: hints[name] for name in vars(obj)["__annotations__"]}
    obj.__module__ = module
    if not isinstance(obj, type):
        return
    get_overloads = getattr(typing, "get_overloads", None)  # Python 3.11+
    for member in vars(obj).values():
        for function in (
            member,
            getattr(member, "__func__", None),
            getattr(member, "fget", None),
            getattr(member, "fset", None),
            getattr(member, "func", None),
        ):
            if isinstance(function, FunctionType) and function.__module__ == defined_in:
                # typing files @overload stubs under their module's name: file them anew.
                stubs = get_overloads(function) if get_overloads is not None else []
                for callable_ in (function, *stubs):
                    callable_.__module__ = module
                for stub in stubs:
                    typing.overload(stub)


def _report_public_names(namespace: dict[str, object], names: list[str], module: str) -> None:
    """Apply :func:`_report_public_module` to each class and function of ``names`` defined elsewhere
    (a name not loaded yet, such as a tool, is left to :func:`__getattr__`)."""
    from types import FunctionType

    for name in names:
        if name not in namespace:
            continue
        obj = namespace[name]
        if isinstance(obj, (type, FunctionType)) and obj.__module__ != module:
            _report_public_module(obj, module)


# As httpx does: ``tp.Variable`` is ``trackpoint.Variable``, not ``trackpoint._tracking.variables.Variable``,
# and ``tp.sharding.MaxShardSizePolicy`` is ``trackpoint.sharding.MaxShardSizePolicy``. The modules
# themselves (errors, optimizers, sharding) are public already and keep their names.
_report_public_names(globals(), __all__, __name__)
_report_public_names(vars(sharding), sharding.__all__, sharding.__name__)


# A save of several processes is trackpoint.distributed's: the first save that may coordinate imports
# it, and it registers its committer then (see trackpoint._saving.committer).
_committer.load_on_first_need("trackpoint.distributed")

# The tools, each imported from its module ``trackpoint.tools.<name>`` on first use: ``import trackpoint``
# loads no tool (they import a dozen modules that saving and restoring never need).
_TOOLS = ("average", "convert", "merge", "rewrite")


def __getattr__(name: str) -> object:
    """A tool (``tp.convert``, ``tp.rewrite``, ``tp.average``, ``tp.merge``) or ``tp.distributed``,
    imported on first use, or ``trackpoint.__version__``, read from the installed package's metadata on first use.

    ``pyproject.toml`` is the version's one source. It is looked up on first use, because
    finding an installed package's metadata searches every entry of ``sys.path``: work that
    every ``import trackpoint`` would pay for a value few programs read.
    """
    if name == "distributed":  # tp.distributed, as before it was imported on first use (see above)
        import importlib

        return importlib.import_module("trackpoint.distributed")
    if name in _TOOLS:
        import importlib

        tool = getattr(importlib.import_module(f"trackpoint.tools.{name}"), name)
        _report_public_module(tool, __name__)
        globals()[name] = tool
        return tool
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("trackpoint")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        value = "0+unknown"
    globals()["__version__"] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the tools not imported yet among them."""
    return sorted(set(globals()) | set(__all__))
