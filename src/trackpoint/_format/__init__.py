"""The on-disk format: bytes, numpy arrays and protobuf messages, nothing of trackables.

Modules: ``crc`` (crc32c and its mask), ``varint``, ``wire`` (protobuf tags of the
hand-written codecs), ``sstable`` (the ``.index`` table), ``dtypes``, ``tensors`` (tensor
bytes), ``slices`` (partitioned tensors), ``keys`` (stored key bytes), ``naming``,
``entries`` and ``entry_columns`` (index entries, one or many at once), ``entry_rules``
(what an untrusted entry must satisfy), ``ragged`` (many small records encoded at once, as
numpy columns), ``index_entries`` (a save's entries as columns), ``bundle_writer``,
``writeback`` (starting a durable save's writeback early), ``bundle_reader``, ``batch_read``
(many tensors at once), ``in_place`` (restoring large tensors into the variables' memory),
``read_tuning``, ``shard_files`` (a reader's open data files), ``state_file``, ``atomic``,
``temps``, ``publish`` and ``previous`` (writing files so that no reader sees a partial
checkpoint) and ``threads`` (helper threads for file I/O and checksums).
"""
