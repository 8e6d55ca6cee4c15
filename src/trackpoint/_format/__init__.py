"""The on-disk format, bytes to records: bytes, numpy arrays and protobuf messages, nothing of trackables.

Where the bytes live (local files, object stores, temporaries, previous versions, the state
file's compare-and-swap) is :mod:`trackpoint._storage`'s job; this package reads and writes
through it and never asks itself.

Modules: ``crc`` (crc32c and its mask), ``varint``, ``wire`` (protobuf tags of the
hand-written codecs), ``sstable`` (the ``.index`` table), ``dtypes``, ``tensors`` (tensor
bytes), ``slices`` (partitioned tensors), ``keys`` (stored key bytes), ``entries`` and
``entry_columns`` (index entries, one or many at once), ``entry_rules`` (what an untrusted
entry must satisfy), ``ragged`` (many small records encoded at once, as numpy columns),
``index_entries`` (a save's entries as columns), ``bundle_writer``, ``chunked_write``,
``bundle_reader``, ``chunked_read``, ``batch_read`` (many tensors at once), ``in_place``
and ``runs_in_place`` (restoring large tensors into the variables' memory), ``staging``,
``read_tuning``, ``state_file`` (the ``checkpoint`` file's contents), ``bounded_json``,
``text`` and ``threads`` (helper threads for file I/O and checksums).
"""
