"""Name rules: rename in order, only, drop, transpose, conflicts, and the mapping table."""

from __future__ import annotations

import numpy as np
import pytest

import trackpoint as tp
from trackpoint.tools._names import MappingRow, NameRules, check_conflicts, mapping_table, parse_rename


def test_renames_apply_in_order_after_the_filters_which_see_the_source_name() -> None:
    rules = NameRules.make(
        rename=[r"^model\.=", r"^dense=fc", r"kernel$=weight"], only=[r"^model\."], drop=["bias"], transpose="kernel$"
    )
    assert rules.apply("model.dense.kernel", (4, 3)) == ("fc.weight", True)
    assert rules.apply("model.dense.bias", (3,)) is None  # dropped
    assert rules.apply("optimizer.iter", ()) is None  # not in --only
    assert NameRules.make(rename=["a=b", "b=c"]).apply("a", ()) == ("c", False)  # the second sees the first's result
    assert NameRules.make(rename={"(x)(y)": r"\2\1"}).apply("xy", ()) == ("yx", False)


def test_a_rename_rule_splits_at_the_first_unescaped_equals_sign() -> None:
    assert parse_rename("a=b=c") == ("a", "b=c")
    assert parse_rename(r"a\=b=c") == ("a=b", "c")
    assert parse_rename(("x", "y")) == ("x", "y")


@pytest.mark.parametrize(
    ("spec", "message"),
    [("no-equals", "has no '='"), ("(=x", "not a valid regular expression"), (r"a=\9", "bad replacement"), (3, "give")],
)
def test_malformed_rules_are_refused_with_the_remedy(spec: object, message: str) -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match=message):
        NameRules.make(rename=[spec])  # type: ignore[list-item]


def test_a_bad_pattern_names_its_option() -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="drop pattern '\\[' is not a valid"):
        NameRules.make(drop="[")


def test_transpose_refuses_a_tensor_that_is_not_2d_and_an_empty_name_is_refused() -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"'conv.kernel' of shape \[3, 3, 1, 8\].*2-D"):
        NameRules.make(transpose="kernel").apply("conv.kernel", (3, 3, 1, 8))
    with pytest.raises(tp.errors.InvalidArgumentError, match="into an empty name"):
        NameRules.make(rename=[".*="]).apply("w", ())


def test_two_sources_to_one_name_is_an_error_naming_both() -> None:
    rows = [MappingRow(s, n, np.dtype("f4"), ()) for s, n in [("a/1", "x"), ("b", "y"), ("a/2", "x")]]
    with pytest.raises(tp.errors.InvalidArgumentError, match="'a/1' and 'a/2' would both be named 'x'"):
        check_conflicts(rows)
    check_conflicts(rows[:2])


def test_the_mapping_table_lists_source_name_dtype_shape_and_transposition() -> None:
    table = mapping_table(
        [
            MappingRow("model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", "dense.weight", np.dtype("f4"), (3, 4), True),
            MappingRow("model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE", "dense.bias", np.dtype("f8"), (3,)),
        ]
    )
    lines = table.splitlines()
    assert lines[0].split() == ["source", "name", "dtype", "shape", "transposed"]
    assert lines[1].split() == [
        "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
        "dense.weight",
        "float32",
        "[3,4]",
        "yes",
    ]
    assert lines[2].split() == ["model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE", "dense.bias", "float64", "[3]"]


def test_a_bare_tuple_is_a_sequence_of_rules_never_one_pair() -> None:
    # read as one (regex, replacement) pair, the regex '^model\.=' matched nothing and nothing was renamed
    rules = NameRules.make(rename=(r"^model\.=", "kernel$=weight"))
    assert rules.apply("model.dense.kernel", ()) == ("dense.weight", False)
    # one pair is spelled as a list of pairs or a dict; a bare pair of non-rules says so
    assert NameRules.make(rename=[("a", "b")]).apply("xa", ()) == ("xb", False)
    assert NameRules.make(rename={"a": "b"}).apply("xa", ()) == ("xb", False)
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"has no '='.*write \[\('a', 'b'\)\] or \{'a': 'b'\}"):
        NameRules.make(rename=("a", "b"))
    assert NameRules.make(rename=(("a", "b"), "c=d")).apply("ac", ()) == ("bd", False)


def test_an_empty_name_without_rules_is_not_blamed_on_them() -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="a tensor has an empty name") as caught:
        NameRules().apply("", (), "/data/m.safetensors")
    assert "rename rules turn" not in str(caught.value)
    assert str(caught.value).startswith("/data/m.safetensors: ") and caught.value.path == "/data/m.safetensors"
    with pytest.raises(tp.errors.InvalidArgumentError, match="the rename rules turn 'w' into an empty name"):
        NameRules.make(rename="w=").apply("w", ())


def test_rule_errors_begin_with_the_source_given() -> None:
    with pytest.raises(tp.errors.InvalidArgumentError, match="^ck: --transpose matches 'k'") as caught:
        NameRules.make(transpose="k").apply("k", (3,), "ck")
    assert caught.value.path == "ck" and caught.value.key == "k"
    rows = [MappingRow(s, "x", np.dtype("f4"), ()) for s in ("a", "b")]
    with pytest.raises(tp.errors.InvalidArgumentError, match="^ck: 'a' and 'b' would both be named 'x'"):
        check_conflicts(rows, "ck")
