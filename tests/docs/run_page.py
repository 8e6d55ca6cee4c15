"""Run the code blocks of one documentation page, in order, as a reader following it would.

    python tests/docs/run_page.py docs/guides/pytorch.md     # in an empty working directory

The blocks of a page share one Python namespace and one working directory (the current one), so
a later block may use what an earlier one made, and a shell block may read the files a Python
block wrote. What runs:

- ``python`` blocks are executed; a traceback names the page and its line.
- ``sh`` blocks run in ``bash -euo pipefail`` (``trackpoint`` and ``python`` are this
  interpreter's).
- A comment on the line before a block changes that:
    ``<!-- docs: file NAME -->``  the block is written to the file NAME instead (a script a
                                   later shell block starts, in several processes, say);
    ``<!-- docs: needs s3 -->``    the block needs an S3 endpoint: only the test that provides
                                   one runs its page (``tests/storage/test_docs_s3.py``);
    ``<!-- docs: not run: WHY -->`` the block is not run here, and WHY says who runs it.

Other blocks (``text``, ``json``, ...) are output or data, not code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

RUN = ("python", "sh")
_FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
_MARK = re.compile(r"^<!-- docs: (?P<what>.+?) -->$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, first line of code (1-based), code and marker."""

    lang: str
    line: int
    code: str
    mark: str  # the text of the <!-- docs: ... --> comment just before it, or ""

    @property
    def needs(self) -> str | None:
        return self.mark.split()[1] if self.mark.startswith("needs ") else None

    @property
    def runs(self) -> bool:
        return self.lang in RUN and not self.mark.startswith("not run")


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, at the top level (fences are not indented in these docs)."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.match(before.strip())
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        if end is None:
            raise SystemExit(f"{page}:{i + 1}: a code block that is never closed")
        code = "\n".join(lines[i + 1 : end])
        found.append(Block(opened["lang"] or "", i + 2, code, mark["what"] if mark else ""))
        i = end + 1
    return found


def main(page: Path) -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    for block in blocks(page):
        if block.mark.startswith("file "):
            Path(block.mark.split(maxsplit=1)[1]).write_text(block.code + "\n", encoding="utf-8")
            continue
        if not block.runs:
            continue
        print(f"--- {page}:{block.line} ({block.lang})", flush=True)
        if block.lang == "python":
            # Padded so that a traceback's line numbers are the page's own.
            exec(compile("\n" * (block.line - 1) + block.code, str(page), "exec"), namespace)  # noqa: S102
        else:
            subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], check=True, env=env)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
