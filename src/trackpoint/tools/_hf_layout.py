"""Hugging Face's layout of safetensors weights: one file, or shards with an index.

One file ``model.safetensors`` when everything fits in one shard; otherwise
``model-00001-of-0000N.safetensors`` ... and ``model.safetensors.index.json`` holding
``{"metadata": {"total_size": <bytes of all tensors>}, "weight_map": {name: file}}``. Tensors
are given to shards in name order, a new shard started when the next tensor would overflow the
current one (a tensor larger than the limit gets a shard of its own), as ``transformers`` does.

Examples:
    >>> parse_size("500MB"), parse_size("2GiB"), parse_size(1024)
    (500000000, 2147483648, 1024)
    >>> shard_names("model.safetensors", 3)
    ['model-00001-of-00003.safetensors', 'model-00002-of-00003.safetensors', 'model-00003-of-00003.safetensors']
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from trackpoint._io import bounded_json, list_names, read_regular, storage_for, write_file
from trackpoint.errors import DataLossError, InvalidArgumentError, NotFoundError
from trackpoint.tools._safetensors_format import SafetensorsFile

__all__ = ["SafetensorsSource", "parse_size", "plan_shards", "shard_names", "write_index"]

DEFAULT_SHARD_SIZE = 5_000_000_000  # "5GB", transformers' default
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS.update({"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40})
_MAX_INDEX_BYTES = 256 << 20


def parse_size(size: int | str) -> int:
    """A shard size in bytes: an int, or ``"500MB"``/``"5GB"`` (powers of 10) and ``"2GiB"`` (of 2).

    Raises:
        InvalidArgumentError: Not a positive size.
    """
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    elif isinstance(size, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", size)
        unit = match.group(2).upper() if match else None
        if match is None or unit not in _UNITS:
            raise InvalidArgumentError(f"shard size {size!r}: write it as bytes or like '500MB', '5GB', '2GiB'")
        value = int(float(match.group(1)) * _UNITS[unit])
    else:
        raise InvalidArgumentError(f"shard size {size!r}: give an int or a string like '5GB'")
    if value <= 0:
        raise InvalidArgumentError(f"shard size {size!r} must be positive")
    return value


def plan_shards(sizes: Sequence[tuple[str, int]], max_bytes: int) -> list[list[str]]:
    """Names grouped into shards of at most ``max_bytes`` (one larger tensor alone), in the given order.

    Examples:
        >>> plan_shards([("a", 6), ("b", 5), ("c", 20), ("d", 1)], 10)
        [['a'], ['b'], ['c'], ['d']]
        >>> plan_shards([("a", 4), ("b", 5), ("c", 1)], 10)
        [['a', 'b', 'c']]
    """
    shards: list[list[str]] = [[]]
    used = 0
    for name, size in sizes:
        if shards[-1] and used + size > max_bytes:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += size
    return shards


def shard_names(single: str, count: int) -> list[str]:
    """File names of ``count`` shards for the single-file name ``single`` (``model.safetensors``)."""
    if count == 1:
        return [single]
    stem = single.removesuffix(".safetensors")
    return [f"{stem}-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def write_index(path: str, total_size: int, weight_map: dict[str, str]) -> None:
    """Write ``model.safetensors.index.json`` atomically."""
    doc = {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}
    write_file(path, (bounded_json.dumps(doc, path, indent=2) + "\n").encode())


@dataclass
class SafetensorsSource:
    """The tensors of one safetensors file or of the shards an index names, each file open.

    Args:
        path: A ``.safetensors`` file, a ``.safetensors.index.json``, or a directory holding
            ``model.safetensors`` or else ``model.safetensors.index.json`` (the order
            ``transformers`` looks in), or else one ``*.safetensors`` file or index.

    Raises:
        NotFoundError: Nothing of the kind is there.
        DataLossError: The index or a file is damaged (a file name with a NUL byte, JSON nested
            too deeply), the index names a tensor its file lacks, or a file holds a tensor the
            index does not list.
        InvalidArgumentError: The index names a file outside its directory, or a file (or the
            index) is not a regular file (a FIFO, a device) or larger than an index may be.
    """

    path: str

    def __post_init__(self) -> None:
        self.files: dict[str, SafetensorsFile] = {}
        self.where: dict[str, SafetensorsFile] = {}  # tensor name -> its file
        path = self.path
        names = _names_in(path)
        if names is not None:
            path = _pick_in_directory(path, names)
        try:
            if path.endswith(".json"):
                self._open_index(path)
            else:
                opened = self.files[path] = SafetensorsFile(path)
                self.where = dict.fromkeys(opened.tensors, opened)
        except BaseException:
            self.close()
            raise
        self.index_path = path

    def _open_index(self, path: str) -> None:
        # Non-blocking and regular files only (a FIFO would block the read forever), bounded in size.
        raw = read_regular(path, "safetensors index", _MAX_INDEX_BYTES)[0]
        try:
            doc = bounded_json.loads(raw, path)
        except InvalidArgumentError:  # arrays nested thousands deep; an index needs three levels
            raise DataLossError(
                f"{path}: its JSON nests too deeply (more than {bounded_json.MAX_JSON_DEPTH} levels); the index is "
                "damaged",
                path=path,
            ) from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise DataLossError(f"{path}: not valid JSON ({exc}); the index is damaged", path=path) from None
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise DataLossError(f"{path}: no 'weight_map' of tensor name to file name; the index is damaged", path=path)
        directory = os.path.dirname(path)
        for file_name in sorted(set(weight_map.values())):
            if "\0" in file_name:  # no file can be named so; os.open would raise a raw ValueError
                raise DataLossError(
                    f"{path}: weight_map names the file {file_name!r}, which holds a NUL byte; the index is damaged",
                    path=path,
                )
            if os.path.basename(file_name) != file_name or file_name in ("", ".", ".."):
                raise InvalidArgumentError(
                    f"{path}: weight_map names the file {file_name!r} outside the index's directory; only plain "
                    "file names beside the index are read",
                    path=path,
                )
            self.files[file_name] = SafetensorsFile(os.path.join(directory, file_name))
        for name, file_name in weight_map.items():
            opened = self.files[file_name]
            if name not in opened.tensors:
                raise DataLossError(f"{path}: {name!r} is listed in {file_name}, which lacks it", path=path, key=name)
            self.where[name] = opened
        for file_name, opened in self.files.items():
            extra = sorted(set(opened.tensors) - set(weight_map))
            if extra:
                raise DataLossError(
                    f"{path}: {file_name} holds {extra[:3]} that the index does not list; the index is stale",
                    path=path,
                    key=extra[0],
                )

    def close(self) -> None:
        """Close every file."""
        for opened in self.files.values():
            opened.close()


def _names_in(path: str) -> list[str] | None:
    """The names of what is directly in ``path`` if it is a directory, else None.

    Through the storage seam: at a URL, a "directory" is a prefix with objects under it (an
    object store has none of its own), known only by listing it. A name ending as weights or an
    index is taken for a file there, as :func:`is_safetensors_path` takes it, without a listing.
    """
    storage = storage_for(path)
    if not storage.has_directories:
        if path.endswith((".safetensors", ".json")):
            return None
        return list_names(storage.directory(path)) or None
    return os.listdir(path) if os.path.isdir(path) else None


def _pick_in_directory(directory: str, names: list[str]) -> str:
    storage = storage_for(directory)
    directory = storage.directory(directory)
    for name in ("model.safetensors", "model.safetensors.index.json"):  # transformers' order
        # An object store's listing holds objects only; a local one directories too, which hold no weights.
        if name in names and (not storage.has_directories or os.path.isfile(os.path.join(directory, name))):
            return os.path.join(directory, name)
    found = sorted(n for n in names if n.endswith((".safetensors", ".safetensors.index.json")))
    if len(found) == 1:
        return os.path.join(directory, found[0])
    raise NotFoundError(
        f"{directory}: no model.safetensors or model.safetensors.index.json"
        + (f" (and several candidates: {found[:5]}; name one)" if found else ""),
        path=directory,
    )


def is_safetensors_path(path: str) -> bool:
    """Whether ``path`` names safetensors weights rather than a TF checkpoint."""
    if path.endswith((".safetensors", ".safetensors.index.json")):
        return True
    if path.endswith(".json"):
        return storage_for(path).is_file(path)
    names = _names_in(path)
    if names is not None:
        has_tf = "checkpoint" in names or any(n.endswith(".index") for n in names)
        return not has_tf and any(n.endswith((".safetensors", ".safetensors.index.json")) for n in names)
    return False
