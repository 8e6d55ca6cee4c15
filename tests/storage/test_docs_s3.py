"""The documentation's pages whose examples need an S3 endpoint, run against moto's server.

Their blocks say so (``<!-- docs: needs s3 -->``); ``tests/docs/test_docs.py`` runs every other
page. The examples find the endpoint and credentials in the environment, as fsspec does
(``FSSPEC_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``: the
``s3_endpoint`` fixture sets them), and write into the bucket ``my-bucket``, made empty here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.test_docs import PAGES, ROOT, needs, run_page

s3fs = pytest.importorskip("s3fs", reason="s3fs is in the test extra")

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("page", [p for p in PAGES if "s3" in needs(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_code_blocks_of_a_page_that_needs_s3_run(page: Path, s3_endpoint: str, tmp_path: Path) -> None:
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint, key="testing", secret="testing", skip_instance_cache=True)
    if fs.exists("my-bucket"):
        fs.rm("my-bucket", recursive=True)
    fs.mkdir("my-bucket")
    run_page(page, tmp_path)


def test_some_page_needs_s3() -> None:
    """The object-store guide's examples run here, not nowhere."""
    assert any("s3" in needs(p) for p in PAGES)
