"""Hugging Face transformers 4.47.1's own BERT loader and conversion script, unchanged, on a BERT
checkpoint with the original's names written by TF1's ``Saver`` (``tests/golden/bert_tf1``, made by
``python -m tests.interop.tf_side.bert tests/golden/bert_tf1``): run with trackpoint.compat they
give the state dict they give with the real TensorFlow 2.21, bit for bit; and so does
``trackpoint.torch.load_state_dict`` with ``tp.convert``'s rules, in one call.

Each side runs in a process of its own (TensorFlow never runs in the pytest process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import GOLDEN

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.interop, pytest.mark.slow]

BERT = GOLDEN / "bert_tf1"
PREFIX = str(BERT / "bert_model.ckpt")
CONFIG = str(BERT / "bert_config.json")
CONVERT = Path(transformers.__file__).parent / "models" / "bert" / "convert_bert_original_tf_checkpoint_to_pytorch.py"

# transformers' own loader in a fresh process; STAND_IN decides whether `import tensorflow` inside
# it is trackpoint.compat's (the loader imports tensorflow itself, as does importing transformers'
# availability checks).
LOADER = textwrap.dedent(
    """
    import contextlib, sys
    import torch
    from trackpoint.compat import as_tensorflow
    stand_in = sys.argv[1] == "stand-in"
    with as_tensorflow() if stand_in else contextlib.nullcontext():
        from transformers import BertConfig, BertForPreTraining, load_tf_weights_in_bert
        torch.manual_seed(0)
        config = BertConfig.from_json_file(sys.argv[2])
        model = load_tf_weights_in_bert(BertForPreTraining(config), config, sys.argv[3])
        assert ("tensorflow" in sys.modules) and (type(sys.modules["tensorflow"]).__name__ == "StandIn") == stand_in
    torch.save(model.state_dict(), sys.argv[4])
    """
)


# The same BERT model loaded by trackpoint.torch.load_state_dict, the names mapped by rules (no
# TensorFlow, real or stand-in: USE_TF=0 keeps transformers from importing it).
RULES_LOADER = textwrap.dedent(
    """
    import sys
    import torch
    import trackpoint.torch as tpt
    from transformers import BertConfig, BertForPreTraining
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_json_file(sys.argv[1]))
    result = tpt.load_state_dict(
        model,
        sys.argv[2],
        strict=False,
        drop=[r"adam_[mv]$", r"^global_step$"],
        transpose=r"kernel$",
        rename=[
            r"\\.layer_(\\d+)\\.=.layer.\\1.",
            r"LayerNorm\\.gamma$=LayerNorm.weight",
            r"LayerNorm\\.beta$=LayerNorm.bias",
            r"kernel$=weight",
            r"_embeddings$=_embeddings.weight",
            r"^cls\\.predictions\\.output_bias$=cls.predictions.bias",
            r"^cls\\.seq_relationship\\.output_(weight|bias)s?$=cls.seq_relationship.\\1",
        ],
    )
    # The decoder is tied to the word embeddings and its bias to cls.predictions.bias: the
    # module holds them under two names, the checkpoint under one.
    assert result.missing_keys == ["cls.predictions.decoder.bias", "cls.predictions.decoder.weight"], result
    assert result.unexpected_keys == [] and result.mismatched_keys == [], result
    assert "tensorflow" not in sys.modules
    torch.save(model.state_dict(), sys.argv[3])
    """
)


def _run(command: list[str], **extra: str) -> None:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **extra)
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=env)
    assert result.returncode == 0, result.stderr[-4000:]


def _same_state(ours: Path, theirs: Path, same_strides: bool = True) -> None:
    """Same names, dtypes, shapes and bytes; and strides unless told (transformers' loader installs
    transposed views, where load_state_dict copies into the model's own contiguous memory, as
    torch's does)."""
    a, b = torch.load(ours), torch.load(theirs)
    assert list(a) == list(b)
    for key in b:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert a[key].stride() == b[key].stride() or not same_strides, key
        assert a[key].contiguous().numpy().tobytes() == b[key].contiguous().numpy().tobytes(), key  # bit for bit


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The state dict transformers' loader gives with the real TensorFlow."""
    out = tmp_path_factory.mktemp("bert") / "theirs.pt"
    _run([sys.executable, "-c", LOADER, "tensorflow", CONFIG, PREFIX, str(out)])
    return out


def test_load_tf_weights_in_bert_gives_what_it_gives_with_tensorflow(tmp_path, theirs: Path) -> None:
    ours = tmp_path / "ours.pt"
    _run([sys.executable, "-c", LOADER, "stand-in", CONFIG, PREFIX, str(ours)])
    _same_state(ours, theirs)
    loaded = torch.load(ours)["bert.encoder.layer.1.attention.self.query.weight"]
    assert loaded.shape == (8, 8) and float(loaded.abs().sum()) > 0  # the checkpoint's, transposed


def test_load_state_dict_with_rules_gives_the_same_state_dict(tmp_path, theirs: Path) -> None:
    ours = tmp_path / "rules.pt"
    _run([sys.executable, "-c", RULES_LOADER, CONFIG, PREFIX, str(ours)], USE_TF="0", USE_TORCH="1")
    _same_state(ours, theirs, same_strides=False)


def test_the_conversion_script_runs_unchanged_through_python_m_trackpoint_compat(tmp_path) -> None:
    ours, theirs = tmp_path / "ours.bin", tmp_path / "theirs.bin"
    arguments = ["--tf_checkpoint_path", PREFIX, "--bert_config_file", CONFIG, "--pytorch_dump_path"]
    _run([sys.executable, "-m", "trackpoint.compat", str(CONVERT), *arguments, str(ours)])
    _run([sys.executable, str(CONVERT), *arguments, str(theirs)])
    _same_state(ours, theirs)
