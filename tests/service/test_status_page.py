"""The status page's files and the capabilities route it reads first (the browser test drives it)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.app import create_app
from graywire.service.config import load_settings
from graywire.service.status_page import STATIC_DIR, install_status_page, switch_rails


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
    assert client.get("/api/v1/capabilities").json() == {"drain": True, "jobs": True}
    # A service built without the drain API says so, and the page shows "unavailable"; without
    # the jobs view the page does not ask for it.
    bare = FastAPI()
    install_status_page(bare)
    assert TestClient(bare).get("/api/v1/capabilities").json() == {"drain": False, "jobs": False}
    bare = FastAPI()
    bare.add_api_route("/api/v1/drain", lambda: [], methods=["GET"])
    install_status_page(bare)
    assert TestClient(bare).get("/api/v1/capabilities").json() == {
        "drain": False,
        "jobs": False,
    }  # needs its state route too


def test_probes_may_use_head(client: TestClient) -> None:
    """Uptime checks and load balancers often probe with HEAD: not a 405."""
    for path in ("/", "/healthz"):
        r = client.head(path)
        assert r.status_code == 200, path
        assert r.content == b""


def test_the_page_settings_give_grafanas_port_dashboard_and_each_leafs_rail(tmp_path: Path) -> None:
    settings = load_settings(
        None,
        data_dir=tmp_path,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 64}],
        status_page={"grafana_url": "https://ops.example/grafana/"},
    )
    with TestClient(create_app(settings, run_loop=False)) as c:
        body = c.get("/api/v1/status-page").json()
    assert body["grafana_port_url"] == "https://ops.example/grafana/d/graywire-port-detail/"
    rails = body["switch_rails"]
    # 64 hosts x 8 rails: two leaves per rail; spines carry every rail, so have none.
    assert rails["leaf-r0-000"] == 0 and rails["leaf-r7-001"] == 7 and len(rails) == 16
    assert not any(name.startswith(("spine", "gpu")) for name in rails)


def test_without_grafana_or_a_fabric_the_page_settings_say_so(client: TestClient) -> None:
    assert client.get("/api/v1/status-page").json()["grafana_port_url"] is None
    bare = FastAPI()
    install_status_page(bare)
    assert TestClient(bare).get("/api/v1/status-page").json() == {
        "grafana_port_url": None,
        "switch_rails": {},
    }


@pytest.mark.parametrize(
    "url", ["grafana:3000", "javascript:alert(1)", "http://", "http://a b", "ftp://grafana"]
)
def test_grafana_url_must_be_an_http_url(tmp_path: Path, url: str) -> None:
    with pytest.raises(ValueError, match=r"status_page\.grafana_url"):
        load_settings(None, data_dir=tmp_path, status_page={"grafana_url": url})


def test_switch_rails_leave_out_switches_on_several_rails() -> None:
    fabric = build_fabric(TopologySpec(hosts=4, gpus=2, hosts_per_leaf=2))
    rails = switch_rails(fabric)
    assert rails == {"leaf-r0-000": 0, "leaf-r1-000": 1, "leaf-r0-001": 0, "leaf-r1-001": 1}
