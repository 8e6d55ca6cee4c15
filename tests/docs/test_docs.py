"""The documentation site builds strictly, and every code block in it (and in the README) runs.

Each page runs in a process of its own, in an empty directory (``run_page.py``); pages whose
blocks need an S3 endpoint run in ``tests/storage/test_docs_s3.py``, which provides one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.run_page import RUN, blocks

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
DATA = ("text", "json", "toml", "yaml", "")  # output and data shown, not code


def needs(page: Path) -> set[str]:
    return {b.needs for b in blocks(page) if b.needs}


def run_page(page: Path, cwd: Path, timeout: float = 600) -> None:
    """Run ``page``'s blocks in ``cwd``; fail with what it printed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "docs" / "run_page.py"), str(page)],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == 0, f"{page.relative_to(ROOT)}:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if not needs(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_code_blocks_of_a_page_run(page: Path, tmp_path: Path) -> None:
    run_page(page, tmp_path)


def test_every_code_block_runs_or_says_who_runs_it() -> None:
    for page in PAGES:
        for block in blocks(page):
            where = f"{page.relative_to(ROOT)}:{block.line}"
            assert block.lang in RUN or block.lang in DATA, f"{where}: a {block.lang} block the suite cannot run"
            if block.lang in RUN and block.mark.startswith("not run"):
                assert len(block.mark.split(":", 1)[-1].strip()) > 10, f"{where}: say why the block is not run"
            if block.needs:
                assert block.needs == "s3", f"{where}: only s3 is provided (tests/storage/test_docs_s3.py)"


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link, a missing page or a docstring the API reference
    cannot render fails the build."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "checkpoint" / "index.html").is_file()
