"""Lists, dicts and tuples: the same scripts on TensorFlow 2.21 and on trackpoint save the same keys or raise alike.

Each scenario of ``container_rules.py`` runs on both libraries; the outcome is the set of
saved keys, or the builtin exception class, the phase (building or saving) and the TF
phrases in the message. Where trackpoint deliberately differs, the test states TF's outcome
and trackpoint's, and why.
"""

from __future__ import annotations

import os
import tempfile

import pytest

import trackpoint as tp
from tests.interop import container_rules as rules
from tests.interop.tf_process import tf_side

pytestmark = pytest.mark.interop

tf_containers = tf_side("containers")

# TF's outcome, trackpoint's, and why they differ.
DIFFERENCES = {
    # TF names an element assigned at a negative index "-1": a fresh list restores nothing
    # into it (its elements are "0", "1", …), so TF cannot restore its own checkpoint.
    "list_plain_replaced_by_trackable": (
        ("keys", ("l/-1/.ATTRIBUTES/VARIABLE_VALUE", "l/0/.ATTRIBUTES/VARIABLE_VALUE")),
        ("keys", ("l/0/.ATTRIBUTES/VARIABLE_VALUE", "l/1/.ATTRIBUTES/VARIABLE_VALUE")),
    ),
    # TF compares the new elements with `!=`, which for a tf.Variable and None raises a
    # conversion error while building; the slice holds trackables at positions 1 and 3.
    "list_slice_assigned_in_plain_list": (
        ("error", "build", "ValueError", ()),
        ("keys", ("l/1/.ATTRIBUTES/VARIABLE_VALUE", "l/3/.ATTRIBUTES/VARIABLE_VALUE")),
    ),
    # TF's dict proxy passes pop/popitem/clear/setdefault straight to the dict, so its save
    # then calls them changes made outside the wrapper. Through trackpoint's wrapper they are
    # tracked: a removed value stays saved under its key, as after TF's own `del`.
    "dict_pop_through_wrapper": (
        (
            "error",
            "save",
            "ValueError",
            ("modified outside the wrapper", "The wrapped dictionary was modified outside the wrapper"),
        ),
        ("keys", ("d/a/.ATTRIBUTES/VARIABLE_VALUE", "d/b/.ATTRIBUTES/VARIABLE_VALUE")),
    ),
    "dict_popitem_clear_through_wrapper": (
        (
            "error",
            "save",
            "ValueError",
            ("modified outside the wrapper", "The wrapped dictionary was modified outside the wrapper"),
        ),
        ("keys", ("d/a/.ATTRIBUTES/VARIABLE_VALUE", "d/b/.ATTRIBUTES/VARIABLE_VALUE", "w/.ATTRIBUTES/VARIABLE_VALUE")),
    ),
    "dict_update_setdefault_through_wrapper": (
        (
            "error",
            "save",
            "ValueError",
            ("modified outside the wrapper", "The wrapped dictionary was modified outside the wrapper"),
        ),
        ("keys", tuple(f"d/{k}/.ATTRIBUTES/VARIABLE_VALUE" for k in "abce")),
    ),
}


@pytest.fixture(scope="module")
def tf_outcomes() -> dict[str, tuple]:
    """Every scenario's outcome under TensorFlow, in the TensorFlow child (tuples stay tuples)."""
    return tf_containers.outcomes()


@pytest.mark.parametrize("name", list(rules.SCENARIOS))
def test_same_outcome_as_tf(tf_outcomes: dict[str, tuple], name: str) -> None:
    ours = rules.outcome(rules.Lib("tp"), name)
    if name in DIFFERENCES:
        theirs_expected, ours_expected = DIFFERENCES[name]
        assert tf_outcomes[name] == theirs_expected  # TF still behaves as the note above says
        assert ours == ours_expected
    else:
        assert ours == tf_outcomes[name]


def test_every_scenario_has_an_outcome_that_can_fail(tf_outcomes: dict[str, tuple]) -> None:
    """The scenarios cover both kinds of outcome, and each error names one of TF's phrases or is a difference."""
    kinds = {outcome[0] for outcome in tf_outcomes.values()}
    assert kinds == {"keys", "error"}
    for name, outcome in tf_outcomes.items():
        if outcome[0] == "error" and name not in DIFFERENCES:
            assert outcome[3], name


@pytest.mark.parametrize(
    "name",
    [
        "list_appended_through_wrapper",
        "list_nested_inner_edited_through_wrapper",
        "dict_set_through_wrapper",
        "tuple_operations",
        "namedtuple_fields",
        "list_imul",
        "dict_overwrite_trackable",
    ],
)
def test_tf_restores_what_trackpoint_saved_from_the_same_script(name: str) -> None:
    """Both directions of a scenario that saves: TF's objects restore trackpoint's file with assert_consumed()."""
    with tempfile.TemporaryDirectory() as tmp:
        ours = rules.SCENARIOS[name](rules.Lib("tp"))
        path = tp.Checkpoint(root=ours).write(os.path.join(tmp, "ckpt"))
        # TF's objects of the same script read it with assert_consumed() and write their own checkpoint.
        back = tf_containers.restore_and_write_back(name, path, os.path.join(tmp, "back"))
        tp.Checkpoint(root=rules.SCENARIOS[name](rules.Lib("tp"))).read(back).assert_consumed()
