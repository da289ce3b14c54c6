"""The UFM collectors over real HTTP(S) against the fake UFM: formats, auth, TLS, timeouts, failures."""

from __future__ import annotations

import asyncio
import time
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pydantic import ValidationError

from graywire.collectors.base import ScrapeResult
from graywire.collectors.schemas import record_kind
from graywire.collectors.ufm import (
    UfmHttpSettings,
    UfmRestCollector,
    UfmSourceConfig,
    UfmTelemetryCollector,
    build_collectors,
)
from graywire.fabricsim.ufm_server import FakeUfm
from tests.collectors.ufm.httpserver import self_signed, serve

G = 10**9
BASIC = UfmHttpSettings(auth="basic", username="admin", password="s3cret")
TOKEN = UfmHttpSettings(auth="token", token="tok-abc123")


def scrape(collector: Any) -> ScrapeResult:
    """One scrape in a fresh event loop, closing the connections after it (as a test does not poll)."""

    async def once() -> ScrapeResult:
        try:
            return await collector.scrape()
        finally:
            await collector.aclose()

    return asyncio.run(once())


def by_kind(result: ScrapeResult) -> dict[str, pa.RecordBatch]:
    return {record_kind(b.schema): b for b in result.batches}


def port_row(batch: pa.RecordBatch, key: str) -> dict[str, Any]:
    return next(r for r in batch.to_pylist() if r["port"] == key)


# -- REST ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [BASIC, TOKEN], ids=["basic", "token"])
def test_rest_scrape_reads_state_speed_and_links(
    fake: FakeUfm, ufm_url: str, settings: UfmHttpSettings
) -> None:
    fake.advance(4)  # t = 40 s: gpu-0003/mlx5_2 runs at 400G since 30 s
    collector = UfmRestCollector(ufm_url, fake.fabric, settings)
    result = scrape(collector)
    assert result.ok, result.error
    assert (result.source, result.target) == ("ufm", ufm_url)
    got = by_kind(result)
    ports = got["port_sample"]
    assert ports.num_rows == fake.fabric.n_ports
    assert port_row(ports, "gpu-0003/mlx5_2")["speed_bps"] == 400 * G
    assert port_row(ports, "leaf-r2-000/p4")["speed_bps"] == 400 * G  # its other end agrees
    assert port_row(ports, "gpu-0001/mlx5_2")["speed_bps"] == 800 * G
    assert port_row(ports, "gpu-0001/mlx5_2")["width"] == 4
    links = got["link"]
    assert links.num_rows == len(fake.fabric.link_a)
    pairs = set(zip(links.column("a_port").to_pylist(), links.column("b_port").to_pylist(), strict=True))
    assert ("gpu-0003/mlx5_2", "leaf-r2-000/p4") in pairs
    caps = {r["port"]: r for r in got["port_capability"].to_pylist()}
    assert caps["gpu-0003/mlx5_2"]["max_speed_bps"] == 800 * G  # enabled XDR x 4: what it should run at
    expected_prefix = "/ufmRest/" if settings.auth == "basic" else "/ufmRestV3/"
    assert fake.requests[-2:] == [f"{expected_prefix}resources/ports", f"{expected_prefix}resources/links"]


def test_rest_sends_capabilities_only_when_they_changed(fake: FakeUfm, ufm_url: str) -> None:
    collector = UfmRestCollector(ufm_url, fake.fabric, BASIC)
    assert "port_capability" in by_kind(scrape(collector))
    fake.advance(1)
    again = by_kind(scrape(collector))
    assert "port_capability" not in again and {"port_sample", "link"} <= set(again)


@pytest.mark.parametrize(
    "settings",
    [
        UfmHttpSettings(auth="basic", username="admin", password="wrong"),
        UfmHttpSettings(auth="token", token="not-the-token"),
        UfmHttpSettings(),
    ],
    ids=["wrong-password", "wrong-token", "no-credentials"],
)
def test_rest_auth_failure_is_a_failed_scrape(ufm_url: str, fake: FakeUfm, settings: UfmHttpSettings) -> None:
    result = scrape(UfmRestCollector(ufm_url, fake.fabric, settings))
    assert not result.ok and result.batches == ()
    assert "HTTP 401" in (result.error or "")
    assert "authentication failed: check the username/password or access token" in (result.error or "")


def test_refused_connection_is_a_failed_scrape(fake: FakeUfm) -> None:
    with serve(fake.app) as url:
        pass  # the server is gone: nothing listens on that port any more
    result = scrape(UfmRestCollector(url, fake.fabric, BASIC))
    assert not result.ok
    assert (result.error or "").startswith("ConnectError")


def test_hung_server_fails_within_the_read_timeout(fake: FakeUfm, ufm_url: str) -> None:
    fake.delay_s = 5.0
    settings = UfmHttpSettings(auth="basic", username="admin", password="s3cret", read_timeout_s=0.3)
    t0 = time.monotonic()
    result = scrape(UfmRestCollector(ufm_url, fake.fabric, settings))
    elapsed = time.monotonic() - t0
    assert not result.ok
    assert (result.error or "").startswith("ReadTimeout")
    assert elapsed < 2.0


def test_total_deadline_bounds_a_slow_scrape(fake: FakeUfm, ufm_url: str) -> None:
    fake.delay_s = 0.4  # each request answers, but the two of a scrape take longer than allowed
    settings = UfmHttpSettings(
        auth="basic", username="admin", password="s3cret", read_timeout_s=5, total_timeout_s=0.6
    )
    t0 = time.monotonic()
    result = scrape(UfmRestCollector(ufm_url, fake.fabric, settings))
    assert not result.ok
    assert result.error == f"timed out after 0.6 s fetching {ufm_url}"
    assert time.monotonic() - t0 < 2.0


# -- TLS ----------------------------------------------------------------------------------------


@pytest.fixture
def tls_url(fake: FakeUfm, tmp_path: Path) -> Any:
    cert, key = self_signed(tmp_path)
    with serve(fake.app, certfile=cert, keyfile=key) as url:
        yield url, cert


def test_tls_is_verified_by_default(fake: FakeUfm, tls_url: tuple[str, Path]) -> None:
    url, _ = tls_url
    assert url.startswith("https://")
    result = scrape(UfmRestCollector(url, fake.fabric, BASIC))
    assert not result.ok
    assert "CERTIFICATE_VERIFY_FAILED" in (result.error or "")


def test_tls_with_ca_file_or_explicit_opt_out(fake: FakeUfm, tls_url: tuple[str, Path]) -> None:
    url, cert = tls_url
    trusted = UfmHttpSettings(auth="basic", username="admin", password="s3cret", ca_file=cert)
    unverified = UfmHttpSettings(auth="basic", username="admin", password="s3cret", verify=False)
    for settings in (trusted, unverified):
        result = scrape(UfmRestCollector(url, fake.fabric, settings))
        assert result.ok, result.error
        assert by_kind(result)["port_sample"].num_rows == fake.fabric.n_ports


def test_http_settings_reject_contradictions(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="verify is false"):
        UfmHttpSettings(ca_file=tmp_path / "ca.pem", verify=False)
    with pytest.raises(ValueError, match="does not exist"):
        UfmRestCollector(
            "https://ufm", None, UfmHttpSettings(auth="token", token="t", ca_file=tmp_path / "no.pem")
        )
    with pytest.raises(ValueError, match="needs a username and a password"):
        UfmHttpSettings(auth="basic", username="admin")


# -- telemetry ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/metrics", "/csv/xcset/low_freq_debug", "/json"])
def test_telemetry_forms_give_the_simulated_counters(fake: FakeUfm, ufm_url: str, path: str) -> None:
    fake.advance(2)
    result = scrape(UfmTelemetryCollector(ufm_url + path, fake.fabric))
    assert result.ok, result.error
    (batch,) = result.batches
    assert batch.num_rows == fake.fabric.n_ports
    sim = {r["port"]: r for r in fake.step.port_sample.to_pylist()}
    got = {r["port"]: r for r in batch.to_pylist()}
    for key in ("gpu-0002/mlx5_5", "leaf-r1-000/p5", "spine-0000/p1"):
        assert got[key]["tx_bytes"] == sim[key]["tx_bytes"] // 4 * 4  # sent as 4-octet words
        assert got[key]["rx_packets"] == sim[key]["rx_packets"]
        assert got[key]["link_downed"] == sim[key]["link_downed"]
        assert got[key]["xmit_wait_ticks"] == sim[key]["xmit_wait_ticks"]
    assert batch.column("time")[0].as_py() == fake.step.time
    if path != "/json":  # the TFS stream carries UFM's monitoring counters only
        key = "leaf-r1-000/p5"
        assert got[key]["fec_corrected_bits"] == sim[key]["fec_corrected_bits"]
        assert got[key]["phy_received_bits"] == sim[key]["phy_received_bits"]
        assert got[key]["fec_mode"] == 14
        assert got[key]["temperature_celsius"] == pytest.approx(sim[key]["temperature_celsius"], abs=0.06)


def test_telemetry_truncated_body_is_a_failed_scrape(fake: FakeUfm, ufm_url: str) -> None:
    fake.truncate_to = 5000  # the server dies mid-response
    result = scrape(UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric))
    assert not result.ok and result.batches == ()
    assert (result.error or "").startswith("RemoteProtocolError")


def test_telemetry_body_over_the_limit_is_never_read(fake: FakeUfm, ufm_url: str) -> None:
    """A target declaring 5 GB fails at once, unread; one streaming past the cap stops there."""
    fake.truncate_to, fake.declare_length = 5000, 5_000_000_000
    t0 = time.monotonic()
    result = scrape(UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric))
    assert not result.ok and result.batches == ()
    assert "declares a 5,000,000,000-byte body, over the 1,073,741,824-byte limit" in (result.error or "")
    assert time.monotonic() - t0 < 2.0
    fake.truncate_to = fake.declare_length = None
    small = UfmHttpSettings(max_body_bytes=1 << 16)
    result = scrape(UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric, small))
    assert not result.ok and "(max_body_bytes)" in (result.error or "")
    assert scrape(UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric)).ok


def test_compressed_telemetry_is_read_and_a_gzip_bomb_is_not(fake: FakeUfm, ufm_url: str) -> None:
    """Telemetry sent gzipped (a proxy in front of UFM) parses as ever; 64 MiB of it in 64 KiB on
    the wire (1,000x) stops at max_decompression_ratio, long before max_body_bytes."""
    fake.telemetry_encoding = "gzip"
    plain = scrape(UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric))
    assert plain.ok and plain.samples > 0
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)  # 31: a gzip stream
    line = b'PortXmitWaitExtended{port_guid="0x1",port_num="1"} 0\n'
    bomb = (
        b"".join(packer.compress(line * 16384) for _ in range(64 * 2**20 // (len(line) * 16384)))
        + packer.flush()
    )
    fake.telemetry_body = bomb
    result = scrape(UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric))
    assert not result.ok and "max_decompression_ratio): stopped reading" in (result.error or ""), result.error
    loose = UfmHttpSettings(max_decompression_ratio=1e6)  # the operator's own limit is the judge
    assert "max_decompression_ratio" not in (
        scrape(UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric, loose)).error or ""
    )


def test_telemetry_garbage_is_a_failed_scrape(fake: FakeUfm, ufm_url: str) -> None:
    fake.telemetry_body = b"<html>\n<body>Service Unavailable</body>\n</html>\n"
    result = scrape(UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric))
    assert not result.ok
    assert result.error == "TelemetryParseError: not Prometheus text: '<html>'"


def test_telemetry_not_found_names_the_url(ufm_url: str) -> None:
    result = scrape(UfmTelemetryCollector(ufm_url + "/nope", None))
    assert not result.ok
    assert f"HTTP 404 from {ufm_url}/nope" in (result.error or "")


def test_telemetry_hang_fails_within_the_timeout(fake: FakeUfm, ufm_url: str) -> None:
    fake.delay_s = 5.0
    t0 = time.monotonic()
    result = scrape(
        UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric, UfmHttpSettings(read_timeout_s=0.3))
    )
    assert not result.ok and (result.error or "").startswith("ReadTimeout")
    assert time.monotonic() - t0 < 2.0


def test_one_collector_survives_many_event_loops(fake: FakeUfm, ufm_url: str) -> None:
    collector = UfmTelemetryCollector(ufm_url + "/metrics", fake.fabric)
    first = scrape(collector)
    fake.advance()
    second = scrape(collector)  # a new asyncio.run: a new loop, so a new client
    assert first.ok and second.ok
    assert second.batches[0].column("time")[0].as_py() == fake.step.time
    # The port dictionary is the same object from poll to poll.
    assert first.batches[0].column("port").dictionary.equals(second.batches[0].column("port").dictionary)


# -- configuration ----------------------------------------------------------------------------------


def test_config_builds_both_collectors(tmp_path: Path, fake: FakeUfm, ufm_url: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-abc123\n")
    cfg = UfmSourceConfig.model_validate(
        {
            "type": "ufm",
            "url": ufm_url,
            "auth": "token",
            "token_file": str(token_file),
            "telemetry_url": ufm_url + "/metrics",
            "read_timeout": 3,
        }
    )
    rest, telemetry = build_collectors(cfg, fake.fabric)
    assert isinstance(rest, UfmRestCollector) and isinstance(telemetry, UfmTelemetryCollector)
    assert rest.settings.token == "tok-abc123" and rest.settings.read_timeout_s == 3
    assert telemetry.http.settings.auth == "none"  # the telemetry endpoint is not sent the token
    assert scrape(rest).ok and scrape(telemetry).ok


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "set url"),
        ({"url": "ufm.example.com", "username": "a", "password": "b"}, "http:// or https://"),
        ({"url": "https://ufm", "auth": "basic", "username": "admin"}, "needs username and password"),
        ({"url": "https://ufm", "auth": "token"}, "needs token"),
        (
            {"url": "https://ufm", "token": "t", "auth": "token", "verify": False, "ca_file": "/x"},
            "choose one",
        ),
        ({"telemetry_url": "http://ufm:9001/metrics", "timeout": 0}, "greater than 0"),
        ({"telemetry_url": "http://ufm:9001/metrics", "colour": "blue"}, "Extra inputs"),
    ],
)
def test_config_rejects_bad_settings(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        UfmSourceConfig.model_validate(doc)


def test_config_defaults_verify_tls() -> None:
    cfg = UfmSourceConfig(telemetry_url="https://ufm:9001/metrics")
    assert cfg.verify is True and cfg.http_settings(authenticated=False).verify_arg() is True


def test_a_password_in_a_target_url_is_never_shown(fake: FakeUfm, ufm_url: str) -> None:
    """``http://user:pw@host`` works, and neither the target nor a failure's reason shows the password."""
    host = ufm_url.removeprefix("http://")
    good = UfmTelemetryCollector(f"http://admin:s3cret@{host}/metrics", fake.fabric)
    assert good.target == f"http://***@{host}/metrics"
    assert scrape(good).ok
    bad = scrape(UfmTelemetryCollector(f"http://admin:s3cret@{host}/nope", fake.fabric))
    assert not bad.ok and "HTTP 404" in (bad.error or "")
    assert "s3cret" not in f"{bad.target} {bad.error}" and "***@" in (bad.error or "")
