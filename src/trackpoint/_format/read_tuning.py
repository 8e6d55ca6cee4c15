"""The sizes and counts that shape how a bundle's data files are read, in one record.

Passed to :class:`~trackpoint._format.bundle_reader.BundleReader`, so a test (or a caller
on unusual storage) picks its own instead of patching module globals. The defaults were
chosen with ``benchmarks/compare.py``; see PERFORMANCE.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trackpoint._format.threads import default_workers

__all__ = ["DEFAULT_TUNING", "ReadTuning"]


@dataclass(frozen=True)
class ReadTuning:
    """How tensors are fetched from data files.

    Attributes:
        parallel_read_bytes: A tensor this large or larger is read on its own (by
            several threads once past ``2 * chunk_bytes``), never as part of a run.
        run_bytes: Smaller tensors lying near each other are fetched in runs of up to this
            many bytes, one read each.
        run_gap: Bytes of unrelated data worth reading through rather than starting a new
            run past them.
        read_ahead_rows: Batched reads overlap reading the next batch with handing out this
            one when batches hold at least this many tensors on average.
        chunk_bytes: A large tensor is read and checksummed in chunks of this size, so each
            chunk is checksummed while it is still in the CPU cache; see PERFORMANCE.md.
        read_threads: Threads reading one large tensor.
        in_place_bytes: A restore reads a tensor this large or larger straight into the
            array it replaces, when nothing else holds that array (see
            :mod:`~trackpoint._format.in_place`); of many tensors, only those read on
            their own (``parallel_read_bytes`` or more) are: smaller ones, read in runs,
            cost no allocation of their own. See PERFORMANCE.md, "Restoring in place".
        prefetch_bytes: A restore from a URL into objects whose last restore read most of
            its checkpoint starts downloading the data objects whole as soon as the index is
            read, when they hold this many bytes or fewer in all (see
            ``BundleReader.expect_most``). Other restores fetch what their walk asks for.

    Examples:
        >>> ReadTuning(run_gap=0).run_gap, DEFAULT_TUNING.run_gap
        (0, 65536)
    """

    parallel_read_bytes: int = 1 << 20
    run_bytes: int = 4 << 20
    run_gap: int = 64 << 10
    read_ahead_rows: int = 256
    chunk_bytes: int = 2 << 20
    read_threads: int = field(default_factory=default_workers)
    in_place_bytes: int = 1 << 20
    prefetch_bytes: int = 64 << 20


DEFAULT_TUNING = ReadTuning()
