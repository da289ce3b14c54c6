"""The status page in a real headless Chromium against the real service and its poll loop.

The service runs the built-in fabricsim with a silent 800G→400G downgrade on a known NIC; the
page must load with no console error (a failed request counts), colour that cable critical,
show the incident with its evidence, refresh by itself, and render the drain API's contract.
A screenshot is kept under test-artifacts/ (or $GRAYWIRE_TEST_ARTIFACTS).
"""

from __future__ import annotations

import base64
import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from graywire.detectors.findings import Finding
from graywire.fabricsim.live import serve_app
from graywire.service.app import create_app
from graywire.service.config import load_settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PORT = "gpu-0002/mlx5_3"
FAULT = f"speed_downgrade@2s+1h:{PORT}"
MARKUP_PORT = "gpu-0005/mlx5_1"
REPO = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1500",
)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _need_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        reason = (
            f"headless browser test needs {' and '.join(missing)} (apt-get install chromium chromium-driver)"
        )
        if _in_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def artifacts_dir() -> Path:
    d = Path(os.environ.get("GRAYWIRE_TEST_ARTIFACTS") or REPO / "test-artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, FastAPI, dict[str, Any]]]:
    """The service polling fabricsim every second, once the downgrade is an open incident."""
    _need_browser()
    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        poll_interval="1s",
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 2, "faults": FAULT}],
    )
    app = create_app(settings)
    with serve_app(app, _free_port()) as url:
        deadline = time.monotonic() + 20
        while True:
            items = httpx.get(
                f"{url}/api/v1/incidents", params={"status": "open", "kind": "speed_downgrade"}
            ).json()["items"]
            if items:
                break
            assert time.monotonic() < deadline, "the injected downgrade never became an incident"
            time.sleep(0.25)
        yield url, app, items[0]


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    driver.set_page_load_timeout(15)
    try:
        yield driver
    finally:
        driver.quit()


def full_page_screenshot(driver: Any, path: Path) -> None:
    """The whole page, not only the viewport (Chromium's DevTools protocol can do both)."""
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    path.write_bytes(base64.b64decode(shot["data"]))


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _text(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def markup_finding(markup: str) -> Finding:
    """An incident whose text is HTML, as a hostile or careless source could make it."""
    return Finding(
        kind="port_anomaly",
        entity=MARKUP_PORT,
        status="firing",
        time=datetime.now(UTC),
        severity="warning",
        summary=f"{MARKUP_PORT} {markup}",
        detector="status-page-test/1",
        node=MARKUP_PORT.split("/")[0],
        port=MARKUP_PORT,
        evidence={"note": markup},
    )


def add_drain_contract(app: FastAPI, node: str, incident_id: int) -> None:
    """The drain API's documented answers, for a service built without it."""

    def drains() -> list[dict[str, Any]]:
        return [
            {
                "node": node,
                "action": "drain",
                "reason": f"{PORT} negotiated 400 Gb/s, expected 800 Gb/s",
                "since": "2026-01-01T00:00:00+00:00",
                "incident_ids": [incident_id],
                "evidence_url": f"/api/v1/incidents/{incident_id}",
                "shadow": True,
            }
        ]

    def state() -> dict[str, Any]:
        breaker = {
            "tripped": True,
            "max_fraction": 0.05,
            "window_seconds": 3600,
            "recent_drains": 3,
            "cap": 3,
            "since": "2026-01-01T00:00:00+00:00",
            "message": "3 drains in the last hour reached the cap of 3",
        }
        return {"shadow": True, "circuit_breaker": breaker}

    app.add_api_route("/api/v1/drain", drains, methods=["GET"])
    app.add_api_route("/api/v1/drain/state", state, methods=["GET"])


def test_status_page_shows_the_injected_downgrade_without_console_errors(
    service: tuple[str, FastAPI, dict[str, Any]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, app, incident = service
    hostile = '<img src="x" id="injected">'
    app.state.store.apply([markup_finding(hostile)])
    browser.get(f"{url}/?refresh=2")
    wait = WebDriverWait(browser, 15, poll_frequency=0.1)
    cell_css = f'#grid .cell[data-peer="{PORT}"]'
    wait.until(lambda d: "h2" in d.find_element(By.CSS_SELECTOR, cell_css).get_attribute("class"))

    # The cable's cell is critical and says why; the incident carries its evidence.
    cell = browser.find_element(By.CSS_SELECTOR, cell_css)
    title = cell.get_attribute("title")
    assert PORT in title and "critical" in title and "below expected" in title
    row = _text(browser, f'#incidents tr[data-incident="{incident["id"]}"]')
    assert "speed_downgrade" in row and PORT in row
    assert "negotiated 400G, expected 800G" in row
    assert f"actual.{PORT}.speed_bps = 400 Gb/s" in row
    assert "expected.speed_bps = 800 Gb/s" in row
    assert "critical" in _text(browser, "#summary")
    # Text from the data stays text: the markup is shown, never parsed.
    assert f"{MARKUP_PORT} {hostile}" in _text(browser, "#incidents")
    assert f"note = {hostile}" in _text(browser, "#incidents")
    assert browser.find_elements(By.ID, "injected") == []

    capabilities = httpx.get(f"{url}/api/v1/capabilities").json()
    if not capabilities["drain"]:
        assert "Drain API unavailable" in _text(browser, "#drains")

    # Finding a port dims every other cell.
    browser.find_element(By.ID, "find").send_keys(PORT)
    wait.until(lambda d: _text(d, "#find-count") == "1 cell")
    (hit,) = browser.find_elements(By.CSS_SELECTOR, "#grid .cell.match")
    assert hit.get_attribute("data-peer") == PORT
    # A click shows both ends of the cable, read and expected.
    cell.click()
    wait.until(lambda d: "400 Gb/s (expected 800 Gb/s)" in _text(d, "#port-detail"))
    # It refreshes by itself: the poll count moves without a reload.
    before = _text(browser, "#freshness")
    wait.until(lambda d: _text(d, "#freshness") != before)

    shot = artifacts_dir() / "status-page.png"
    full_page_screenshot(browser, shot)
    assert shot.stat().st_size > 10_000
    assert console_errors(browser) == []

    if capabilities["drain"]:
        # The real drain API: every node on its list has a row, and the breaker banner follows it.
        browser.refresh()
        drain = httpx.get(f"{url}/api/v1/drain").json()
        state = httpx.get(f"{url}/api/v1/drain/state").json()
        assert any(item["node"] == incident["node"] for item in drain), drain
        for item in drain:
            wait.until(
                lambda d, n=item["node"]: d.find_elements(By.CSS_SELECTOR, f'#drains tr[data-node="{n}"]')
            )
        if state["circuit_breaker"]["tripped"]:
            assert "circuit breaker tripped" in _text(browser, "#breaker").lower()
        full_page_screenshot(browser, shot)
        assert console_errors(browser) == []
        return
    add_drain_contract(app, incident["node"], incident["id"])
    browser.refresh()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'#drains tr[data-node="{incident["node"]}"]'))
    drains = _text(browser, "#drains")
    assert "drain" in drains and "shadow" in drains and f"#{incident['id']}" in drains
    banner = _text(browser, "#breaker")
    assert "circuit breaker tripped" in banner and "reached the cap of 3" in banner
    assert "shadow mode" in _text(browser, "#drain-mode")
    assert console_errors(browser) == []


READER_TOKEN = "reader-token-0123456789abcdef"


def test_with_reads_closed_the_page_asks_for_a_reader_token_and_keeps_it_for_the_tab(
    tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _need_browser()
    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        poll_interval="1s",
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 2, "faults": FAULT}],
        auth={"read_open": False, "tokens": [{"name": "wall", "role": "reader", "token": READER_TOKEN}]},
    )
    with serve_app(create_app(settings), _free_port()) as url:
        browser.get(f"{url}/?refresh=2")
        wait = WebDriverWait(browser, 15, poll_frequency=0.1)
        form = browser.find_element(By.ID, "login")
        wait.until(lambda d: form.is_displayed())
        assert "needs a reader token" in _text(browser, "#login-why")
        # A wrong token is refused and asked for again; the right one shows the fabric.
        browser.find_element(By.ID, "login-token").send_keys("not-the-token-at-all-xx")
        browser.find_element(By.CSS_SELECTOR, "#login button").click()
        wait.until(lambda d: form.is_displayed() and "refused" in _text(d, "#login-why"))
        browser.find_element(By.ID, "login-token").send_keys(READER_TOKEN)
        browser.find_element(By.CSS_SELECTOR, "#login button").click()
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true")
        assert not form.is_displayed()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'#grid .cell[data-peer="{PORT}"]'))
        # Kept for this tab: a reload needs no prompt.
        browser.refresh()
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true")
        assert not browser.find_element(By.ID, "login").is_displayed()
        assert (
            browser.execute_script("return sessionStorage.getItem('graywire.reader-token')") == READER_TOKEN
        )
        # The 401s were the page asking, not errors of its own.
        errors = [e for e in console_errors(browser) if "401" not in e]
        assert errors == []
