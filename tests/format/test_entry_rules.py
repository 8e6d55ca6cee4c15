"""The rules for untrusted entries: each in a scalar and a vectorized form that agree, with one error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.format.bundle_helpers import decode_entries
from trackpoint._format._proto import tensor_bundle_pb2 as pb
from trackpoint._format.entries import parse_entry
from trackpoint._format.entry_rules import RULES, Rows, Rule, Stage, check, of_stages, passing
from trackpoint.errors import CheckpointError, DataLossError


class _Files:
    """A checkpoint of ``num_shards`` data files of 100 bytes each."""

    prefix = "ckpt"
    index_path = "ckpt.index"
    num_shards = 2

    def file_size(self, shard_id: int, key: str) -> int:
        return 100

    def data_path(self, shard_id: int) -> str:
        return f"ckpt.data-{shard_id}"

    def damaged(self, path: str, key: str, message: str) -> CheckpointError:
        return DataLossError(message)


FILES = _Files()


def _serialized(
    dtype: int = 1, shape: tuple[int, ...] = (2, 2), shard_id: int = 0, offset: int = 0, size: int = 16
) -> bytes:
    entry = pb.BundleEntryProto(dtype=dtype, shard_id=shard_id, offset=offset, size=size, crc32c=7)
    entry.shape.SetInParent()
    for dim in shape:
        entry.shape.dim.add().size = dim
    return entry.SerializeToString()


# One entry breaking each rule (it may break others too).
BROKEN = {
    "rank": _serialized(shape=(1,) * 255, size=4),
    "non-negative dimensions": _serialized(shape=(-5, 2)),
    "readable dtype": _serialized(dtype=21),  # DT_VARIANT
    "size of a numeric tensor": _serialized(size=12),
    "strings fit their bytes": _serialized(dtype=7, shape=(100,), size=10),
    "shard id": _serialized(shard_id=7),
    "bytes inside the data file": _serialized(offset=90),
}


def _both_forms(rule: Rule, value: bytes) -> tuple[bool, bool]:
    entry = parse_entry("k", value, FILES.index_path)
    rows = Rows.of(decode_entries([value]), ["k"])
    assert rows.columns.plain.all()
    return rule.holds(entry, FILES), bool(rule.holds_rows(rows, np.ones(1, bool), FILES)[0])


def test_every_rule_has_a_broken_example() -> None:
    assert [rule.name for rule in RULES] == list(BROKEN)
    assert len({rule.name for rule in RULES}) == len(RULES)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_both_forms_of_a_rule_refuse_what_breaks_it_and_pass_a_good_entry(rule: Rule) -> None:
    assert _both_forms(rule, BROKEN[rule.name]) == (False, False)
    assert _both_forms(rule, _serialized()) == (True, True)
    assert _both_forms(rule, _serialized(dtype=7, shape=(3,), size=40)) == (True, True)  # strings: not numeric


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_the_scalar_form_raises_the_rules_error_and_message(rule: Rule) -> None:
    entry = parse_entry("k", BROKEN[rule.name], FILES.index_path)
    earlier = RULES[: RULES.index(rule)]
    if any(not other.holds(entry, FILES) for other in earlier if other.stage is rule.stage):
        pytest.skip("an earlier rule of the stage fails first")
    with pytest.raises(rule.error) as caught:
        check(entry, FILES, of_stages(rule.stage))
    assert str(caught.value) == rule.message(entry, FILES)
    assert "'k'" in str(caught.value)


@pytest.mark.slow  # a differential test over random entries (hypothesis): seconds
@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([1, 2, 3, 7, 9, 14, 19, 21, 99]),
    st.lists(st.integers(-3, 40), max_size=4),
    st.integers(-1, 3),
    st.integers(-5, 120),
    st.integers(-5, 200),
)
def test_the_vectorized_forms_never_pass_what_a_scalar_form_refuses(dtype, dims, shard_id, offset, size) -> None:
    """The vectorized forms may be stricter, never looser: a row they pass would otherwise be read
    unchecked. And on these small entries, exactly as strict."""
    value = _serialized(dtype, tuple(dims), shard_id, offset, size)
    entry = parse_entry("k", value, FILES.index_path)
    scalar = all(rule.holds(entry, FILES) for rule in RULES)
    rows = Rows.of(decode_entries([value]), ["k"])
    assert bool(passing(rows, np.ones(1, bool), FILES)[0]) == scalar
    if not scalar:
        with pytest.raises(CheckpointError):
            for stage in Stage:
                check(entry, FILES, of_stages(stage))
