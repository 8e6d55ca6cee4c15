"""The destination checks rewrite, average and merge share (``tensor_copy.check_prefix``), run for each.

Before them, a file where a directory of the output must be raised a raw FileExistsError, and a
directory given as the output wrote ``<dir>.index`` beside it.
"""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp


def _rewrite(tmp_path, out: str) -> str:
    return tp.rewrite(tp.save_tensors(str(tmp_path / "src"), {"w": np.ones(2, np.float32)}), out)


def _average(tmp_path, out: str) -> str:
    paths = [tp.save_tensors(str(tmp_path / f"c{n}"), {"w": np.full(3, n, np.float32)}) for n in range(2)]
    return tp.average(paths, out)


def _merge(tmp_path, out: str) -> str:
    a = tp.save_tensors(str(tmp_path / "temp" / "part-00000-of-00002"), {"w": np.ones(3), "s": b"x"})
    b = tp.save_tensors(str(tmp_path / "temp" / "part-00001-of-00002"), {"b": np.arange(4)})
    return tp.merge([a, b], out)


@pytest.mark.parametrize("tool", [_rewrite, _average, _merge], ids=["rewrite", "average", "merge"])
def test_an_output_under_a_file_or_at_a_directory_is_refused_naming_it(tmp_path, tool) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(tp.errors.WriteError, match=r"afile/ck: .*afile is a file, not a directory: remove"):
        tool(tmp_path, str(tmp_path / "afile" / "ck"))
    (tmp_path / "out").mkdir()
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"'.*out' is a directory; .* such as '.*out/ckpt'"):
        tool(tmp_path, str(tmp_path / "out"))
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"is a directory"):
        tool(tmp_path, str(tmp_path / "new") + "/")
    assert not list(tmp_path.glob("out.*")) and not (tmp_path / "new").exists()
    assert (tmp_path / "afile").read_text() == "x"
