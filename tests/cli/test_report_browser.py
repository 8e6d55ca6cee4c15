"""The ``trackpoint report`` page in a real browser: headless Chromium driven by Selenium.

The pages are rendered from hand-made data that follows the report's schema (a small tree with
slots, a string tensor and a diff; a hostile key; 20,000 tensors), written to files and loaded
from ``file://`` URLs with the network emulated offline. Each test loads a page of its own into one
browser that the module shares.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("selenium")

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from trackpoint.cli._report_page import render

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
        reason=f"needs Debian's chromium and chromedriver ({CHROMIUM}, {CHROMEDRIVER})",
    ),
]

ATTRS = "/.ATTRIBUTES/VARIABLE_VALUE"
SLOT = "/.OPTIMIZER_SLOT/optimizer/"
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&</script>\x1b[31m\u202eevil"
HOSTILE_SHOWN = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&</script>\\x1b[31m\\u202eevil"


# ---- data as trackpoint.tools.report makes it (see notes/report_schema.md)


def _stats(dtype: str, shape: list[int], counts: list[int] | None, mean: float | None = 0.5) -> dict[str, Any]:
    params = 1
    for d in shape:
        params *= d
    numeric = counts is not None
    return {
        "dtype": dtype,
        "shape": shape,
        "bytes": params * 4,
        "params": params if numeric else 0,
        "mean": mean if numeric else None,
        "std": 0.25 if numeric else None,
        "min": -1.5 if numeric else None,
        "max": 2.0 if numeric else None,
        "zeros": 0.125 if numeric else None,
        "nan": 0,
        "inf": 0,
        "hist": {"lo": -1.5, "hi": 2.0, "counts": counts} if numeric else None,
    }


def _leaf(
    name: str, path: str, key: str, kind: str, stats: dict[str, Any], slots: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    slots = slots or []
    node = {
        "name": name,
        "path": path,
        "kind": kind,
        "key": key,
        "dtype": stats["dtype"],
        "shape": stats["shape"],
        "bytes": stats["bytes"],
        "params": stats["params"],
        "children": list(slots),
    }
    node["bytes"] += sum(s["bytes"] for s in slots)
    node["params"] += sum(s["params"] for s in slots)
    return node


def _object(name: str, path: str, children: list[dict[str, Any]], kind: str = "object") -> dict[str, Any]:
    return {
        "name": name,
        "path": path,
        "kind": kind,
        "key": None,
        "dtype": None,
        "shape": None,
        "bytes": sum(c["bytes"] for c in children),
        "params": sum(c["params"] for c in children),
        "children": children,
    }


def _variable(
    tensors: dict[str, dict[str, Any]],
    path: str,
    shape: list[int],
    counts: list[int] | None,
    slots: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A variable at ``path`` (names joined by "/"), its stats in ``tensors``, with optimizer slots."""
    key = path + ATTRS
    tensors[key] = _stats("float32" if counts is not None else "string", shape, counts)
    slot_nodes = []
    for slot in slots:
        slot_key = path + SLOT + slot + ATTRS
        tensors[slot_key] = _stats("float32", shape, [1] * (len(counts or []) + 1), mean=0.0)
        slot_nodes.append(_leaf("optimizer." + slot, path + "/optimizer." + slot, slot_key, "slot", tensors[slot_key]))
    return _leaf(path.rsplit("/", 1)[-1], path, key, "variable", tensors[key], slot_nodes)


def _page_data(hostile: str | None = None) -> dict[str, Any]:
    """Two inputs: model/dense (kernel with slots m and v, bias), model/embedding/table, step, vocab (strings)."""
    tensors: dict[str, dict[str, Any]] = {}
    kernel = _variable(tensors, "model/dense/kernel", [4, 3], [1, 3, 5, 0, 2, 1], slots=("m", "v"))
    bias = _variable(tensors, "model/dense/bias", [3], [3, 0, 0])
    table = _variable(tensors, "model/embedding/table", [10, 2], [2, 4, 8, 4, 1, 1])
    dense = _object("dense", "model/dense", [kernel, bias])
    embedding = _object("embedding", "model/embedding", [table], kind="group")
    top = [_object("model", "model", [dense, embedding]), _variable(tensors, "step", [], [1])]
    top.append(_variable(tensors, "vocab", [5], None))
    # JSON has no NaN or infinity: render() writes them as strings, the page shows them.
    tensors["step" + ATTRS].update(mean=float("nan"), max=float("inf"), nan=1, inf=2)
    if hostile is not None:
        top.append(_object(hostile, hostile, [_variable(tensors, hostile + "/" + hostile, [2], [1, 1])]))
    tree = _object("(root)", "", top)
    keys = sorted(tensors)
    changed = [
        {"key": k, "dtype": tensors[k]["dtype"], "shape": tensors[k]["shape"], "rel_l2": None, "cosine": None}
        for k in keys
        if k not in ("model/embedding/table" + ATTRS, "step" + ATTRS)  # renamed, added
    ]
    # max_abs values that sort differently as numbers (2 < 10) than as text ("10" < "2").
    for i, entry in enumerate(changed):
        numeric = entry["dtype"] != "string"
        entry["rel_l2"] = (0.5 / (i + 1)) if numeric else None
        entry["cosine"] = (1.0 - 0.01 * i) if numeric else None
        entry["max_abs"] = float([2, 10, 0.5, 30, 7, 100, 3, 4, 5, 6][i % 10]) if numeric else None
    changed.sort(key=lambda c: (c["rel_l2"] is None, -(c["rel_l2"] or 0)))
    layers = [
        {"name": "model/dense/kernel", "rel_l2": 0.3, "tensors": 3},
        {"name": "model/dense", "rel_l2": 1e-5, "tensors": 1},
        {"name": "model/embedding", "rel_l2": 0.0, "tensors": 1},
        {"name": "step", "rel_l2": 2.0, "tensors": 1},
        {"name": "vocab", "rel_l2": None, "tensors": 1},
    ]
    removed = ["old/unused" + ATTRS]
    renamed = [["model/emb/table" + ATTRS, "model/embedding/table" + ATTRS]]
    if hostile is not None:
        layers.append({"name": hostile, "rel_l2": 0.1, "tensors": 1})
        removed.append(hostile + ATTRS)
        renamed.append([hostile, hostile + "2"])
    total = sum(t["bytes"] for t in tensors.values())
    params = sum(t["params"] for t in tensors.values())
    return {
        "title": "trackpoint report: run/ckpt-2 vs run/ckpt-3" + ("" if hostile is None else " " + hostile),
        "generated": "trackpoint 0.1.0",
        "inputs": [
            {"path": "run/ckpt-2", "kind": "tf", "tensors": len(tensors), "bytes": total, "params": params},
            {
                "path": "run/ckpt-3" + (hostile or ""),
                "kind": "tf",
                "tensors": len(tensors),
                "bytes": total,
                "params": params,
            },
        ],
        "tree": tree,
        "tensors": tensors,
        "diff": {
            "added": ["step" + ATTRS],
            "removed": removed,
            "renamed": renamed,
            "changed": changed,
            "layers": layers,
        },
    }


def _big_data(objects: int = 200, per_object: int = 100) -> dict[str, Any]:
    """20,000 variables in 200 objects, every one changed."""
    tensors: dict[str, dict[str, Any]] = {}
    children = []
    counts = [1, 2, 4, 8, 16, 8, 4, 2, 1, 0, 1, 2, 3, 2, 1, 1]
    for o in range(objects):
        layer = f"layer_{o:03d}"
        variables = [_variable(tensors, f"{layer}/w_{v:03d}", [8, 8], counts) for v in range(per_object)]
        children.append(_object(layer, layer, variables))
    changed = [
        {"key": k, "dtype": "float32", "shape": [8, 8], "rel_l2": (i % 97) / 1000, "cosine": 0.9, "max_abs": 0.1}
        for i, k in enumerate(sorted(tensors))
    ]
    changed.sort(key=lambda c: -c["rel_l2"])
    layers = [
        {"name": f"layer_{o:03d}", "rel_l2": 10 ** (-6 + 6 * o / objects), "tensors": per_object}
        for o in range(objects)
    ]
    total = sum(t["bytes"] for t in tensors.values())
    info = {"path": "big", "kind": "safetensors", "tensors": len(tensors), "bytes": total, "params": total // 4}
    return {
        "title": "trackpoint report: big",
        "generated": "trackpoint 0.1.0",
        "inputs": [info, dict(info, path="big2")],
        "tree": _object("(root)", "", children),
        "tensors": tensors,
        "diff": {"added": [], "removed": [], "renamed": [], "changed": changed, "layers": layers},
    }


# ---- the browser


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        browser.execute_cdp_cmd("Network.enable", {})
        browser.execute_cdp_cmd(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
        )
        yield browser
    finally:
        browser.quit()


def _load(driver: webdriver.Chrome, tmp_path: Path, data: dict[str, Any]) -> Path:
    """Render ``data``, load the file, wait for the page's script to finish; the console log starts empty."""
    page = tmp_path / "report.html"
    page.write_text(render(data), encoding="utf-8")
    driver.get_log("browser")  # what earlier pages logged
    driver.get(page.as_uri())
    WebDriverWait(driver, 10, poll_frequency=0.05).until(
        lambda d: d.execute_script("return document.body.dataset.ready") == "true"
    )
    return page


def _row(driver: webdriver.Chrome, path: str) -> WebElement:
    return driver.execute_script(
        "return [...document.querySelectorAll('.tree-row')].find(r => r.dataset.path === arguments[0]) || null", path
    )


def _visible_paths(driver: webdriver.Chrome) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('.tree-row')].filter(r => r.offsetParent !== null)"
        ".map(r => r.dataset.path)"
    )


def _search(driver: webdriver.Chrome, text: str) -> None:
    box = driver.find_element(By.ID, "search")
    box.clear()
    if text:
        box.send_keys(text)
    else:  # clear() sends no input event
        driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", box)
    WebDriverWait(driver, 10, poll_frequency=0.05).until(lambda d: box.get_attribute("data-applied") == text)


def _table_keys(driver: webdriver.Chrome) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#diff-table tbody tr')].map(r => r.dataset.key)"
    )


def _severe(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


# ---- the tests


def test_loads_offline_without_errors_or_requests(driver, tmp_path) -> None:
    _load(driver, tmp_path, _page_data())
    assert _severe(driver) == []
    assert driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)") == []
    assert driver.title == "trackpoint report: run/ckpt-2 vs run/ckpt-3"
    header = driver.find_element(By.ID, "inputs").text
    assert "run/ckpt-2" in header and "run/ckpt-3" in header and "tf" in header
    # The root and its children are rows from the start; deeper levels are not built yet.
    assert _visible_paths(driver) == ["", "model", "step", "vocab"]
    assert _row(driver, "model/dense") is None
    strip = driver.find_elements(By.CSS_SELECTOR, "#change-strip .strip-cell")
    assert [cell.get_attribute("title") for cell in strip] == [
        "model/dense/kernel: relative L2 0.3 (3 tensors)",
        "model/dense: relative L2 1e-5 (1 tensors)",
        "model/embedding: relative L2 0 (1 tensors)",
        "step: relative L2 2 (1 tensors)",
        "vocab: relative L2 \u2014 (1 tensors)",
    ]
    colours = [cell.value_of_css_property("background-color") for cell in strip[:4]]
    assert len(set(colours)) == 4  # change per layer: distinct colours for distinct magnitudes


def test_the_tree_expands_and_collapses(driver, tmp_path) -> None:
    data = _page_data()
    data.update(inputs=data["inputs"][1:], diff=None)  # one input: no diff
    _load(driver, tmp_path, data)
    assert not driver.find_element(By.ID, "diff").is_displayed()
    model = _row(driver, "model")
    model.find_element(By.CSS_SELECTOR, ".toggle").click()
    dense = _row(driver, "model/dense")
    assert dense.is_displayed() and _row(driver, "model/dense/kernel") is None
    dense.find_element(By.CSS_SELECTOR, ".toggle").click()
    kernel = _row(driver, "model/dense/kernel")
    assert kernel.is_displayed()
    assert kernel.find_element(By.CSS_SELECTOR, ".params").text == str(12 * 3)  # its own and its two slots'
    kernel.find_element(By.CSS_SELECTOR, ".toggle").click()
    slot = _row(driver, "model/dense/kernel/optimizer.m")
    assert slot.is_displayed() and slot.get_attribute("data-kind") == "slot"
    model.find_element(By.CSS_SELECTOR, ".toggle").click()
    assert not dense.is_displayed() and not kernel.is_displayed() and not slot.is_displayed()
    assert model.find_element(By.CSS_SELECTOR, ".toggle").get_attribute("aria-expanded") == "false"
    model.find_element(By.CSS_SELECTOR, ".toggle").click()
    assert dense.is_displayed() and kernel.is_displayed()  # the subtree keeps its own state
    assert _severe(driver) == []


def test_clicking_a_variable_shows_its_stats_and_histogram(driver, tmp_path) -> None:
    data = _page_data()
    _load(driver, tmp_path, data)
    _search(driver, "kernel")  # opens model/dense/kernel's ancestors
    _row(driver, "model/dense/kernel").click()
    stats = driver.find_element(By.ID, "stats")
    assert stats.get_attribute("data-key") == "model/dense/kernel" + ATTRS
    values = {dd.get_attribute("data-stat"): dd.text for dd in stats.find_elements(By.CSS_SELECTOR, "dd")}
    assert values["mean"] == "0.5" and values["std"] == "0.25" and values["min"] == "-1.5" and values["max"] == "2"
    assert values["zeros"] == "12.5 %" and values["nan"] == "0" and values["inf"] == "0"
    assert values["shape"] == "[4,3]" and values["rel_l2"] != "\u2014"
    bars = stats.find_elements(By.CSS_SELECTOR, "svg rect")
    assert [int(bar.get_attribute("data-count")) for bar in bars] == [1, 3, 5, 0, 2, 1]
    heights = [float(bar.get_attribute("height")) for bar in bars]  # in proportion to the counts
    assert heights == pytest.approx([h * heights[2] / 5 for h in (1, 3, 5, 0, 2, 1)]) and heights[2] > 50
    assert stats.find_element(By.ID, "hist-lo").text == "-1.5" and stats.find_element(By.ID, "hist-hi").text == "2"
    # A slot: its own stats, seven bars.
    _row(driver, "model/dense/kernel/optimizer.m").click()
    assert stats.get_attribute("data-key") == "model/dense/kernel" + SLOT + "m" + ATTRS
    assert len(stats.find_elements(By.CSS_SELECTOR, "svg rect")) == 7
    # A string tensor: no numbers, no histogram.
    _search(driver, "")
    _row(driver, "vocab").click()
    assert stats.find_element(By.CSS_SELECTOR, "dd[data-stat=mean]").text == "\u2014"
    assert stats.find_elements(By.CSS_SELECTOR, "svg rect") == []
    # NaN and infinities.
    _row(driver, "step").click()
    values = {dd.get_attribute("data-stat"): dd for dd in stats.find_elements(By.CSS_SELECTOR, "dd")}
    assert values["mean"].text == "nan" and values["max"].text == "inf" and values["min"].text == "-1.5"
    assert values["nan"].text == "1" and values["inf"].text == "2" and "warn" in values["inf"].get_attribute("class")
    assert values["change"].text == "added (not in the old input)"
    assert _severe(driver) == []


def test_the_search_filters_the_tree_and_the_diff(driver, tmp_path) -> None:
    _load(driver, tmp_path, _page_data())
    _row(driver, "model").find_element(By.CSS_SELECTOR, ".toggle").click()
    before = _visible_paths(driver)
    assert before == ["", "model", "model/dense", "model/embedding", "step", "vocab"]
    _search(driver, "KERNEL")
    assert _visible_paths(driver) == [
        "",
        "model",
        "model/dense",
        "model/dense/kernel",
        "model/dense/kernel/optimizer.m",
        "model/dense/kernel/optimizer.v",
    ]
    assert sorted(_table_keys(driver)) == sorted(
        [
            "model/dense/kernel" + ATTRS,
            "model/dense/kernel" + SLOT + "m" + ATTRS,
            "model/dense/kernel" + SLOT + "v" + ATTRS,
        ]
    )
    # A key matches too (the slot's key has .OPTIMIZER_SLOT, its path does not).
    _search(driver, "optimizer_slot/optimizer/v")
    assert _visible_paths(driver) == [
        "",
        "model",
        "model/dense",
        "model/dense/kernel",
        "model/dense/kernel/optimizer.v",
    ]
    assert _table_keys(driver) == ["model/dense/kernel" + SLOT + "v" + ATTRS]
    _search(driver, "no such thing")
    assert _visible_paths(driver) == [] and _table_keys(driver) == []
    assert driver.find_element(By.ID, "no-match").is_displayed()
    _search(driver, "")
    assert _visible_paths(driver) == before  # as it was: model open, what the search opened closed again
    assert len(_table_keys(driver)) == 5
    # The search built kernel's row alone; opening dense builds bias after it.
    _row(driver, "model/dense").find_element(By.CSS_SELECTOR, ".toggle").click()
    assert _visible_paths(driver)[2:5] == ["model/dense", "model/dense/kernel", "model/dense/bias"]
    assert _severe(driver) == []


def test_the_diff_table_sorts_by_a_clicked_column(driver, tmp_path) -> None:
    data = _page_data()
    _load(driver, tmp_path, data)
    changed = data["diff"]["changed"]

    def column(name: str) -> tuple[list[str], list[str]]:
        return driver.execute_script(
            "return [...document.querySelectorAll('#diff-table tbody tr')].map(r => r.dataset.key)"
        ), [td.text for td in driver.find_elements(By.CSS_SELECTOR, f"#diff-table td[data-col={name}]")]

    def header(name: str) -> WebElement:
        return driver.find_element(By.CSS_SELECTOR, f"#diff-table th[data-col={name}]")

    numeric = [c for c in changed if c["rel_l2"] is not None]
    strings = [c["key"] for c in changed if c["rel_l2"] is None]
    by_rel = sorted(numeric, key=lambda c: c["rel_l2"])
    keys, _ = column("rel_l2")
    assert keys == [c["key"] for c in reversed(by_rel)] + strings  # initially: rel_l2 descending, nulls last
    assert header("rel_l2").get_attribute("aria-sort") == "descending"
    header("rel_l2").click()
    assert column("rel_l2")[0] == [c["key"] for c in by_rel] + strings  # ascending, nulls still last
    header("max_abs").click()
    keys, texts = column("max_abs")
    by_max = sorted(numeric, key=lambda c: c["max_abs"])
    assert keys == [c["key"] for c in by_max] + strings  # as numbers: 0.5, 2, 10, 30, not "10" < "2"
    assert texts[-1] == "\u2014" and header("max_abs").get_attribute("aria-sort") == "ascending"
    header("max_abs").click()
    assert column("max_abs")[0] == [c["key"] for c in reversed(by_max)] + strings
    assert header("max_abs").get_attribute("aria-sort") == "descending"
    header("key").click()
    assert column("key")[0] == sorted(c["key"] for c in changed)
    header("key").click()
    assert column("key")[0] == sorted((c["key"] for c in changed), reverse=True)
    assert _severe(driver) == []


def test_a_hostile_key_is_shown_as_text(driver, tmp_path) -> None:
    # Before the page's own script: alert() records instead of blocking.
    hook = driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {"source": "window.__alerts = []; window.alert = (m) => { window.__alerts.push(String(m)); };"},
    )
    try:
        page = _load(driver, tmp_path, _page_data(hostile=HOSTILE))
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", hook)
    source = page.read_text(encoding="utf-8")
    assert source.count("<script") == 2 and source.count("</script>") == 2  # the data ends no element
    try:
        driver.switch_to.alert.dismiss()
        alerted = True
    except NoAlertPresentException:
        alerted = False
    assert not alerted and driver.execute_script("return window.__alerts") == []
    assert driver.execute_script("return document.querySelectorAll('script').length") == 2
    assert driver.execute_script("return document.querySelectorAll('img, b, iframe, object, embed').length") == 0
    _search(driver, "evil")
    _row(driver, HOSTILE + "/" + HOSTILE).click()
    text = driver.find_element(By.TAG_NAME, "body").text
    assert HOSTILE_SHOWN in driver.title
    assert text.count(HOSTILE_SHOWN) >= 6  # the header, tree rows, stats, the table, lists
    assert "\x1b" not in text and "\u202e" not in text
    assert driver.find_element(By.ID, "stats").get_attribute("data-key") == HOSTILE + "/" + HOSTILE + ATTRS
    strip = driver.find_elements(By.CSS_SELECTOR, "#change-strip .strip-cell")
    assert strip[-1].get_attribute("title") == HOSTILE_SHOWN + ": relative L2 0.1 (1 tensors)"
    assert driver.execute_script("return document.querySelectorAll('script').length") == 2
    assert driver.execute_script("return window.__alerts") == []
    assert _severe(driver) == []


def test_twenty_thousand_tensors_load_and_search(driver, tmp_path) -> None:
    data = _big_data()
    assert len(data["tensors"]) == 20_000
    page = tmp_path / "big.html"
    page.write_text(render(data), encoding="utf-8")
    driver.get_log("browser")
    start = time.monotonic()
    driver.get(page.as_uri())
    WebDriverWait(driver, 30, poll_frequency=0.05).until(
        lambda d: d.execute_script("return document.body.dataset.ready") == "true"
    )
    loaded = time.monotonic() - start
    assert loaded < 10, f"the page took {loaded:.1f} s to load"
    assert driver.execute_script("return document.querySelectorAll('.tree-row').length") == 201  # root + objects
    assert driver.execute_script("return document.querySelectorAll('#diff-table tbody tr').length") == 500
    assert len(driver.find_elements(By.CSS_SELECTOR, "#change-strip .strip-cell")) == 200
    start = time.monotonic()
    _search(driver, "layer_137/w_042")
    searched = time.monotonic() - start
    assert _visible_paths(driver) == ["", "layer_137", "layer_137/w_042"]
    assert _table_keys(driver) == ["layer_137/w_042" + ATTRS]
    assert searched < 5, f"the search took {searched:.1f} s"
    _row(driver, "layer_137/w_042").click()
    assert len(driver.find_elements(By.CSS_SELECTOR, "#stats svg rect")) == 16
    # 2,000 matches in every object: only their rows are built, not their 18,000 siblings'.
    start = time.monotonic()
    _search(driver, "w_00")
    searched = time.monotonic() - start
    assert len(_visible_paths(driver)) == 1 + 200 + 200 * 10
    assert driver.execute_script("return document.querySelectorAll('.tree-row').length") == 1 + 200 + 200 * 10 + 1
    assert searched < 5, f"the search took {searched:.1f} s"
    # Every variable matches: the first 2,000 show, the count says so.
    _search(driver, "W_")
    assert len(_visible_paths(driver)) == 1 + 20 + 2000
    assert driver.find_element(By.ID, "search-status").text.startswith("20,000 matching rows; showing the first 2,000")
    _search(driver, "")
    assert len(_visible_paths(driver)) == 201
    assert _severe(driver) == []


REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "real" / "tf2-ilmif-hotel-cp"


def _open_command_page(driver: webdriver.Chrome, page: Path) -> None:
    driver.get_log("browser")
    driver.get(page.as_uri())
    WebDriverWait(driver, 10, poll_frequency=0.05).until(
        lambda d: d.execute_script("return document.body.dataset.ready") == "true"
    )


@pytest.mark.skipif(not REAL.is_dir(), reason=f"the real checkpoints are not here ({REAL})")
def test_the_command_s_page_of_a_real_keras_checkpoint(driver, tmp_path) -> None:
    """End to end: ``trackpoint report`` of a checkpoint Keras 2 wrote, opened and clicked through."""
    from trackpoint.cli import main

    page = tmp_path / "real.html"
    assert main(["report", str(REAL), "-o", str(page)]) == 0
    _open_command_page(driver, page)
    assert _severe(driver) == []
    driver.execute_script(
        "arguments[0].click()", _row(driver, "layer_with_weights-1").find_element(By.CSS_SELECTOR, ".toggle")
    )
    embeddings = _row(driver, "layer_with_weights-1/embeddings")  # an Embedding, trained with RMSprop
    assert embeddings is not None
    driver.execute_script("arguments[0].click()", embeddings.find_element(By.CSS_SELECTOR, ".toggle"))
    slots = [p for p in _visible_paths(driver) if p.startswith("layer_with_weights-1/embeddings/")]
    assert slots == ["layer_with_weights-1/embeddings/optimizer/rms"]
    embeddings.click()
    bars = driver.find_elements(By.CSS_SELECTOR, "#stats svg rect.bar")
    assert len(bars) > 1
    from trackpoint.tools._report_stats import sample_step

    step = sample_step(15_052 * 16)  # an eighth of them
    assert sum(int(bar.get_attribute("data-count")) for bar in bars) == -(-15_052 * 16 // step)
    assert _severe(driver) == []


def test_a_large_tensor_s_histogram_says_it_is_of_a_sample(driver, tmp_path) -> None:
    import numpy as np

    import trackpoint as tp
    from trackpoint.cli import main

    path = tp.save_tensors(str(tmp_path / "ckpt"), {"big": np.arange(3 << 20, dtype=np.float32)})
    page = tmp_path / "big.html"
    assert main(["report", path, "-o", str(page)]) == 0
    _open_command_page(driver, page)
    _row(driver, "big").click()
    text = driver.find_element(By.ID, "stats").text
    assert "Histogram of 65,536 of its 3,145,728 finite values" in text  # every 48th: sample_step
    assert _severe(driver) == []
