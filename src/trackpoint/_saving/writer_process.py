"""The writer process of async saves (``CheckpointOptions(async_writer="process")``).

An async save written by a thread of the training process competes with it for the GIL:
``benchmarks/async_interference.py`` measured single-threaded loops at 0.59x and 0.66x of their
speed while saves of 20,000 small and 4 large tensors ran back to back. The writer's Python work
is small (0.06 s of user time a save), but a loop that releases the GIL for each small operation
waits to get it back each time. So these saves are written by one child process per Python
process, shared by its checkpoints and started by the first such save:

1. The checkpoint's writer thread (still the one that runs ``sync()``, the write callbacks and
   the manager's accounting) copies the save's arrays into shared memory (a ``memfd``): the
   small ones of a dtype by one ``np.concatenate`` (8 ms for 20,000), the large ones by
   ``np.copyto``, which releases the GIL. It sends the keys (only when they differ from the
   previous write's), dtype codes and shapes through a pipe (:mod:`.writer_messages`). The
   layout of the last write is reused while every dtype and shape stays the same (4 ms to
   check for 20,000 tensors, against 17 to make it): about 15 ms of GIL a save in all.
2. The child writes the bundle exactly as the thread would (:func:`.write.write_bundle`, the
   same bytes, temporary names and renames; the data files around the page cache, see
   :mod:`trackpoint._format.direct_file`) and answers None or the error it raised; the thread
   waits for it without the GIL, raises that error or goes on as after a thread's write. The
   wait lasts as long as the write, as a thread's write would; a child that dies ends it at
   once (its pipe closes).
3. The shared memory stays mapped in both processes from save to save (mapping it afresh
   faulted in every page again: 0.15 s of CPU for 276 MiB, five times the copy). So from the
   first such save on, the process holds one more copy of the largest state it saved this way.
4. The child runs on the CPUs of the writer thread, which an async save keeps off the CPU
   ``save()`` was called on (:mod:`.cpus`).

The child dies with its parent (``PR_SET_PDEATHSIG``): a killed training process leaves what a
killed thread leaves, temporary files that carry the child's PID and that a later save removes.
A child that dies mid-write fails that save with :class:`~trackpoint.errors.WriteError`, nothing
of it published; the next save starts a new child.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import operator
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from trackpoint._saving import cpus
from trackpoint._saving import writer_messages as messages
from trackpoint._saving.writer_messages import from_json, to_json
from trackpoint._storage import child_processes
from trackpoint.errors import CheckpointError, WriteError

__all__ = ["AVAILABLE", "STOP_TIMEOUT", "main", "write_in_child"]

#: Whether this system has what the writer process needs (``memfd_create``: Linux); elsewhere
#: ``async_writer="process"`` saves are written by the thread.
AVAILABLE = hasattr(os, "memfd_create")

STOP_TIMEOUT = child_processes.STOP_TIMEOUT
_ALIGN = 64
_LARGE = 1 << 16  # bytes: arrays this large are copied one by one, without the GIL

_first = operator.itemgetter(0)
_second = operator.itemgetter(1)
_nbytes = operator.attrgetter("nbytes")
_EMPTY = np.zeros(0, np.uint8)
_dtype = operator.attrgetter("dtype")
_shape = operator.attrgetter("shape")


class _Layout:
    """Where each staged array goes in the shared memory, and what travels in the message.

    Arrays of one dtype under :data:`_LARGE` are packed in order, so that one ``np.concatenate``
    fills them; the large ones follow, each aligned. Anything else (bytes, strings, empty
    arrays) is sent inline.
    """

    def __init__(self, values: list[Any], dtypes: list[Any], shapes: list[Any]) -> None:
        # Per tensor only C loops (map, fromiter): 20,000 tensors take about 10 ms of the GIL.
        self.dtypes, self.shapes = dtypes, shapes  # what a later write must match to reuse this layout
        count, original = len(values), values
        arrays = np.fromiter(map(operator.is_not, dtypes, itertools.repeat(None)), bool, count)
        if not arrays.all():  # the object graph's bytes: each a placeholder here
            values = [value if array else _EMPTY for value, array in zip(values, arrays.tolist())]
            dtypes = list(map(_dtype, values))
            shapes = list(map(_shape, values))
        self.kinds = list(dict.fromkeys(dtypes))
        kinds = {dtype: code for code, dtype in enumerate(self.kinds)}
        self.codes = np.fromiter(map(kinds.__getitem__, dtypes), np.int32, count)
        sizes = np.fromiter(map(_nbytes, values), np.int64, count)
        objects = [code for code, dtype in enumerate(self.kinds) if dtype.hasobject]
        inline = ~arrays | (sizes == 0)  # strided arrays are staged too: both copies take any layout
        if objects:
            inline |= np.isin(self.codes, objects)
        self.inline: dict[int, Any] = {}
        if inline.any():
            rows = np.flatnonzero(inline)
            sizes[rows] = 0
            self.inline = {i: original[i] for i in rows.tolist()}
        large = sizes >= _LARGE
        self.offsets = np.zeros(len(values), np.int64)
        self.groups: list[tuple[np.dtype, list[int], int, int]] = []  # dtype, rows, first offset, bytes
        end = 0
        for code, dtype in enumerate(self.kinds):
            rows = np.flatnonzero((self.codes == code) & ~large & (sizes > 0))
            if len(rows):
                end = -(-end // _ALIGN) * _ALIGN
                self.offsets[rows] = end + np.cumsum(sizes[rows]) - sizes[rows]
                total = int(sizes[rows].sum())
                self.groups.append((dtype, rows.tolist(), end, total))
                end += total
        rows = np.flatnonzero(large)
        self.large = rows.tolist()
        if len(rows):
            aligned = -(-sizes[rows] // _ALIGN) * _ALIGN
            end = -(-end // _ALIGN) * _ALIGN
            self.offsets[rows] = end + np.cumsum(aligned) - aligned
            end += int(aligned.sum())
        self.size = max(end, 1)
        self.ndims = np.fromiter(map(len, shapes), np.int8, len(shapes))
        self.dims = np.fromiter(itertools.chain.from_iterable(shapes), np.int64)

    @classmethod
    def of(cls, values: list[Any], dtypes: list[Any], last: _Layout | None) -> _Layout:
        """The layout of ``values`` (``dtypes``: theirs, None for bytes): ``last`` when the
        values have the dtypes and shapes it was made for, with this write's inline values.

        A checkpoint saves the same tensors each time, and comparing their dtypes and shapes
        takes a third of the GIL that making the layout does (issue 44: the loop loses what
        the writer holds).
        """
        shapes = list(map(getattr, values, itertools.repeat("shape"), itertools.repeat(None)))
        # Shapes first: a dtype compares equal to None (np.dtype(None) is float64), but a
        # shape never does, so a row that turns from bytes into an array (or back) is seen here.
        if last is None or last.shapes != shapes or last.dtypes != dtypes:
            return cls(values, dtypes, shapes)
        last.inline = {row: values[row] for row in last.inline}
        return last

    def fill(self, memory: np.ndarray, values: list[Any]) -> None:
        """Copy the staged arrays of ``values`` into ``memory`` (the mapped shared memory)."""
        for dtype, rows, start, total in self.groups:
            small = list(map(values.__getitem__, rows))
            np.concatenate(small, axis=None, out=memory[start : start + total].view(dtype))  # one C loop
        for i in self.large:
            start, size = int(self.offsets[i]), values[i].nbytes
            np.copyto(memory[start : start + size], values[i].reshape(-1).view(np.uint8))  # without the GIL

    def encode(self, prefix: str, keys: list[str] | None, size: int) -> list[bytes]:
        """The message of a write of ``prefix`` staged in memory of ``size`` bytes (see
        :mod:`.writer_messages`); ``keys`` None when the child holds them already."""
        records, blobs = [], []
        for row, value in self.inline.items():
            record, parts = messages.encode_inline(row, value)
            records.append(record)
            blobs.extend(parts)
        kinds = [messages.dtype_name(dtype) for dtype in self.kinds]
        header = {"prefix": prefix, "keys": keys, "size": size, "kinds": kinds, "inline": records}
        columns = [self.offsets.astype("<i8"), self.codes.astype("<i4"), self.ndims, self.dims.astype("<i8")]
        return [to_json(header), *(column.tobytes() for column in columns), *blobs]


class _Write:
    """In the child: one write as its message tells it."""

    def __init__(self, parts: list[bytes]) -> None:
        header = from_json(parts[0])
        self.prefix: str = header["prefix"]
        self.keys: list[str] | None = header["keys"]
        self.size: int = header["size"]
        self.kinds = [np.dtype(name) for name in header["kinds"]]
        self.offsets = np.frombuffer(parts[1], "<i8")
        self.codes = np.frombuffer(parts[2], "<i4")
        self.ndims = np.frombuffer(parts[3], np.int8)
        self.dims = np.frombuffer(parts[4], "<i8")
        self.inline: dict[int, Any] = {}
        blobs = parts[5:]
        for record in header["inline"]:
            value, used = messages.decode_inline(record, blobs)
            self.inline[record[0]] = value
            blobs = blobs[used:]

    def tensors(self, keys: list[str], staged: mmap.mmap) -> list[tuple[str, Any]]:
        """The ``(key, value)`` pairs of this write, views of ``staged`` but for the inline values."""
        bounds = np.concatenate([[0], np.cumsum(self.ndims, dtype=np.int64)]).tolist()
        dims = self.dims.tolist()
        inline, kinds = self.inline, self.kinds
        tensors: list[tuple[str, Any]] = []
        for i, (key, code, start) in enumerate(zip(keys, self.codes.tolist(), self.offsets.tolist())):
            if i in inline:
                tensors.append((key, inline[i]))
                continue
            shape = tuple(dims[bounds[i] : bounds[i + 1]])
            count = int(np.prod(shape, dtype=np.int64))
            tensors.append((key, np.frombuffer(staged, kinds[code], count, start).reshape(shape)))
        return tensors


class _Child:
    """One child process and the shared memory it reads."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("trackpoint-async-save", os.MFD_CLOEXEC)
        try:
            self.process = child_processes.spawn("trackpoint._saving.writer_process", self.fd)
        except BaseException:
            os.close(self.fd)
            raise
        self.pid = os.getpid()  # a forked copy of this process starts its own child
        self.keys: list[str] | None = None  # the keys the child holds from the last write
        self.map: mmap.mmap | None = None
        self.layout: _Layout | None = None  # of the last write

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.process.poll() is None

    def stage(self, values: list[Any], dtypes: list[Any]) -> _Layout:
        """Copy ``values`` (``dtypes``: theirs, None for bytes) into the shared memory; return where they are."""
        layout = self.layout = _Layout.of(values, dtypes, self.layout)
        if self.map is None or len(self.map) < layout.size:
            # Grown with room to spare, and kept mapped from save to save: a fresh mapping
            # faults in every page again, which took 0.15 s of a 276 MiB save (0.03 s to copy).
            if self.map is not None:
                self.map.close()
            size = layout.size + layout.size // 4
            os.ftruncate(self.fd, size)
            self.map = mmap.mmap(self.fd, size)
        memory = np.frombuffer(self.map, np.uint8)
        layout.fill(memory, values)
        del memory  # no view may outlive a save: the map may be replaced by the next
        return layout

    def write(self, prefix: str, keys: list[str], values: list[Any], dtypes: list[Any]) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            layout = self.stage(values, dtypes)
            assert self.map is not None
            # A checkpoint saves the same keys each time: 20,000 of them are a megabyte of JSON.
            sent = None if keys == self.keys else keys
            messages.send(self.process.stdin, layout.encode(prefix, sent, len(self.map)))
            layout.inline = dict.fromkeys(layout.inline)  # the rows stay; the graph's bytes need not
            self.keys = keys
            answer = messages.decode_error(messages.receive(self.process.stdout)[0])
        except (OSError, EOFError, CheckpointError) as exc:
            self.stop()
            raise WriteError(
                f"could not write checkpoint {prefix}: the process writing it ended ({exc}). Nothing of it was "
                "published and earlier checkpoints are untouched; the next save starts a new writer process and "
                "removes this one's temporary files.",
                path=prefix,
            ) from None
        if answer is not None:
            raise answer

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_TIMEOUT)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self.map is not None:
            self.map.close()
            self.map = None
        with contextlib.suppress(OSError):
            os.close(self.fd)


_lock = threading.Lock()  # one write at a time: checkpoints share the child
_child: _Child | None = None


def _columns(tensors: Sequence[tuple[str, Any]]) -> tuple[list[str], list[Any]]:
    columns = getattr(tensors, "columns", None)  # a save's tensors (serialize._Tensors) have them ready
    if columns is not None:
        return cast(tuple[list[str], list[Any]], columns())
    return list(map(_first, tensors)), list(map(_second, tensors))


def write_in_child(prefix: str, tensors: Sequence[tuple[str, Any]]) -> bool:
    """Write the bundle of ``tensors`` at ``prefix`` in the writer process, on this thread's CPUs; False, having done
    nothing, when a value cannot be sent (:func:`.writer_messages.sendable_dtypes`: a slice of a larger
    tensor, say), which the caller then writes itself.

    Raises:
        WriteError, InvalidArgumentError, ...: What the write raised in the child, or a
            :class:`~trackpoint.errors.WriteError` when the child could not be started or died.
    """
    global _child
    keys, values = _columns(tensors)
    dtypes = messages.sendable_dtypes(values)
    if dtypes is None:
        return False
    with _lock:
        if _child is None or not _child.alive():
            if _child is not None and _child.pid == os.getpid():
                _child.stop()
            try:
                _child = _Child()
            except OSError as exc:
                _child = None
                raise WriteError(
                    f"could not write checkpoint {prefix}: the writer process could not be started ({exc}); "
                    'save with CheckpointOptions(async_writer="thread")',
                    path=prefix,
                ) from exc
        cpus.follow(_child.process.pid)
        _child.write(prefix, keys, values, dtypes)
    return True


def main(fd: int) -> None:
    """The child: write each bundle the parent sends, answer None or the exception raised."""
    if not child_processes.die_with_parent():
        return  # the parent is gone already
    from trackpoint._format.direct_file import write_around_page_cache
    from trackpoint._saving.write import write_bundle

    write_around_page_cache(True)  # this process only writes: the page cache would cost its core

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    keys: list[str] = []
    staged: mmap.mmap | None = None  # kept from write to write, as the parent keeps its own
    while True:
        try:
            write = _Write(messages.receive(stdin))
        except EOFError:
            return
        keys = keys if write.keys is None else write.keys
        if staged is None or len(staged) != write.size:
            if staged is not None:
                with contextlib.suppress(BufferError):  # a view still held elsewhere: it goes with that
                    staged.close()
            staged = mmap.mmap(fd, write.size, prot=mmap.PROT_READ)
        answer: BaseException | None = None
        try:
            write_bundle(write.prefix, write.tensors(keys, staged), keep_values=False)
        except Exception as exc:  # noqa: BLE001 - sent to the parent, which raises it
            answer = exc
        messages.send(stdout, [messages.encode_error(answer, write.prefix)])
        del answer  # its traceback's frames hold views of the map
