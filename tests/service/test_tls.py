"""TLS on the API, on a real ``graywire serve``: tokens travel encrypted, plain HTTP is refused,
and with a client CA only clients holding a certificate it signed get an answer."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from graywire.service.config import load_settings
from tests.service.test_drain_durability import free_port

pytestmark = pytest.mark.alone  # a real process, waited for

GRAYWIRE = Path(sys.executable).parent / "graywire"
TOKEN = "reader-token-0123456789"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def issue(out: Path, name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None) -> tuple[
    x509.Certificate, ec.EllipticCurvePrivateKey
]:  # fmt: skip
    """A CA (no ``issuer``) or a certificate it signs for 127.0.0.1, written as ``name``.pem/.key."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(issuer[0].subject if issuer else _name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
    )
    if issuer is None:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        signer = key
    else:
        here = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        both = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
        b = b.add_extension(here, critical=False).add_extension(both, critical=False)
        signer = issuer[1]
    cert = b.sign(signer, hashes.SHA256())
    (out / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                        serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pki")
    ca = issue(out, "ca", None)
    issue(out, "server", ca)
    issue(out, "client", ca)
    other = issue(out, "other-ca", None)
    issue(out, "stranger", other)
    return out


def serve(tmp_path: Path, pki: Path, mutual: bool) -> Iterator[str]:
    port = free_port()
    tls = {"certfile": str(pki / "server.pem"), "keyfile": str(pki / "server.key")}
    if mutual:
        tls["client_ca"] = str(pki / "ca.pem")
    config = tmp_path / "graywire.yaml"
    config.write_text(yaml.safe_dump({
        "port": port, "data_dir": str(tmp_path / "data"), "archive": {"enabled": False},
        "sources": [{"type": "fabricsim", "hosts": 8}], "tls": tls,
        "auth": {"read_open": False, "tokens": [{"name": "reader", "role": "reader", "token": TOKEN}]},
    }))  # fmt: skip
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(GRAYWIRE), "serve", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    base = f"https://127.0.0.1:{port}"
    try:
        ctx = client_context(pki, "client" if mutual else None)
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(base + "/healthz", verify=ctx, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "the service did not answer over TLS"
            time.sleep(0.2)
        yield base
    finally:
        proc.kill()
        proc.wait(timeout=10)
        log.close()


def client_context(pki: Path, cert: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert is not None:
        ctx.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    return ctx


@pytest.fixture
def tls_api(tmp_path: Path, pki: Path) -> Iterator[str]:
    yield from serve(tmp_path, pki, mutual=False)


@pytest.fixture
def mutual_api(tmp_path: Path, pki: Path) -> Iterator[str]:
    yield from serve(tmp_path, pki, mutual=True)


def test_the_api_answers_over_tls_and_not_in_the_clear(tls_api: str, pki: Path) -> None:
    auth = {"authorization": f"Bearer {TOKEN}"}
    r = httpx.get(tls_api + "/api/v1/drain", headers=auth, verify=client_context(pki, None), timeout=5)
    assert r.status_code == 200 and r.json() == []
    with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port: no answer a client can take
        httpx.get(tls_api.replace("https://", "http://") + "/healthz", timeout=5)
    with pytest.raises(httpx.ConnectError):  # a server this client cannot verify
        httpx.get(tls_api + "/healthz", verify=ssl.create_default_context(cafile=str(pki / "other-ca.pem")),
                  timeout=5)  # fmt: skip


def test_mutual_tls_answers_only_clients_with_a_certificate_the_ca_signed(mutual_api: str, pki: Path) -> None:
    assert (
        httpx.get(mutual_api + "/healthz", verify=client_context(pki, "client"), timeout=5).status_code == 200
    )
    for who in (None, "stranger"):
        with pytest.raises(httpx.HTTPError):
            httpx.get(mutual_api + "/healthz", verify=client_context(pki, who), timeout=5)


def test_tls_settings_that_cannot_work_are_refused_at_load(tmp_path: Path, pki: Path) -> None:
    base = {"sources": [{"type": "fabricsim"}]}
    cases = [
        ({"certfile": str(pki / "server.pem")}, "tls.certfile and tls.keyfile go together"),
        ({"certfile": str(tmp_path / "none.pem"), "keyfile": str(pki / "server.key")}, "no such file"),
        ({"client_ca": str(pki / "ca.pem")}, "need tls.certfile"),
    ]
    for tls, message in cases:
        with pytest.raises(ValueError, match=message):
            load_settings(None, tls=tls, **base)
    tls = {"certfile": str(pki / "server.pem"), "keyfile": str(pki / "server.key")}
    with pytest.raises(ValueError, match="https:// only"):
        cluster = {"advertise_url": "http://a:8000", "nats_url": "nats://n:4222"}
        load_settings(None, tls=tls, database_url="postgresql+psycopg://x@h/db", cluster=cluster, **base)


def test_a_follower_reaches_a_mutual_tls_leader_with_its_own_certificate(mutual_api: str, pki: Path) -> None:
    """The relay's client (cluster/forward.py) trusts tls.ca and shows tls.certfile: what a
    follower needs to hand a request to the leader when every client must show a certificate."""
    import asyncio
    from types import SimpleNamespace

    from graywire.service.cluster.forward import LeaderRelay

    tls = {"certfile": str(pki / "client.pem"), "keyfile": str(pki / "client.key"),
           "client_ca": str(pki / "ca.pem"), "ca": str(pki / "ca.pem")}  # fmt: skip
    settings = load_settings(None, sources=[{"type": "fabricsim"}], tls=tls)
    relay = LeaderRelay(SimpleNamespace(settings=settings))  # type: ignore[arg-type]

    async def ask() -> int:
        try:
            return (await relay.client.get(mutual_api + "/healthz", timeout=10)).status_code
        finally:
            await relay.aclose()

    assert asyncio.run(ask()) == 200
