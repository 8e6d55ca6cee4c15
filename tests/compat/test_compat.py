"""``trackpoint.compat``: the stand-in ``tensorflow`` module, ``as_tensorflow()`` and ``python -m
trackpoint.compat``, without TensorFlow (``test_compat_tf.py`` compares with the real one)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import trackpoint as tp
from trackpoint.compat import as_tensorflow, tensorflow

PARTS = ("tensorflow", "tensorflow.train", "tensorflow.compat", "tensorflow.compat.v1", "tensorflow.io.gfile")


def test_its_names_are_trackpoints_own_functions_classes_and_errors() -> None:
    tf = tensorflow
    assert tf.train.load_variable is tp.load_variable and tf.train.Checkpoint is tp.Checkpoint
    assert tf.train.CheckpointManager is tp.CheckpointManager and tf.train.CheckpointView is tp.CheckpointView
    assert tf.compat.v1.train.NewCheckpointReader is tp.CheckpointReader
    assert tf.errors.OpError is tp.errors.CheckpointError
    for name in ("NotFoundError", "DataLossError", "InvalidArgumentError"):
        assert issubclass(getattr(tf.errors, name), tf.errors.OpError)
    assert tf.__version__ == "2.21.0"


def test_anything_else_is_an_attribute_error_that_names_what_is_covered() -> None:
    with pytest.raises(AttributeError, match=r"has no attribute 'keras'. It covers: __version__, compat, errors, io"):
        tensorflow.keras  # noqa: B018
    with pytest.raises(AttributeError, match=r"tensorflow.train.Saver needs the real TensorFlow"):
        tensorflow.train.Saver  # noqa: B018
    assert not hasattr(tensorflow, "__file__")  # probes for dunders are plain AttributeErrors


def test_import_tensorflow_gives_the_stand_in_inside_the_block_and_nothing_after(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    before = dict(sys.modules)
    with as_tensorflow() as stand_in:
        import tensorflow as tf
        import tensorflow.compat.v1 as v1  # noqa: PLR0402 (the way TF1 scripts import it)
        from tensorflow.io import gfile

        assert tf is stand_in and v1 is stand_in.compat.v1 and gfile is stand_in.io.gfile
        spec = importlib.util.find_spec("tensorflow")  # transformers asks this while it is imported
        assert spec is not None and spec.name == "tensorflow" and spec.submodule_search_locations == []
        with as_tensorflow():  # blocks nest
            assert sys.modules["tensorflow"] is stand_in
        assert sys.modules["tensorflow"] is stand_in
    assert not any(name in sys.modules for name in PARTS)
    assert sys.modules == before


def test_sys_modules_is_put_back_after_an_exception_and_an_earlier_entry_kept(monkeypatch) -> None:
    earlier = object()
    monkeypatch.setitem(sys.modules, "tensorflow.io.gfile", earlier)  # e.g. a test double of a user's
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    with pytest.raises(KeyError), as_tensorflow():
        raise KeyError("inside")
    assert sys.modules["tensorflow.io.gfile"] is earlier and "tensorflow" not in sys.modules


def test_the_errors_a_script_catches_are_the_ones_trackpoint_raises(tmp_path) -> None:
    tf = tensorflow
    with pytest.raises(tf.errors.NotFoundError):
        tf.train.load_variable(str(tmp_path / "missing"), "w")
    prefix = tp.save_tensors(str(tmp_path / "ckpt"), {"w": np.arange(4.0)})
    data = tmp_path / "ckpt.data-00000-of-00001"
    damaged = bytearray(data.read_bytes())
    damaged[3] ^= 0xFF
    data.write_bytes(bytes(damaged))
    with pytest.raises(tf.errors.OpError) as raised:
        tf.train.load_variable(prefix, "w")
    assert isinstance(raised.value, tf.errors.DataLossError)
    assert str(data) in str(raised.value)


def test_gfile_on_local_paths(tmp_path) -> None:
    gfile = tensorflow.io.gfile
    (tmp_path / "sub").mkdir()
    with gfile.GFile(str(tmp_path / "a.txt"), "w") as f:
        f.write("text")
    with gfile.GFile(str(tmp_path / "a.txt")) as f:
        assert f.read() == "text"
    assert gfile.exists(str(tmp_path / "a.txt")) and not gfile.exists(str(tmp_path / "b"))
    assert gfile.isdir(str(tmp_path / "sub")) and not gfile.isdir(str(tmp_path / "a.txt"))
    assert sorted(gfile.listdir(str(tmp_path))) == ["a.txt", "sub"]
    assert gfile.glob(str(tmp_path / "*.txt")) == [str(tmp_path / "a.txt")]
    with pytest.raises(tensorflow.errors.NotFoundError, match="could not find directory"):
        gfile.listdir(str(tmp_path / "nowhere"))
    with pytest.raises(tensorflow.errors.NotFoundError, match="no such file"):
        gfile.GFile(str(tmp_path / "nowhere.txt"))


def _compat(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trackpoint.compat", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.mark.slow  # child processes
def test_python_m_trackpoint_compat_runs_a_script_unchanged_with_its_arguments_and_exit_status(tmp_path) -> None:
    prefix = tp.save_tensors(str(tmp_path / "model.ckpt"), {"bert/w": np.arange(3, dtype=np.float32)})
    (tmp_path / "helper.py").write_text("SCALE = 2\n")
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import tensorflow.compat.v1 as tf
            from helper import SCALE  # the script's directory is on sys.path, as with python SCRIPT
            value = tf.train.load_variable(sys.argv[1], "bert/w")
            print(__name__, sys.argv[2], (value * SCALE).tolist())
            sys.exit(int(sys.argv[3]))
            """
        )
    )
    result = _compat(str(script), prefix, "extra", "3", cwd=os.fspath(tmp_path.parent))
    assert result.returncode == 3, result.stderr
    assert result.stdout.split("\n")[0] == "__main__ extra [0.0, 2.0, 4.0]"
    assert "import tensorflow" not in result.stderr
    assert _compat().returncode == 2 and "usage: python -m trackpoint.compat SCRIPT" in _compat().stderr
    missing = _compat(str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and "nope.py: no such script" in missing.stderr
    failing = tmp_path / "failing.py"
    failing.write_text("import tensorflow as tf\ntf.nn.relu\n")
    result = _compat(str(failing))
    assert result.returncode == 1 and "needs the real TensorFlow (pip install tensorflow-cpu)" in result.stderr
