"""The status page in a real headless Chromium against the real service and its poll loop.

The service runs the built-in fabricsim with a silent 800G→400G downgrade on a known NIC; the
page must load with no console error (a failed request counts), colour that cable critical,
show the incident with its evidence, refresh by itself, and render the drain API's contract.
At 1600×1000, with warnings opened before and after the downgrade, the critical incident must
be listed first and wholly on the first screen; acknowledge and silence must work with an
operator token asked for once; effects must fold under their cause. Screenshots are kept under
test-artifacts/ (or $GRAYWIRE_TEST_ARTIFACTS); GRAYWIRE_UPDATE_SCREENSHOT=1 also writes the
first screen to docs/status-page.png, the README's picture.
"""

from __future__ import annotations

import base64
import os
import re
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
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
    _need_browser()  # before starting one: skipped locally, failed under CI, never an error
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


def _content(driver: Any, css: str) -> str:
    """Text of an element, folded parts too (``.text`` is only what is rendered)."""
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).get_attribute("textContent"))


def facts_of(driver: Any, card_css: str) -> dict[str, str]:
    """An incident card's labelled lines (its first facts list: the cause's, not its effects')."""
    return dict(
        driver.execute_script(
            "const dl = document.querySelector(arguments[0] + ' .facts');"
            "return [...dl.querySelectorAll(':scope > dt')].map(dt => [dt.textContent, "
            "dt.nextElementSibling.textContent]);",
            card_css,
        )
    )


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
    card = f'#incidents [data-incident="{incident["id"]}"]'
    row = _text(browser, card)
    assert "speed_downgrade" in row and PORT in row
    assert "negotiated 400G, expected 800G" in row
    # The evidence in words: expected vs what each end reads; the raw values folded below.
    facts = facts_of(browser, card)
    assert facts["Expected"] == "800 Gb/s, 4x (from inventory)"
    assert f"{PORT}: 400 Gb/s, 4x" in facts["Actual"]
    raw = _content(browser, f"{card} details[data-fold='raw:{incident['id']}']")
    assert f"actual.{PORT}.speed_bps = 400 Gb/s" in raw and "expected.speed_bps = 800 Gb/s" in raw
    assert "critical" in _text(browser, "#summary")
    # Text from the data stays text: the markup is shown, never parsed.
    assert f"{MARKUP_PORT} {hostile}" in _text(browser, "#incidents")
    assert f"note = {hostile}" in _content(browser, "#incidents")
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
    browser.find_element(By.CSS_SELECTOR, cell_css).click()  # found again: a new row redraws the grid
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


# -- the first screen at 1600x1000: what matters is above the fold ------------------------------
WIDTH, HEIGHT = 1600, 1000
OPERATOR_TOKEN = "operator-token-0123456789abcdef"
GRAFANA = "http://grafana.example:3000/grafana/"
CRITICAL_PORT = "gpu-0011/mlx5_3"
BER_LINK = "gpu-0007/mlx5_1<->leaf-r1-000/p8"
DOCS_SHOT = REPO / "docs" / "status-page.png"


def _warning(
    kind: str, entity: str, when: datetime, summary: str, evidence: dict[str, Any], **kw: Any
) -> Finding:
    port = kw.pop("port", entity.split("<->")[0])
    return Finding(
        kind=kind,
        entity=entity,
        status=kw.pop("status", "firing"),
        time=when,
        severity="warning",
        summary=summary,
        detector=kw.pop("detector", f"{kind}/1"),
        node=kw.pop("node", port.split("/")[0]),
        port=port,
        link=entity if "<->" in entity else None,
        score=kw.pop("score", 1.0),
        evidence=evidence,
    )


def earlier_warnings(now: datetime) -> list[Finding]:
    """Warnings that opened before the critical downgrade, as detectors word them."""
    m = timedelta(minutes=1)
    ber = {
        "level": "warning",
        "port_measured": "gpu-0007/mlx5_1",
        "peer_port": "leaf-r1-000/p8",
        "rule": "pre-FEC BER over the warning level",
        "pre_fec_from": "corrected bits / bits",
        "pre_fec_ber": 3.4e-6,
        "pre_fec_ber_baseline": 2.1e-9,
        "symbol_ber": 1.2e-13,
        "uncorrectable_blocks_in_window": 0.0,
        "window_seconds": 60,
        "thresholds": {"pre_fec": {"warning": 1e-6, "error": 1e-5}, "symbol": {}, "source": "generic PAM4"},
    }
    ber_summary = "gpu-0007/mlx5_1 pre-FEC BER 3.4e-06 over the warning level 1e-06"
    return [
        # Fired, cleared and fired again: a sparkline with a shape.
        _warning(
            "ber_degradation",
            BER_LINK,
            now - 50 * m,
            ber_summary,
            {**ber, "pre_fec_ber": 1.6e-6},
            score=1.6e-6,
        ),
        _warning("ber_degradation", BER_LINK, now - 38 * m, "back under", {"level": "ok"}, status="cleared"),
        _warning("ber_degradation", BER_LINK, now - 25 * m, ber_summary, ber, score=3.4e-6),
        _warning(
            "ecn_hotspot",
            "gpu-0020/mlx5_5",
            now - 35 * m,
            "gpu-0020/mlx5_5 marks 21% of its packets with ECN, 52x its peers' median",
            {
                "marked_fraction": 0.21,
                "marks_per_second": 1800.0,
                "peer_median_fraction": 0.004,
                "robust_z": 9.3,
                "ratio_to_peers": 52.0,
            },
            score=9.3,
        ),
        _warning(
            "nccl_channel_slow",
            "job-007:world|rank 266|channel 2",
            now - 20 * m,
            "rank 266 of job-007:world (gpu-0033 GPU 2): channel 2 30% slower than its 255 peers",
            {
                "job": "job-007",
                "communicator": "job-007:world",
                "collective": "AllReduce",
                "rank": 266,
                "channel": 2,
                "host": "gpu-0033",
                "duration_seconds": 0.0061,
                "peer_median_seconds": 0.0047,
                "slowdown_vs_peers": 0.30,
                "robust_z": 6.2,
                "side": "host",
            },
            port="gpu-0033/mlx5_2",
            score=6.2,
        ),
        _warning(
            "xmit_wait_hotspot",
            "leaf-r6-001/p40",
            now - 12 * m,
            "leaf-r6-001/p40 waits for credits at 8.2e+05 ticks/s, 160x its peers' median",
            {
                "waiting_port": "leaf-r6-001/p40",
                "xmit_wait_ticks_per_second": 8.2e5,
                "peer_median_ticks_per_second": 5.1e3,
                "ratio_to_peers": 160.0,
                "robust_z": 11.0,
                "wait_share": 0.12,
            },
            score=11.0,
        ),
    ]


def newest_warning(now: datetime) -> Finding:
    """A warning that opens after the critical one: newest-first would list it above."""
    return _warning(
        "port_anomaly",
        "gpu-0042/mlx5_0",
        now,
        "gpu-0042/mlx5_0 unlike its peers (isolation score -0.71)",
        {"isolation_score": -0.71, "threshold": -0.6, "drivers": ["rx_errors"], "peer_distance": 7.5},
        score=0.71,
    )


@pytest.fixture(scope="module")
def mixed_fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FastAPI, dict[str, Any]]]:
    """2,048 ports, four warnings opened earlier, a critical 800G->400G downgrade, a warning after it."""
    _need_browser()
    tmp = tmp_path_factory.mktemp("mixed")
    settings = load_settings(
        None,
        data_dir=tmp / "data",
        poll_interval="1s",
        archive={"enabled": False},
        sources=[
            {"type": "fabricsim", "hosts": 64, "seed": 3, "faults": f"speed_downgrade@3s+1h:{CRITICAL_PORT}"}
        ],
        auth={"tokens": [{"name": "oncall", "role": "operator", "token": OPERATOR_TOKEN}]},
        status_page={"grafana_url": GRAFANA},
    )
    app = create_app(settings)
    with serve_app(app, _free_port()) as url:
        deadline = time.monotonic() + 30
        # After the first poll: before it, the service hands open incidents back to their
        # detectors, which would close these made-up ones on the healthy ports they name.
        while httpx.get(f"{url}/healthz").json()["polls"] < 1:
            assert time.monotonic() < deadline, "the service never polled"
            time.sleep(0.1)
        app.state.store.apply(earlier_warnings(datetime.now(UTC)))
        while True:
            items = httpx.get(
                f"{url}/api/v1/incidents", params={"status": "open", "kind": "speed_downgrade"}
            ).json()["items"]
            if items:
                break
            assert time.monotonic() < deadline, "the injected downgrade never became an incident"
            time.sleep(0.25)
        app.state.store.apply([newest_warning(datetime.now(UTC))])
        yield url, app, items[0]


def _at_1600x1000(driver: Any) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
    )


def _box(driver: Any, css: str) -> dict[str, float]:
    return dict(
        driver.execute_script(
            "return document.querySelector(arguments[0]).getBoundingClientRect().toJSON()", css
        )
    )


def test_the_critical_incident_is_listed_first_and_on_the_first_screen_at_1600x1000(
    mixed_fabric: tuple[str, FastAPI, dict[str, Any]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, _app, critical = mixed_fabric
    api = httpx.get(f"{url}/api/v1/incidents", params={"status": "open"}).json()["items"]
    assert len(api) >= 6 and api[0]["severity"] == "warning"  # the API's newest first: a warning on top
    _at_1600x1000(browser)
    browser.get(f"{url}/?refresh=60")  # no redraw while the test reads the page
    wait = WebDriverWait(browser, 20, poll_frequency=0.1)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true")
    assert browser.execute_script("return [window.innerWidth, window.innerHeight, window.scrollY]") == [
        WIDTH,
        HEIGHT,
        0,
    ]

    # Critical first, then the warnings by age: the oldest first, the newest last.
    cards = browser.find_elements(By.CSS_SELECTOR, "#incidents > article.incident")
    ids = [int(c.get_attribute("data-incident")) for c in cards]
    assert ids[0] == critical["id"], [c.text.splitlines()[0] for c in cards]
    api = httpx.get(f"{url}/api/v1/incidents", params={"status": "open"}).json()["items"]
    by_id = {i["id"]: i for i in api}
    sev = [by_id[i]["severity"] for i in ids]
    assert sev == sorted(sev, key=lambda s: s != "critical")
    warnings = [by_id[i] for i in ids if by_id[i]["severity"] == "warning"]
    opened = [datetime.fromisoformat(w["opened_at"]) for w in warnings]
    assert opened == sorted(opened)
    seeded = ["ber_degradation", "ecn_hotspot", "nccl_channel_slow", "xmit_wait_hotspot", "port_anomaly"]
    assert [w["kind"] for w in warnings if w["node"] != "gpu-0011"] == seeded  # (gpu-0011: the sim's NCCL)

    # The whole critical card is on the first screen.
    card = f'#incidents [data-incident="{critical["id"]}"]'
    box = _box(browser, card)
    assert box["top"] >= 0 and box["bottom"] <= HEIGHT, box

    # Its evidence for people: expected vs actual, since when (absolute, with the zone), who is
    # affected, a sparkline, and a link to the port on Grafana.
    facts = facts_of(browser, card)
    assert facts["Expected"] == "800 Gb/s, 4x (from inventory)"
    assert facts["Actual"].startswith(f"{CRITICAL_PORT}: 400 Gb/s, 4x")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+ s ago\)", facts["Opened"]), facts["Opened"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(.+ ago\)", facts["Since"]), facts["Since"]
    assert facts["Affects"].startswith("host gpu-0011")
    assert "leaf-r3-000/p12" in facts["Other end"]
    link = browser.find_element(By.CSS_SELECTOR, f"{card} a.grafana").get_attribute("href")
    assert link == (
        "http://grafana.example:3000/grafana/d/graywire-port-detail/?var-node=gpu-0011&var-port=gpu-0011%2Fmlx5_3"
    )
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"{card} .spark svg polyline"))

    # The warnings read as sentences too, with peers' baselines.
    ber = browser.find_element(By.CSS_SELECTOR, '#incidents article[data-port="gpu-0007/mlx5_1"]')
    ber_css = f'#incidents [data-incident="{ber.get_attribute("data-incident")}"]'
    ber_facts = facts_of(browser, ber_css)
    assert ber_facts["Pre-FEC BER"] == "3.4e-6 vs its baseline 2.1e-9 (corrected bits / bits)"
    assert ber_facts["Levels"] == "pre-FEC warning 1.0e-6, error 1.0e-5 (generic PAM4)"
    assert "Reopened" in ber_facts
    # ... and its sparkline has the firing, the clear and the second firing.
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, f"{ber_css} .spark circle")) == 3)
    nccl = _text(browser, '#incidents article[data-port="gpu-0033/mlx5_2"] .facts')
    assert "job job-007 (rank 266, channel 2)" in nccl and "6.1 ms vs peers' median 4.7 ms (+30%)" in nccl
    ecn = facts_of(browser, '#incidents article[data-port="gpu-0020/mlx5_5"]')
    assert ecn["ECN-marked packets"] == "21% vs peers' median 0.4% (52× peers), 1,800 marks/s"

    # The grid: only switches with a problem, grouped by rail, labels readable and not cut off.
    rows = browser.find_elements(By.CSS_SELECTOR, "#grid .row")
    names = [r.get_attribute("data-node") for r in rows]
    assert "leaf-r3-000" in names and "leaf-r1-000" in names and "leaf-r6-001" in names
    assert "leaf-r0-000" not in names and len(names) < 10
    groups = [g.get_attribute("data-group") for g in browser.find_elements(By.CSS_SELECTOR, "#grid .group")]
    rails = [g for g in groups if g.startswith("rail ")]
    assert groups[: len(rails)] == sorted(rails, key=lambda g: int(g.split()[-1])) and "rail 3" in rails
    assert groups[len(rails) :] in ([], ["spines"])  # the credit-starved uplink's spine end
    label = browser.find_element(By.CSS_SELECTOR, "#grid .row .name")
    assert float(label.value_of_css_property("font-size").removesuffix("px")) >= 12
    grid_box, label_box = _box(browser, "#grid"), _box(browser, "#grid .row .name")
    assert label_box["top"] >= grid_box["top"] and label_box["height"] >= 14

    shot = artifacts_dir() / "status-page-1600x1000.png"
    shot.write_bytes(
        base64.b64decode(browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})["data"])
    )
    assert shot.stat().st_size > 10_000
    if os.environ.get("GRAYWIRE_UPDATE_SCREENSHOT"):
        DOCS_SHOT.write_bytes(shot.read_bytes())

    # "All switches" shows every row, in its rail.
    browser.find_element(By.ID, "grid-all").click()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#grid .row")) == 16 + 8)  # leaves, spines
    assert "spines" in [
        g.get_attribute("data-group") for g in browser.find_elements(By.CSS_SELECTOR, "#grid .group")
    ]
    assert console_errors(browser) == []


def test_acknowledge_and_silence_ask_for_an_operator_token_once(
    mixed_fabric: tuple[str, FastAPI, dict[str, Any]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    url, _app, _critical = mixed_fabric
    api = httpx.get(f"{url}/api/v1/incidents", params={"status": "open"}).json()["items"]
    ecn = next(i for i in api if i["kind"] == "ecn_hotspot")
    xmit = next(i for i in api if i["kind"] == "xmit_wait_hotspot")
    browser.get(f"{url}/?refresh=30")
    wait = WebDriverWait(browser, 15, poll_frequency=0.1)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true")

    # Acknowledge: no token yet, so the page asks for one; a wrong one is refused and asked again.
    card = f'#incidents [data-incident="{ecn["id"]}"]'
    browser.find_element(By.CSS_SELECTOR, f'{card} button[data-act="ack"]').click()
    form = browser.find_element(By.ID, "operator")
    wait.until(lambda d: form.is_displayed())
    browser.find_element(By.ID, "operator-token").send_keys("not-an-operator-token-x")
    browser.find_element(By.CSS_SELECTOR, "#operator button[type=submit]").click()
    wait.until(lambda d: form.is_displayed() and "refused" in _text(d, "#operator-why"))
    browser.find_element(By.ID, "operator-token").send_keys(OPERATOR_TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#operator button[type=submit]").click()
    wait.until(lambda d: httpx.get(f"{url}/api/v1/incidents/{ecn['id']}").json()["status"] == "acknowledged")
    wait.until(lambda d: f"Incident #{ecn['id']} acknowledged" in _text(d, "#notice"))
    assert (
        browser.execute_script("return sessionStorage.getItem('graywire.operator-token')") == OPERATOR_TOKEN
    )
    # It moves to the acknowledged fold, below the open ones.
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, f'#incidents > [data-incident="{ecn["id"]}"]'))
    assert browser.find_elements(
        By.CSS_SELECTOR, f'#incidents details[data-fold="acked"] [data-incident="{ecn["id"]}"]'
    )

    # Silence: the token is kept, so no prompt; the reason and duration go to the API.
    card = f'#incidents [data-incident="{xmit["id"]}"]'
    browser.find_element(By.CSS_SELECTOR, f'{card} button[data-act="silence"]').click()
    silence = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f"{card} form.silence-form"))
    Select(silence.find_element(By.NAME, "duration")).select_by_value("1d")
    silence.find_element(By.NAME, "reason").send_keys("known: leaf-r6-001 uplink optics swap tonight")
    silence.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: httpx.get(f"{url}/api/v1/silences").json())
    (made,) = httpx.get(f"{url}/api/v1/silences").json()
    assert (made["kind"], made["entity"], made["created_by"]) == (xmit["kind"], xmit["entity"], "oncall")
    assert made["reason"] == "known: leaf-r6-001 uplink optics swap tonight"
    assert not form.is_displayed()
    wait.until(lambda d: "silenced until" in _text(d, card))
    # Forgotten on request.
    browser.find_element(By.ID, "operator-forget").click()
    assert browser.execute_script("return sessionStorage.getItem('graywire.operator-token')") is None
    errors = [e for e in console_errors(browser) if "401" not in e]
    assert errors == []


# -- root causes: effects folded under their cause ----------------------------------------------
def _incident(i: int, kind: str, severity: str, minutes_ago: int, **extra: Any) -> dict[str, Any]:
    t = (datetime.now(UTC) - timedelta(minutes=minutes_ago)).isoformat()
    port = extra.pop("port", f"gpu-000{i}/mlx5_0")
    return {
        "id": i,
        "kind": kind,
        "entity": port,
        "status": extra.pop("status", "open"),
        "severity": severity,
        "node": port.split("/")[0],
        "port": port,
        "link": None,
        "summary": f"{kind} on {port}",
        "detector": f"{kind}/1",
        "score": 1.0,
        "confidence": 1.0,
        "opened_at": t,
        "last_seen_at": t,
        "resolved_at": None,
        "finding_count": 1,
        "reopen_count": 0,
        "evidence": {},
        **extra,
    }


def incidents_contract(items: list[dict[str, Any]]) -> FastAPI:
    """The read API's documented answers around a list of incidents, for the page alone."""
    from graywire.service.status_page import install_status_page

    app = FastAPI()
    grid = {
        "generated_at": datetime.now(UTC).isoformat(),
        "last_poll": datetime.now(UTC).isoformat(),
        "polls": 1,
        "ports": 2,
        "links": 1,
        "health": {"ok": 2, "warning": 0, "critical": 0},
        "stale": 0,
        "down": 0,
        "degraded": 0,
        "flags": {"stale": 1, "down": 2, "degraded": 4, "no_data": 8},
        "rows": [
            {"node": "leaf-r0-000", "role": "leaf", "cells": [["leaf-r0-000/p1", "gpu-0001/mlx5_0", 0, 0]]}
        ],
    }

    def incidents(status: str = "open") -> dict[str, Any]:
        page = [i for i in items if i["status"] == status]
        return {"items": page, "count": len(page), "limit": 500, "offset": 0}

    def incident(incident_id: int) -> dict[str, Any]:
        return {**next(i for i in items if i["id"] == incident_id), "findings": []}

    empty_nodes = {"items": [], "count": 0, "total": 0, "limit": 1000, "offset": 0}
    app.add_api_route("/api/v1/fabric/grid", lambda: grid, methods=["GET"])
    app.add_api_route("/api/v1/incidents", incidents, methods=["GET"])
    app.add_api_route("/api/v1/incidents/{incident_id}", incident, methods=["GET"])
    app.add_api_route("/api/v1/nodes", lambda: empty_nodes, methods=["GET"])
    app.add_api_route("/api/v1/sources", lambda: {"items": [], "stale_ports": 0}, methods=["GET"])
    app.add_api_route("/api/v1/silences", lambda: [], methods=["GET"])
    install_status_page(app)
    return app


def test_effects_are_folded_under_their_cause_with_a_count(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    items = [
        # A warning cause whose effects include a critical: the group sorts as critical.
        _incident(1, "pfc_storm", "warning", 30, effects=[2, 3]),
        _incident(2, "speed_downgrade", "critical", 20, caused_by=1, effects=[]),
        _incident(3, "nccl_channel_slow", "warning", 10),  # named only by the cause's effects
        _incident(4, "ecn_hotspot", "critical", 40, caused_by=99, effects=[]),  # cause not open
        _incident(5, "ber_degradation", "warning", 50, caused_by=6),  # a cycle folds nothing
        _incident(6, "link_flap", "warning", 45, caused_by=5),
        _incident(7, "port_anomaly", "warning", 60),  # no grouping fields at all
    ]
    with serve_app(incidents_contract(items), _free_port()) as url:
        browser.get(f"{url}/?refresh=2")
        wait = WebDriverWait(browser, 15, poll_frequency=0.1)
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true")
        top = browser.find_elements(By.CSS_SELECTOR, "#incidents > article.incident")
        # Critical groups by age (the storm's group holds a critical), then warnings by age.
        assert [int(c.get_attribute("data-incident")) for c in top] == [4, 1, 7, 5, 6]
        cause = top[1]
        assert cause.get_attribute("data-effects") == "2"
        fold = cause.find_element(By.CSS_SELECTOR, "details[data-fold='effects:1']")
        assert (
            fold.find_element(By.TAG_NAME, "summary").text == "2 effects of this cause (worse than the cause)"
        )
        effects = fold.find_elements(By.CSS_SELECTOR, ".effects > article.incident")
        assert [int(e.get_attribute("data-incident")) for e in effects] == [2, 3]
        assert not any(e.is_displayed() for e in effects)  # collapsed until asked
        assert "caused by #99" in top[0].text
        fold.find_element(By.TAG_NAME, "summary").click()
        assert all(e.is_displayed() for e in effects)
        # Opened stays open when the page redraws.
        before = _text(browser, "#freshness")
        wait.until(lambda d: _text(d, "#freshness") != before)
        assert browser.find_element(By.CSS_SELECTOR, '#incidents [data-incident="2"]').is_displayed()
        assert console_errors(browser) == []


def test_the_real_services_downgrade_shows_its_slow_rank_folded_under_it(
    service: tuple[str, FastAPI, dict[str, Any]], browser: Any
) -> None:
    """End to end: fabricsim's downgrade slows the rank on that NIC; the drain engine makes the
    link its root cause; the page lists the link with the slow rank folded under it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, _, link = service
    deadline = time.monotonic() + 30
    while True:
        effects = httpx.get(f"{url}/api/v1/incidents/{link['id']}").json()["effects"]
        if effects:
            break
        assert time.monotonic() < deadline, "the downgraded NIC's slow rank never became its effect"
        time.sleep(0.25)
    effect = httpx.get(f"{url}/api/v1/incidents/{effects[0]}").json()
    assert (effect["kind"], effect["caused_by"]) == ("nccl_channel_slow", link["id"])
    browser.get(f"{url}/?refresh=2")
    wait = WebDriverWait(browser, 15, poll_frequency=0.1)
    card_css = f'#incidents > article.incident[data-incident="{link["id"]}"]'
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"{card_css}[data-effects]"))
    card = browser.find_element(By.CSS_SELECTOR, card_css)
    folded = card.find_elements(By.CSS_SELECTOR, ".effects > article.incident")
    assert str(effect["id"]) in [e.get_attribute("data-incident") for e in folded]
    top = browser.find_elements(By.CSS_SELECTOR, "#incidents > article.incident")
    assert str(effect["id"]) not in [c.get_attribute("data-incident") for c in top]  # not listed apart
    assert console_errors(browser) == []


def test_a_jobs_findings_show_under_their_phases_from_its_incidents_badge(
    tmp_path: Path, browser: Any
) -> None:
    """fabricsim's job-000 with a slow channel and a straggler rank: the Jobs section lists the
    job, and its badge on an incident card opens it at its steady-state findings (both there,
    no other phase holding anything)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        poll_interval="1s",
        archive={"enabled": False},
        sources=[
            {"type": "fabricsim", "hosts": 8, "seed": 2, "faults": "slow_channel@2s+1h=0.3,straggler@2s+1h"}
        ],
    )
    with serve_app(create_app(settings), _free_port()) as url:
        deadline = time.monotonic() + 30
        while True:
            jobs = httpx.get(f"{url}/api/v1/jobs").json()["items"]
            if jobs and jobs[0]["counts"]["steady_state"] >= 2:
                d = httpx.get(f"{url}/api/v1/jobs/{jobs[0]['job']}").json()
                steady = {i["kind"]: i["id"] for i in d["phases"][2]["incidents"]}
                if {"nccl_channel_slow", "nccl_straggler"} <= set(steady):
                    break
            assert time.monotonic() < deadline, f"no job with both steady-state findings: {jobs}"
            time.sleep(0.25)
        job = jobs[0]["job"]
        browser.get(f"{url}/?refresh=2")
        wait = WebDriverWait(browser, 15, poll_frequency=0.1)
        line = f'#jobs details.job[data-job="{job}"]'
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, line))
        assert "steady state" in _text(browser, f"{line} > summary")
        badge = f'#incidents article.incident[data-incident="{steady["nccl_straggler"]}"] a.job-link'
        browser.find_element(By.CSS_SELECTOR, badge).click()
        phase = f'{line}[open] section.phase[data-phase="steady_state"]'
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"{phase} article.job-incident"))
        shown = {
            e.get_attribute("data-incident")
            for e in browser.find_elements(By.CSS_SELECTOR, f"{phase} article")
        }
        assert {str(i) for i in steady.values()} <= shown
        for other in ("start_up", "data_path", "fault_path"):
            sel = f'{line} section.phase[data-phase="{other}"]'
            assert browser.find_elements(By.CSS_SELECTOR, f"{sel} article") == [], other
            assert "nothing found" in _text(browser, sel)
        # Still open, with its findings, after the page refreshed by itself.
        before = _text(browser, "#freshness")
        wait.until(lambda d: _text(d, "#freshness") != before)
        assert browser.find_elements(By.CSS_SELECTOR, f"{phase} article.job-incident")
        full_page_screenshot(browser, artifacts_dir() / "status-page-jobs.png")
        assert console_errors(browser) == []
