"""A TF checkpoint's own object graph and string tensors carried in safetensors metadata, for an exact way back.

Safetensors holds numeric tensors only, so ``convert(..., include_graph=True)`` keeps what a
TF checkpoint needs besides them in the ``__metadata__`` of its first file (str to str, as the
format allows): the serialized ``TrackableObjectGraph`` (base64) under ``tf.object_graph``, and
every string tensor (``{key: {"shape": [...], "values": [base64, ...]}}`` as JSON) under
``tf.string_tensors``. The tensors are then named by their TF keys, slots and ``save_counter``
included, and no rule may rename or leave any out: converting back rebuilds the same
checkpoint, graph and keys unchanged, rather than a graph made from dotted names.

Readers other than trackpoint ignore the two entries; they are still safetensors files.

Examples:
    >>> import numpy as np
    >>> meta = encode(b"graph bytes", {"k": np.array([b"a", b"bc"], dtype=object)})
    >>> sorted(meta)
    ['tf.object_graph', 'tf.string_tensors']
    >>> graph, strings = decode(meta, "x.safetensors")
    >>> graph, strings["k"].tolist()
    (b'graph bytes', [b'a', b'bc'])
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from trackpoint._io import bounded_json
from trackpoint.errors import DataLossError

__all__ = ["GRAPH_FIELD", "STRINGS_FIELD", "decode", "encode"]

GRAPH_FIELD = "tf.object_graph"
STRINGS_FIELD = "tf.string_tensors"


def encode(graph: bytes, strings: Mapping[str, Any]) -> dict[str, str]:
    """The metadata entries for ``graph`` (serialized) and the string tensors ``{key: value}``."""
    tensors = {}
    for key, value in strings.items():
        array = np.asarray(value, dtype=object)
        tensors[key] = {
            "shape": list(array.shape),
            "values": [base64.b64encode(bytes(item)).decode("ascii") for item in array.reshape(-1)],
        }
    return {
        GRAPH_FIELD: base64.b64encode(graph).decode("ascii"),
        STRINGS_FIELD: bounded_json.dumps(tensors, "the string tensors", sort_keys=True, separators=(",", ":")),
    }


def decode(metadata: Mapping[str, str], path: str) -> tuple[bytes, dict[str, np.ndarray | bytes]] | None:
    """``(graph bytes, {key: string tensor})`` from a file's metadata; None if it carries no graph.

    A scalar string comes back as ``bytes``, others as object arrays of ``bytes``, as TF's reader
    returns them.

    Raises:
        DataLossError: The entries are there but malformed (not base64, not JSON, JSON nested
            deeper than :data:`~trackpoint._format.bounded_json.MAX_JSON_DEPTH`, a shape that
            does not match its values).
    """
    if GRAPH_FIELD not in metadata:
        return None
    try:
        graph = base64.b64decode(metadata[GRAPH_FIELD], validate=True)
        doc = bounded_json.loads(metadata.get(STRINGS_FIELD, "{}"), STRINGS_FIELD)
        if not isinstance(doc, dict):
            raise TypeError(f"{STRINGS_FIELD} is not a JSON object")
        strings: dict[str, np.ndarray | bytes] = {}
        for key, spec in doc.items():
            shape = spec["shape"]
            items = [base64.b64decode(v, validate=True) for v in spec["values"]]
            if not all(isinstance(d, int) and d >= 0 for d in shape) or math.prod(shape) != len(items):
                raise ValueError(f"string tensor {key!r}: {len(items)} values for shape {shape}")
            if not shape:
                strings[key] = items[0]
                continue
            array = np.empty(len(items), dtype=object)
            array[:] = items
            strings[key] = array.reshape(shape)
    except (binascii.Error, ValueError, TypeError, KeyError) as exc:
        raise DataLossError(
            f"{path}: its {GRAPH_FIELD}/{STRINGS_FIELD} metadata is damaged ({exc}); convert it from the TF "
            "checkpoint again",
            path=path,
        ) from None
    return graph, strings
