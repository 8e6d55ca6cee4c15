"""Mutate real index, data and object-graph bytes; only ``trackpoint.errors`` may come out.

    python fuzz_worker.py ADDRESS_SPACE_BYTES EXAMPLES [SEED]

Runs under an address-space limit (RLIMIT_AS), so a reader that trusted a size in a file
and allocated for it would fail with MemoryError, which is not a trackpoint error. Each
case has a deadline; test_fuzz.py runs this in a subprocess. For a long run:
``python tests/corrupt/fuzz_worker.py 2147483648 200000 7``.
"""

from __future__ import annotations

import os
import pathlib
import resource
import shutil
import sys
import tempfile
from datetime import timedelta

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import trackpoint as tp
from tests.corrupt.operations import everything
from tests.format.bundle_helpers import read_table
from trackpoint._format import sstable
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.crc import crc32c, mask
from trackpoint._storage import naming

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def build() -> tuple[tp.Module, tp.optimizers.Adam]:
    model = tp.Module()
    model.dense = tp.Module()
    model.dense.kernel = tp.Variable(np.arange(24, dtype=np.float32).reshape(4, 6))
    model.dense.bias = tp.Variable(np.arange(6, dtype=np.float64))
    model.words = tp.Variable(np.array([b"alpha", b"", b"\xff\x00"], dtype=object))
    model.items = [tp.Variable(np.int64(3)), {"k/1": tp.Variable([True, False])}]
    adam = tp.optimizers.Adam(0.1)
    adam.apply_gradients([(np.ones((4, 6), np.float32), model.dense.kernel)])
    return model, adam


def restore_into_model(prefix: str) -> None:
    """Restore into live objects of the original structure: binding, slots, assignment all run."""
    model, adam = build()
    try:
        tp.Checkpoint(model=model, optimizer=adam).restore(prefix).expect_partial()
    except tp.errors.CheckpointError:
        pass


def base_checkpoint(directory: str) -> dict[str, bytes]:
    model, adam = build()
    prefix = os.path.join(directory, "ckpt")
    tp.Checkpoint(model=model, optimizer=adam).save(
        prefix, tp.CheckpointOptions(experimental_sharding_callback=tp.sharding.MaxShardSizePolicy(64))
    )
    return {name: pathlib.Path(directory, name).read_bytes() for name in os.listdir(directory)}


def mutate(raw: bytes, data: st.DataObject) -> bytes:
    buf = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        if not buf:
            buf.extend(data.draw(st.binary(min_size=1, max_size=8)))
            continue
        at = data.draw(st.integers(0, len(buf) - 1))
        if kind == "flip":
            buf[at] ^= data.draw(st.integers(1, 255))
        elif kind == "set":
            buf[at] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif kind == "truncate":
            del buf[at:]
        elif kind == "insert":
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=12))
        else:
            del buf[at : at + data.draw(st.integers(1, 12))]
    return bytes(buf)


def main() -> None:
    limit, examples = int(sys.argv[1]), int(sys.argv[2])
    fuzz_seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    base_dir = tempfile.mkdtemp(prefix="tp-fuzz-base-")
    files = base_checkpoint(base_dir)
    index_name = next(n for n in files if n.endswith(".index"))
    prefix_name = index_name[: -len(".index")]
    data_names = sorted(n for n in files if ".data-" in n)
    reader = BundleReader(os.path.join(base_dir, prefix_name))
    items = read_table(files[index_name], "base")
    graph = reader.read(GRAPH_KEY)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    work = tempfile.mkdtemp(prefix="tp-fuzz-")
    counts: dict[str, int] = {}

    @seed(fuzz_seed)
    @settings(
        max_examples=examples, deadline=timedelta(seconds=3), database=None, suppress_health_check=list(HealthCheck)
    )
    @given(st.data())
    def case(data: st.DataObject) -> None:
        for name in os.listdir(work):
            os.unlink(os.path.join(work, name))
        current = dict(files)
        target = data.draw(st.sampled_from(["index_bytes", "index_entry", "data_bytes", "data_with_crc", "graph"]))
        counts[target] = counts.get(target, 0) + 1
        if target == "index_bytes":
            current[index_name] = mutate(files[index_name], data)
        elif target == "data_bytes":
            name = data.draw(st.sampled_from(data_names))
            current[name] = mutate(files[name], data)
        elif target in ("index_entry", "data_with_crc", "graph"):
            entries = list(items)
            if target == "index_entry":
                i = data.draw(st.integers(0, len(entries) - 1))  # the header included
                entries[i] = (entries[i][0], mutate(entries[i][1], data))
            elif target == "data_with_crc":
                # Change a tensor's bytes and fix its checksum, so decoding sees the damage.
                plain = [i for i, (k, v) in enumerate(entries) if k and reader.entry(k).size > 0]
                i = data.draw(st.sampled_from(plain))
                entry = reader.entry(entries[i][0])
                name = naming.data_filename(prefix_name, entry.shard_id, reader.num_shards)
                blob = bytearray(current[name])
                region = mutate(bytes(blob[entry.offset : entry.offset + entry.size]), data)[: entry.size]
                region = region.ljust(entry.size, b"\0")
                blob[entry.offset : entry.offset + entry.size] = region
                current[name] = bytes(blob)
                proto = pb.BundleEntryProto.FromString(entries[i][1])
                proto.crc32c = mask(crc32c(region))
                entries[i] = (entries[i][0], proto.SerializeToString())
            else:
                # A mutated object graph, stored with a valid checksum.
                mutated = mutate(graph, data)
                tensors = {
                    k.decode(): reader.read(k.decode())
                    for k, _ in entries
                    if k and not k.startswith(b"\0") and k.decode() != GRAPH_KEY
                }
                tensors[GRAPH_KEY] = mutated
                prefix = os.path.join(work, prefix_name)
                tp.save_tensors(prefix, tensors)
                everything(prefix)
                restore_into_model(prefix)
                return
            current[index_name] = sstable.build_table(entries)
        for name, blob in current.items():
            pathlib.Path(work, name).write_bytes(blob)
        everything(os.path.join(work, prefix_name))
        restore_into_model(os.path.join(work, prefix_name))

    case()
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(base_dir, ignore_errors=True)
    print(f"fuzz: {examples} cases, only trackpoint errors, by target {dict(sorted(counts.items()))}")


if __name__ == "__main__":
    main()
