"""Train a small torch model, checkpoint it with trackpoint, "crash", resume in fresh objects, and check
that the resumed run ends with exactly the parameters of an uninterrupted one.

Run: ``python examples/torch_resume.py [DIRECTORY]`` (needs ``pip install "trackpoint[torch]"``).
"""

from __future__ import annotations

import sys
import tempfile

import torch

import trackpoint as tp
import trackpoint.torch as tpt


def make() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)


def train(model, optimizer, scheduler, steps: int) -> None:
    for _ in range(steps):
        x = torch.randn(64, 8)  # drawn from torch's generator, which the checkpoint keeps too
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()


def run(directory: str) -> bool:
    torch.manual_seed(0)
    model, optimizer, scheduler = make()
    ckpt = tpt.Checkpoint(model=model, optimizer=optimizer, scheduler=scheduler, rng=tpt.RNGState())
    manager = tp.CheckpointManager(ckpt, directory, max_to_keep=2)
    train(model, optimizer, scheduler, 25)
    saved = manager.save()
    train(model, optimizer, scheduler, 25)  # the uninterrupted run goes on
    print(f"saved {saved}; the uninterrupted run trained 25 more steps")

    torch.manual_seed(123)  # a new process: other weights, other random numbers
    model2, optimizer2, scheduler2 = make()
    ckpt2 = tpt.Checkpoint(model=model2, optimizer=optimizer2, scheduler=scheduler2, rng=tpt.RNGState())
    ckpt2.restore(tp.latest_checkpoint(directory)).assert_consumed()
    train(model2, optimizer2, scheduler2, 25)
    same = all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
    print("resumed run equals the uninterrupted one bit for bit:", same)
    return same


if __name__ == "__main__":
    sys.exit(0 if run(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()) else 1)
