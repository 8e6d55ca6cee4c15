"""One checkpoint node under two names (a tied weight, a module under two attributes) reaches
every live object at those names, whether the live model shares it or not (issue 38)."""

from __future__ import annotations

import pytest
import torch

import trackpoint as tp
import trackpoint.torch as tpt


class Tied(torch.nn.Module):
    """``head.weight`` is ``embed.weight`` when ``tie``; two parameters of one shape when not."""

    def __init__(self, tie: bool, vocab: int = 5, width: int = 3) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        if tie:
            self.head.weight = self.embed.weight


class Twice(torch.nn.Module):
    """One ``Linear`` under the names ``a`` and ``b`` when ``share``; two of them when not."""

    def __init__(self, share: bool) -> None:
        super().__init__()
        self.a = torch.nn.Linear(3, 2)
        self.b = self.a if share else torch.nn.Linear(3, 2)


def _randomize(module: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in module.parameters():
            tensor.copy_(torch.randn(tensor.shape, generator=generator))


# Small weights are read in batches; a weight of 1 MiB or more straight into its memory.
SIZES = pytest.mark.parametrize("size", [(5, 3), (640, 512)], ids=["small", "in-place"])


@SIZES
def test_load_state_dict_gives_a_tied_checkpoints_weight_to_both_untied_names(tmp_path, size) -> None:
    source = Tied(True, *size)
    _randomize(source, 1)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = Tied(False, *size)
    assert tpt.load_state_dict(target, path) == tpt.IncompatibleKeys([], [], [])
    assert torch.equal(target.embed.weight, source.embed.weight)
    assert torch.equal(target.head.weight, source.embed.weight)
    assert target.head.weight is not target.embed.weight  # left untied: each took the value


@SIZES
def test_a_checkpoint_restore_gives_a_tied_weight_to_both_untied_names(tmp_path, size) -> None:
    source = Tied(True, *size)
    _randomize(source, 2)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = Tied(False, *size)
    status = tpt.Checkpoint(model=target).read(path)
    assert torch.equal(target.embed.weight, source.embed.weight)
    assert torch.equal(target.head.weight, source.embed.weight)
    _assert_split(status, {"(root).model.head.weight": "(root).model.embed.weight"})


def _assert_split(status: tp.CheckpointLoadStatus, split: dict[str, str]) -> None:
    """The report names each live object that took the values of a node bound to another, and
    nothing as missing; the assertions fail naming them, as TF's fail on one object split in two."""
    report = status.report()
    assert dict(report.split) == split and report.missing_from_checkpoint == () and not report.complete
    for assertion in (status.assert_existing_objects_matched, status.assert_consumed):
        with pytest.raises(AssertionError, match=r"took the values of a checkpoint object bound to another") as caught:
            assertion()
        assert all(f"{live} took {stored}" in str(caught.value) for live, stored in split.items())


def test_an_untied_weight_created_after_the_restore_takes_the_tied_value(tmp_path) -> None:
    source = Tied(True)
    _randomize(source, 3)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = torch.nn.Module()
    target.embed = torch.nn.Embedding(5, 3)
    status = tpt.Checkpoint(model=target).read(path)
    target.head = torch.nn.Linear(3, 5, bias=False)  # registered: restore-on-create
    assert torch.equal(target.head.weight, source.embed.weight)
    assert torch.equal(target.embed.weight, source.embed.weight)
    _assert_split(status, {"(root).model.head.weight": "(root).model.embed.weight"})


def test_a_module_under_two_names_loads_its_own_checkpoint_strictly(tmp_path) -> None:
    model = Twice(share=True)
    _randomize(model, 4)
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    path = tpt.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    assert model.load_state_dict(model.state_dict()).missing_keys == []  # as torch matches every key
    _randomize(model, 5)
    assert tpt.load_state_dict(model, path, strict=True) == tpt.IncompatibleKeys([], [], [])
    for key, value in model.state_dict().items():
        assert torch.equal(value, saved[key]), key


def test_a_module_saved_under_two_names_loads_into_two_modules(tmp_path) -> None:
    source = Twice(share=True)
    _randomize(source, 6)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = Twice(share=False)
    assert tpt.load_state_dict(target, path, strict=True) == tpt.IncompatibleKeys([], [], [])
    again = Twice(share=False)
    status = tpt.Checkpoint(model=again).read(path)
    _assert_split(status, {f"(root).model.b.{name}": f"(root).model.a.{name}" for name in ("weight", "bias")})
    for loaded in (target, again):
        for name in ("a", "b"):
            assert torch.equal(getattr(loaded, name).weight, source.a.weight), name
            assert torch.equal(getattr(loaded, name).bias, source.a.bias), name


def test_a_second_module_created_after_the_restore_takes_the_shared_modules_values(tmp_path) -> None:
    """The node of the shared module is bound to ``b`` by the walk; ``a``, registered later, is bound then."""
    source = Twice(share=True)
    _randomize(source, 7)
    path = tpt.Checkpoint(model=source).write(str(tmp_path / "ckpt"))
    target = torch.nn.Module()
    target.b = torch.nn.Linear(3, 2)
    status = tpt.Checkpoint(model=target).read(path)
    target.a = torch.nn.Linear(3, 2)  # registered: restore-on-create of a node bound already
    assert torch.equal(target.a.weight, source.a.weight) and torch.equal(target.a.bias, source.a.bias)
    assert torch.equal(target.b.weight, source.a.weight) and torch.equal(target.b.bias, source.a.bias)
    _assert_split(status, {f"(root).model.a.{name}": f"(root).model.b.{name}" for name in ("weight", "bias")})


def test_load_state_dict_refuses_a_graph_whose_names_multiply_without_end(tmp_path) -> None:
    """Each node of a chain reachable twice from the one before: 2**40 names from 40 nodes."""
    root = tp.AutoTrackable()
    node = root
    for _ in range(40):
        child = tp.AutoTrackable()
        node.x = child
        node.y = child
        node = child
    node.w = tp.Variable(1.0)
    path = tp.Checkpoint(root).write(str(tmp_path / "ckpt"))
    with pytest.raises(tp.errors.InvalidArgumentError, match=r"by more than \d+ paths"):
        tpt.load_state_dict(torch.nn.Linear(1, 1), path, prefix="")
