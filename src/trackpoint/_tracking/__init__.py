"""The live object model: trackables, their named children, variables, containers, python state.

Nothing here touches files. Restoration reaches objects through :class:`PendingRestore`,
a protocol the graph layer implements, so this layer never imports it.
"""
