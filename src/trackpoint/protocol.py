"""The extension protocol, for adapters inside and outside this package.

Everything a foreign object needs to live in a checkpoint's object graph: how a node names
its children and hears of values waiting for a child it lacks, offers tensors to a save
without copies, checks restored values before anything changes and then takes them (into
memory of its own when it offers it), creates and lists slot variables, and learns that a
save finished. The call order of a save and of a restore, and every hook, are documented in
:mod:`trackpoint._tracking.protocol`, whose names this module makes public: ``tp.Variable``,
the optimizers, ``ShardedVariable``, ``split_dependency`` and ``trackpoint.torch`` are written
against these names alone.

Examples:
    >>> import trackpoint as tp
    >>> from trackpoint import protocol
    >>> protocol.VARIABLE_VALUE
    'VARIABLE_VALUE'
    >>> isinstance(tp.Variable(1.0), protocol.ValueOwner), protocol.ValueOwner.__module__
    (True, 'trackpoint.protocol')
"""

from trackpoint import _report_public_names
from trackpoint._tracking import protocol as _protocol
from trackpoint._tracking.protocol import *

__all__ = list(_protocol.__all__)  # every name of the protocol module, and nothing else
__doc__ = f"{__doc__}\n{_protocol.__doc__}"

_report_public_names(globals(), __all__, __name__)
