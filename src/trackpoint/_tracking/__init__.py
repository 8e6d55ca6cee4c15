"""The live object model: trackables, their named children, variables, containers, python state.

Nothing here touches files. The extension protocol (:mod:`~trackpoint._tracking.protocol`,
public as :mod:`trackpoint.protocol`) is every hook the graph layer calls on an object;
restoration reaches objects through its :class:`~trackpoint._tracking.protocol.PendingRestore`,
which the graph layer implements, so this layer never imports it.
"""
