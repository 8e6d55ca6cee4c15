"""Every file of the corpus raises exactly the expected ``trackpoint.errors`` class, quickly."""

from __future__ import annotations

import json
import pathlib
import time

import pytest

import trackpoint as tp
from tests.corrupt.operations import OPERATIONS, everything
from trackpoint._format.bundle_reader import BundleReader
from trackpoint._format.keys import decode_key

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
# A 50,000-deep object graph: every reading path over it takes seconds.
SLOW_CASES = {"graph_deep_chain"}
assert SLOW_CASES <= MANIFEST.keys(), "a slow case was renamed: it would lose its marker"
CASES = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_CASES else name for name in sorted(MANIFEST)]


@pytest.mark.parametrize("name", CASES)
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


@pytest.mark.parametrize("name", CASES)
def test_every_path_fails_cleanly(name: str) -> None:
    everything(str(CORPUS / name / "ckpt"))


def test_verify_reports_the_damage() -> None:
    for name in ("flipped_data_byte", "truncated_data", "overlapping_slices", "missing_shard"):
        assert tp.verify_checkpoint(str(CORPUS / name / "ckpt")), name


def _keys(reader: BundleReader) -> list[str]:
    return [decode_key(raw) for raw in reader.raw_keys()]


def _single_reads(prefix: str) -> tuple[type, str] | None:
    """The first error of reading every key one by one, in index order: its class and message."""
    with BundleReader(prefix) as reader:
        for key in _keys(reader):
            try:
                reader.read(key)
            except tp.errors.CheckpointError as exc:
                return type(exc), str(exc)
    return None


def _batched_read(prefix: str, batch_bytes: int) -> tuple[type, str] | None:
    with BundleReader(prefix) as reader:
        try:
            for _ in reader.read_batches(_keys(reader), batch_bytes):
                pass
        except tp.errors.CheckpointError as exc:
            return type(exc), str(exc)
    return None


def _opens(name: str) -> bool:
    try:
        BundleReader(str(CORPUS / name / "ckpt")).close()
    except tp.errors.CheckpointError:
        return False  # the index itself is damaged: neither path gets to the entries
    return True


_OPENING = [name for name in sorted(MANIFEST) if _opens(name)]


@pytest.mark.parametrize("batch_bytes", [64, 1 << 30], ids=["small-batches", "one-batch"])
@pytest.mark.parametrize("name", _OPENING)
def test_single_and_batched_reads_fail_alike(name: str, batch_bytes: int) -> None:
    """Entries are checked by one list of rules whether read one by one or in batches (scalar
    and vectorized forms of trackpoint._format.entry_rules): the same error, word for word."""
    prefix = str(CORPUS / name / "ckpt")
    assert _batched_read(prefix, batch_bytes) == _single_reads(prefix)


def test_the_corpus_reaches_every_rule() -> None:
    """Each rule of the entry checks is broken by some case that both paths read (so the test
    above compares the two forms of every rule); a new rule needs a case here too."""
    from trackpoint._format.entry_rules import RULES

    fragments = {
        "non-negative dimensions": "negative dimension",
        "readable dtype": "cannot convert to numpy",
        "size of a numeric tensor": "invalid size in bundle entry",
        "strings fit their bytes": "strings in",
        "shard id": "names data shard",
        "bytes inside the data file": "the file holds",
    }
    # "rank" (more than 254 dimensions) has no case: tests/format/test_entry_rules.py checks both its forms.
    assert set(fragments) == {rule.name for rule in RULES} - {"rank"}
    messages = " | ".join(failure[1] for name in _OPENING if (failure := _single_reads(str(CORPUS / name / "ckpt"))))
    for rule, fragment in fragments.items():
        assert fragment in messages, rule
