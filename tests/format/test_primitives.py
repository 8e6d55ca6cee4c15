"""crc32c masking, varints, ordered-code slice keys and slice specs, against the spec's examples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trackpoint._format import slices, varint
from trackpoint._format.crc import crc32c, mask, unmask, unmask_all
from trackpoint.errors import DataLossError, InvalidArgumentError


def test_crc32c_check_value_and_extend() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")


def test_mask_of_empty_crc() -> None:
    assert mask(0) == 0xA282EAD8


@given(st.integers(0, 2**32 - 1))
def test_unmask_inverts_mask(value: int) -> None:
    assert unmask(mask(value)) == value


@given(st.lists(st.integers(0, 2**32 - 1), max_size=50))
def test_unmask_all_is_unmask_over_a_column(values: list[int]) -> None:
    assert unmask_all(np.array(values, np.uint32)).tolist() == [unmask(v) for v in values]


@given(st.integers(0, 2**64 - 1))
def test_varint_round_trip(value: int) -> None:
    encoded = varint.encode(value)
    assert varint.decode(encoded, 0, "t") == (value, len(encoded))


def test_varint_truncated_and_overlong() -> None:
    with pytest.raises(DataLossError):
        varint.decode(b"\x80\x80", 0, "t")
    with pytest.raises(DataLossError):
        varint.decode(b"\xff\xff\xff\xff\x7f", 0, "t", max_bytes=5)  # > 32 bits


@pytest.mark.parametrize(
    "value, encoded",
    [(0, "80"), (4, "84"), (-1, "7f"), (63, "bf"), (-64, "40"), (64, "c040"), (1000, "c3e8"), (3334, "cd06")],
)
def test_signed_num_increasing_examples(value: int, encoded: str) -> None:
    assert slices._signed_num_increasing(value).hex() == encoded


@given(st.lists(st.integers(-(2**62), 2**62), min_size=2, max_size=2))
def test_signed_num_increasing_preserves_order(pair: list[int]) -> None:
    a, b = sorted(pair)
    assert slices._signed_num_increasing(a) <= slices._signed_num_increasing(b)


def test_slice_key_of_the_spec_example() -> None:
    key = slices.encode_slice_key("big/.ATTRIBUTES/VARIABLE_VALUE", ((4, 3), (0, 4)))
    assert key == b"\x00big/.ATTRIBUTES/VARIABLE_VALUE\x00\x01\x01\x02\x84\x83\x80\x84"


def test_slice_key_escapes_nul_and_ff() -> None:
    key = slices.encode_slice_key("a\x00b", ((0, -1),))
    assert key == b"\x00a\x00\xffb\x00\x01\x01\x01\x80\x7f"


def test_parse_and_format_spec() -> None:
    assert slices.parse_spec("10 4 0,4:-") == ((10, 4), ((0, 4), (0, -1)))
    assert slices.format_spec((10, 4), ((0, 4), (0, -1))) == "10 4 0,4:-"
    for bad in ("", "10 4", "10 4 0,11:-", "x 4 0,1:-", "10 4 0,1", "-1 0,1"):
        with pytest.raises(InvalidArgumentError):
            slices.parse_spec(bad)


def test_proto_round_trip_keeps_full_extents() -> None:
    extents = ((0, -1), (3, 2))
    assert slices.extents_from_proto(slices.extents_to_proto(extents)) == extents


@given(st.binary(max_size=600), st.binary(max_size=3000))
def test_crc32c_combine(a: bytes, b: bytes) -> None:
    from trackpoint._format.crc import crc32c_combine

    assert crc32c_combine(crc32c(a), crc32c(b), len(b)) == crc32c(a + b)


@given(st.integers(0, 70), st.integers(0, 300), st.randoms(use_true_random=False))
def test_crc32c_of_run_is_the_crc_of_the_pieces_joined(count: int, length: int, rng) -> None:
    """Any number of pieces (padding to a power of two included), any length (0 too)."""
    from trackpoint._format.crc import crc32c_of_run

    pieces = [rng.randbytes(length) for _ in range(count)]
    crcs = np.array([crc32c(p) for p in pieces], np.uint64)
    assert crc32c_of_run(crcs, length) == crc32c(b"".join(pieces))


def test_crc32c_of_run_differs_when_any_one_piece_does() -> None:
    """A changed piece changes the run's crc, whichever piece and whichever bit of its crc."""
    from trackpoint._format.crc import crc32c_of_run

    crcs = np.array([crc32c(bytes([i]) * 8) for i in range(37)], np.uint64)
    whole = crc32c_of_run(crcs, 8)
    for piece in range(len(crcs)):
        for bit in range(32):
            changed = crcs.copy()
            changed[piece] ^= np.uint64(1 << bit)
            assert crc32c_of_run(changed, 8) != whole, (piece, bit)


def test_crc32c_combine_of_long_parts() -> None:
    """Parts of the sizes parallel reads checksum (up to 64 MiB: powers of x up to x^(2^29))."""
    from trackpoint._format.crc import crc32c_combine

    a = bytes(range(256)) * 3
    for length in (1 << 20, (64 << 20) + 7):
        b = bytearray(length)
        b[-5:] = b"tail!"
        assert crc32c_combine(crc32c(a), crc32c(b), length) == crc32c(a + b)
