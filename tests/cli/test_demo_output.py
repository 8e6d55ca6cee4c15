"""``trackpoint demo`` shows the object graph as ``CheckpointView.tree()`` draws it, and leaves no file open."""

from __future__ import annotations

import trackpoint as tp
from tests.helpers import open_files
from trackpoint.cli import main


def test_the_demo_prints_the_tree_of_its_latest_checkpoint(tmp_path, capsys) -> None:
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.split("\n")
    start = out.index("object graph of ckpt-6:") + 1
    printed = [line for line in out[start:] if line]
    with tp.CheckpointView(str(tmp_path / "ckpt-6")) as view:
        assert printed == ["  " + line for line in view.tree().split("\n")]
    # The view's own rendering: optimizer slots under the variable they belong to, with sizes.
    kernel = printed.index("      kernel  float32[4,2]  32 B")
    assert printed[kernel + 1] == "        [slot 'm' of optimizer]  float32[4,2]  32 B"


def test_the_demo_closes_every_file_it_opens(tmp_path, capsys) -> None:
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    # Through the helper: it first lets the threads that close deleted files' descriptors run.
    assert open_files(tmp_path) == []
