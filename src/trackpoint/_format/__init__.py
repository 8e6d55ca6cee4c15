"""The on-disk format: bytes, numpy arrays and protobuf messages, nothing of trackables.

Modules: ``crc`` (crc32c and its mask), ``varint``, ``sstable`` (the ``.index`` table),
``dtypes``, ``tensors`` (tensor bytes), ``slices`` (partitioned tensors), ``naming``,
``bundle_writer``, ``bundle_reader``, ``entry_columns`` (many index entries decoded at once),
``merge``, ``state_file``, ``atomic`` (publishing files so that no reader sees a partial
checkpoint) and ``threads`` (helper threads for file I/O and checksums).
"""
