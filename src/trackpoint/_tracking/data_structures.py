"""Lists, dicts and tuples assigned to trackables become container nodes, as in TF.

* ``ListWrapper`` (``list_wrapper``): trackable elements are children ``"0"``, ``"1"``, … by index.
* ``DictWrapper`` (``dict_wrapper``): string keys are the children's names (escaped in checkpoint paths).
* ``TupleWrapper`` (``tuple_wrapper``): elements by index; a namedtuple's fields also by name (fields first).

Children are the trackables tracked when they entered the container through the wrapper
(TF's rule: ``tp.NoDependency`` elements are stored but never tracked). Which values are
wrapped is one rule, :func:`~trackpoint._tracking.wrapping.wrap_or_unwrap`; importing this
module registers every wrapper with it.
"""

from __future__ import annotations

from trackpoint._tracking.dict_wrapper import DictWrapper
from trackpoint._tracking.list_wrapper import ListWrapper
from trackpoint._tracking.tuple_wrapper import TupleWrapper
from trackpoint._tracking.wrapping import sticky_attribute_assignment, wrap_or_unwrap

__all__ = ["DictWrapper", "ListWrapper", "TupleWrapper", "sticky_attribute_assignment", "wrap_or_unwrap"]
