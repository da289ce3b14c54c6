"""The prometheus source's collector and configuration: a scrape never raises, unknown is not healthy."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from graywire.collectors.base import ScrapeResult
from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.prometheus import PrometheusCollector, PrometheusSourceConfig, build_collectors
from graywire.service.config import load_settings
from graywire.service.sources import build_sources

FIXTURES = Path(__file__).parent / "fixtures"


class Exporter:
    """What the fake exporter answers: status, content type, body, and a delay."""

    def __init__(self) -> None:
        self.status = 200
        self.ctype = "text/plain; version=0.0.4; charset=utf-8"
        self.body = (FIXTURES / "infiniband_exporter_hca.prom").read_bytes()
        self.delay = 0.0
        self.accept: list[str] = []


@pytest.fixture
def exporter() -> Iterator[tuple[str, Exporter]]:
    state = Exporter()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.accept.append(self.headers.get("Accept", ""))
            time.sleep(state.delay)
            try:
                self.send_response(state.status)
                self.send_header("Content-Type", state.ctype)
                self.send_header("Content-Length", str(len(state.body)))
                self.end_headers()
                self.wfile.write(state.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (the timeout test)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", state
    finally:
        server.shutdown()
        server.server_close()


def scrape(c: PrometheusCollector) -> ScrapeResult:
    return asyncio.run(c.scrape())


def test_a_good_scrape_asks_for_the_text_format(exporter: tuple[str, Exporter]) -> None:
    url, state = exporter
    res = scrape(PrometheusCollector(url))
    assert res.ok and res.source == "prometheus" and res.target == url
    assert res.samples == 4 and not res.skipped  # two ports and their two cables
    assert state.accept[0].startswith("text/plain;version=0.0.4")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"status": 503, "body": b"down for maintenance"}, "HTTP 503: down for maintenance"),
        ({"ctype": "application/vnd.google.protobuf"}, "not the Prometheus text format"),
        ({"body": b'infiniband_hca_port_symbol_error_total{guid="0x1" 5\n'}, "ValueError"),
        ({"body": b"# TYPE up gauge\nup 1\n"}, "no node_infiniband_*"),
        ({"body": b"\xff\xfe not utf-8"}, "UnicodeDecodeError"),
    ],
)
def test_a_bad_answer_fails_the_scrape_with_its_reason(
    exporter: tuple[str, Exporter], change: dict[str, object], reason: str
) -> None:
    url, state = exporter
    for k, v in change.items():
        setattr(state, k, v)
    res = scrape(PrometheusCollector(url))
    assert not res.ok and not res.batches
    assert reason in (res.error or ""), res.error


def test_a_body_past_the_bound_and_a_slow_exporter_fail(exporter: tuple[str, Exporter]) -> None:
    url, state = exporter
    res = scrape(PrometheusCollector(url, max_bytes=1024))
    assert not res.ok and "larger than 1024 bytes" in (res.error or "")
    state.delay = 2.0
    res = scrape(PrometheusCollector(url, timeout=0.3))
    assert not res.ok and "timed out after 0.3 s" in (res.error or "")


def test_a_refused_connection_fails_and_a_password_stays_out_of_the_reason() -> None:
    res = scrape(PrometheusCollector("http://user:secret@127.0.0.1:9/metrics", timeout=2))
    assert not res.ok and "secret" not in (res.error or "") and "secret" not in res.target


def test_config_targets_urls_and_the_template() -> None:
    fabric = Fabric.from_specs(
        {"gpu-01": "host", "gpu-02": "host", "leaf-1": "leaf"},
        [PortSpec("gpu-01", "mlx5_0"), PortSpec("gpu-02", "mlx5_0"), PortSpec("leaf-1", "p1")],
        [],
    )
    cfg = PrometheusSourceConfig(
        targets=[{"url": "http://gpu-01:9100/metrics", "node": "gpu-01"}],
        urls=["http://ibexporter:9315/metrics"],
        url_template="http://{host}:9100/metrics",
    )
    collectors = build_collectors(cfg, fabric)
    assert [(c.url, c.node) for c in collectors] == [
        ("http://gpu-01:9100/metrics", "gpu-01"),
        ("http://ibexporter:9315/metrics", None),
        ("http://gpu-02:9100/metrics", "gpu-02"),  # gpu-01's was listed already; switches get none
    ]
    assert len({id(c.resolver) for c in collectors}) == 1


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({}, "set targets, urls or url_template"),
        ({"urls": ["ibexporter:9315"]}, "must start with http"),
        ({"url_template": "http://gpu:9100/metrics"}, "{host}"),
        ({"targets": [{"url": "http://a:9100/metrics", "node": "a/b"}]}, "without '/'"),
        ({"urls": ["http://a/metrics"], "timeout": 0}, "greater than 0"),
    ],
)
def test_bad_config_names_the_key(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match="invalid configuration") as e:
        load_settings(None, sources=[{"type": "prometheus", **entry}])
    assert message in str(e.value)


def test_the_service_builds_prometheus_sources(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"nodes": [{"name": "gpu-01", "ports": ["mlx5_0"]}]}))
    settings = load_settings(
        None,
        data_dir=tmp_path,
        inventory=str(inventory),
        sources=[{"type": "prometheus", "url_template": "http://{host}:9100/metrics"}],
    )
    _, collectors = build_sources(settings)
    assert [(type(c).__name__, c.target) for c in collectors] == [
        ("PrometheusCollector", "http://gpu-01:9100/metrics")
    ]


def test_an_unknown_type_lists_prometheus() -> None:
    with pytest.raises(ValueError, match="did you mean prometheus"):
        load_settings(None, sources=[{"type": "prometheus_exporter", "urls": ["http://a/metrics"]}])


def test_the_readme_example_is_a_valid_config(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    start = readme.index("```yaml", readme.index("**Exporters a site already runs**")) + len("```yaml")
    cfg = tmp_path / "g.yaml"
    cfg.write_text(readme[start : readme.index("```", start)])
    (src,) = load_settings(cfg).sources
    assert isinstance(src, PrometheusSourceConfig)
    assert src.targets[0].node == "gpu-0001" and src.url_template and src.urls
