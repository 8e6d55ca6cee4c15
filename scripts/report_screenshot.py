"""Make the documentation's picture of a ``trackpoint report`` page (``docs/images/report.png``).

    python scripts/report_screenshot.py [CHECKPOINT]

CHECKPOINT defaults to a Keras 2 checkpoint of the project's collection of real ones
(``../shared/data/real/tf2-ilmif-hotel-cp``). The page is opened in Debian's headless Chromium
(Selenium), one layer expanded and its embedding selected, and the window saved as PNG.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from trackpoint.cli import main as trackpoint

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "real" / "tf2-ilmif-hotel-cp"


def _row(driver: webdriver.Chrome, path: str) -> object:
    return driver.execute_script(
        "return [...document.querySelectorAll('.tree-row')].find(r => r.dataset.path === arguments[0])", path
    )


def main() -> None:
    checkpoint = Path(sys.argv[1] if len(sys.argv) > 1 else REAL).resolve()
    os.chdir(checkpoint.parent)  # the page names the checkpoint as given: a short relative path
    with tempfile.TemporaryDirectory() as work:
        page = Path(work) / "report.html"
        if trackpoint(["report", checkpoint.name, "-o", str(page)]) != 0:
            sys.exit(1)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={work}/profile",
            "--window-size=1400,900",
            "--hide-scrollbars",
        ):
            options.add_argument(arg)
        driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        try:
            driver.get(page.as_uri())
            WebDriverWait(driver, 10).until(lambda d: d.execute_script("return document.body.dataset.ready") == "true")
            layer = _row(driver, "layer_with_weights-1")
            driver.execute_script("arguments[0].click()", layer.find_element(By.CSS_SELECTOR, ".toggle"))  # type: ignore[attr-defined]
            embeddings = _row(driver, "layer_with_weights-1/embeddings")
            driver.execute_script("arguments[0].click()", embeddings.find_element(By.CSS_SELECTOR, ".toggle"))  # type: ignore[attr-defined]
            embeddings.click()  # type: ignore[attr-defined]
            target = ROOT / "docs" / "images" / "report.png"
            driver.save_screenshot(str(target))
            print(f"wrote {target}")
        finally:
            driver.quit()


if __name__ == "__main__":
    main()
