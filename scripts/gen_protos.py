"""Regenerate the committed ``*_pb2.py`` modules from the ``.proto`` files.

The generated code is pinned to protoc 27.2 (``grpcio-tools==1.66.2``) on purpose:
gencode refuses runtimes older than itself, so the oldest protoc we can use sets the
floor of the ``protobuf`` range in ``pyproject.toml`` (>=5.27.2). Newer runtimes accept it.

Usage (from the repository root)::

    python -m venv /tmp/protoc-venv
    /tmp/protoc-venv/bin/pip install grpcio-tools==1.66.2
    /tmp/protoc-venv/bin/python scripts/gen_protos.py
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"
PROTO_DIR = SRC / "trackpoint" / "_format" / "_proto"
PINNED_PROTOC = "27.2"


def main() -> int:
    from grpc_tools import protoc  # imported here: only this script needs grpcio-tools

    version = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    if version != PINNED_PROTOC:
        print(f"protoc {version} found; install grpcio-tools==1.66.2 (protoc {PINNED_PROTOC})", file=sys.stderr)
        return 1
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    protos = sorted(PROTO_DIR.glob("*.proto"))
    # Rooted at src/ so the files register as trackpoint/_format/_proto/*.proto, names no
    # other library puts in the default descriptor pool.
    args = ["protoc", f"-I{SRC}", f"-I{include}", f"--python_out={SRC}"] + [str(p) for p in protos]
    return protoc.main(args)


if __name__ == "__main__":
    sys.exit(main())
