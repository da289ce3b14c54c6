"""The status page's files and the capabilities route it reads first (the browser test drives it)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings
from graywire.service.status_page import STATIC_DIR, install_status_page


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = load_settings(
        None, data_dir=tmp_path, archive={"enabled": False}, sources=[{"type": "fabricsim", "hosts": 2}]
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        yield c


def test_the_page_and_its_files_are_served_from_the_package(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'src="static/status.js"' in page.text and 'href="static/status.css"' in page.text
    assert "http://" not in page.text and "https://" not in page.text  # nothing from the internet
    js = client.get("/static/status.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert client.get("/static/status.css").headers["content-type"].startswith("text/css")
    assert client.get("/static/nope.js").status_code == 404
    assert "/" not in client.get("/openapi.json").json()["paths"]  # the page is not an API route


def test_no_data_reaches_the_dom_as_html() -> None:
    js = (STATIC_DIR / "status.js").read_text()
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", js)


def test_capabilities_follow_the_routes_the_service_has(client: TestClient) -> None:
    assert client.get("/api/v1/capabilities").json() == {"drain": True}
    # A service built without the drain API says so, and the page shows "unavailable".
    bare = FastAPI()
    install_status_page(bare)
    assert TestClient(bare).get("/api/v1/capabilities").json() == {"drain": False}
    bare = FastAPI()
    bare.add_api_route("/api/v1/drain", lambda: [], methods=["GET"])
    install_status_page(bare)
    assert TestClient(bare).get("/api/v1/capabilities").json() == {
        "drain": False
    }  # needs its state route too


def test_probes_may_use_head(client: TestClient) -> None:
    """Uptime checks and load balancers often probe with HEAD: not a 405."""
    for path in ("/", "/healthz"):
        r = client.head(path)
        assert r.status_code == 200, path
        assert r.content == b""
