"""Converting and operating on checkpoints without TensorFlow: safetensors both ways, rewrite, average, merge.

Built on the reader and the streaming bundle writer: every operation holds at most one tensor (or a bounded
buffer of small ones) in memory. The four tools are the modules :mod:`.convert`, :mod:`.rewrite`,
:mod:`.average` and :mod:`.merge` (``tp.convert`` and the others load them on first use); the modules
with a leading underscore are their internals.
"""

__all__ = ["average", "convert", "merge", "rewrite"]
