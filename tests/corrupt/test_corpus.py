"""Every file of the corpus raises exactly the expected ``trackpoint.errors`` class, quickly."""

from __future__ import annotations

import json
import pathlib
import time

import pytest

import trackpoint as tp
from tests.corrupt.operations import OPERATIONS, everything

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_corpus_case(name: str) -> None:
    case = MANIFEST[name]
    prefix = str(CORPUS / name / "ckpt")
    start = time.monotonic()
    if case["expected"] == "none":
        OPERATIONS[case["operation"]](prefix)
    else:
        with pytest.raises(tp.errors.CheckpointError) as info:
            OPERATIONS[case["operation"]](prefix)
        assert type(info.value).__name__ == case["expected"], f"{name}: {info.value}"
        assert str(info.value)  # says what is wrong
    assert time.monotonic() - start < 10, f"{name} took too long"


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_every_path_fails_cleanly(name: str) -> None:
    everything(str(CORPUS / name / "ckpt"))


def test_verify_reports_the_damage() -> None:
    for name in ("flipped_data_byte", "truncated_data", "overlapping_slices", "missing_shard"):
        assert tp.verify_checkpoint(str(CORPUS / name / "ckpt")), name
