"""A real SNMP agent for the collector tests: snmpsim-command-responder in a subprocess.

The agent serves every ``*.snmprec`` in a data directory; a file's basename is its SNMPv2c
community and its SNMPv3 context name. It runs on a free UDP port of 127.0.0.1, is waited for
until it answers, and is stopped after the tests. Without the binary (it comes with the dev
extras), tests skip locally and fail under CI, so CI cannot pass by testing nothing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyasn1.codec.ber import encoder
from pysnmp.hlapi.v3arch.asyncio import (
    CommunityData,
    ContextData,
    ObjectIdentity,
    ObjectType,
    SnmpEngine,
    UdpTransportTarget,
    get_cmd,
)
from pysnmp.proto import api
from pysnmp.smi import builder, view

from graywire.collectors.snmp import asn1

BINARY = "snmpsim-command-responder"

#: SNMPv3 users every test agent knows: (user, auth protocol, auth key, priv protocol, priv key).
V3_PRIV = ("graywire-priv", "SHA", "authkey-graywire", "AES", "privkey-graywire")
V3_AUTH = ("graywire-auth", "SHA", "authkey-graywire-2", None, None)

#: The real recordings (../shared/fixtures/real/snmp), by the switch they come from.
REAL = {
    "arista": "librenms_arista_eos_7280r",
    "nxos": "librenms_nxos_n9k-c93180yc-fx3",
    "junos": "librenms_junos_qfx5130-32cd-evo",
    "sonic": "librenms_dell-sonic",
    "cumulus": "librenms_cumulus_mellanox",
}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"CI is set but {reason}", pytrace=False)
    pytest.skip(reason)


def snmpsim_binary() -> Path:
    """The responder installed beside this interpreter (the venv), else on PATH."""
    local = Path(sys.executable).parent / BINARY
    if local.exists():
        return local
    found = shutil.which(BINARY)
    if found:
        return Path(found)
    _unavailable(f"{BINARY} is not installed (pip install -e '.[dev]' installs snmpsim)")
    raise AssertionError("unreachable")


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pysnmp_response(varbinds: list[tuple[Any, Any]], error_status: int = 0, error_index: int = 0) -> asn1.Pdu:
    """A v2c Response carrying ``varbinds`` (pysnmp values), encoded by pysnmp and decoded by
    graywire's decoder: what the walker sees of an agent that answered so."""
    v2c = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
    pdu = v2c.ResponsePDU()
    v2c.apiPDU.set_defaults(pdu)
    v2c.apiPDU.set_request_id(pdu, 7)
    v2c.apiPDU.set_error_status(pdu, error_status)
    v2c.apiPDU.set_error_index(pdu, error_index)
    v2c.apiPDU.set_varbinds(pdu, varbinds)
    msg = v2c.Message()
    v2c.apiMessage.set_defaults(msg)
    v2c.apiMessage.set_community(msg, "public")
    v2c.apiMessage.set_pdu(msg, pdu)
    return asn1.decode_v2c(encoder.encode(msg))[1]


_MIB_VIEW: list[view.MibViewController] = []


async def _answers(port: int, community: str) -> bool:
    engine = SnmpEngine()
    if not _MIB_VIEW:  # loading the MIB view costs ~0.5 s: once per test run, not per probe
        _MIB_VIEW.append(view.MibViewController(builder.MibBuilder()))
    engine.cache["mibViewController"] = _MIB_VIEW[0]
    try:
        target = await UdpTransportTarget.create(("127.0.0.1", port), timeout=1, retries=0)
        err, status, _, _ = await get_cmd(
            engine,
            CommunityData(community, mpModel=1),
            target,
            ContextData(),
            ObjectType(ObjectIdentity("1.3.6.1.2.1.1.1.0")),
        )
        return not err and not int(status)
    finally:
        engine.close_dispatcher()


@dataclass
class SnmpsimServer:
    """One running snmpsim-command-responder."""

    data_dir: Path
    work_dir: Path
    port: int = field(default_factory=free_udp_port)
    command: list[str] = field(default_factory=list)
    #: SNMPv3 users the agent knows, besides V3_PRIV and V3_AUTH.
    users: tuple[tuple[str, str, str, str | None, str | None], ...] = ()
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.work_dir / "snmpsim.log"

    def start(self, binary: Path, probe_community: str, timeout_s: float = 60.0) -> None:
        cache = self.work_dir / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        self.command = [
            str(binary),
            f"--cache-dir={cache}",
            "--log-level=error",
            "--v3-engine-id=auto",
            f"--data-dir={self.data_dir}",
            f"--agent-udpv4-endpoint=127.0.0.1:{self.port}",
        ]
        for user, auth_proto, auth_key, priv_proto, priv_key in (V3_PRIV, V3_AUTH, *self.users):
            self.command += [f"--v3-user={user}", f"--v3-auth-key={auth_key}"]
            self.command += [f"--v3-auth-proto={auth_proto}"]
            if priv_key:
                self.command += [f"--v3-priv-key={priv_key}", f"--v3-priv-proto={priv_proto}"]
        # snmpsim refuses to run as root unless told it may (CI runs as root).
        env = {**os.environ, "SNMPSIM_ALLOW_ROOT": "true"}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log.read_text(errors="replace")[-1500:]
                self.process = None
                _unavailable(f"{BINARY} exited at start-up:\n{tail}")
            if asyncio.run(_answers(self.port, probe_community)):
                return
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"{BINARY} did not answer within {timeout_s:g} s; log: {self.log}")

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def start_snmpsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., SnmpsimServer]]:
    """Start an agent on a data directory (``probe_community`` must be one of its files)."""
    binary = snmpsim_binary()
    servers: list[SnmpsimServer] = []

    def start(data_dir: Path, probe_community: str, users: tuple[Any, ...] = ()) -> SnmpsimServer:
        server = SnmpsimServer(data_dir, tmp_path_factory.mktemp("snmpsim"), users=users)
        servers.append(server)
        server.start(binary, probe_community)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def real_agent(real_fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SnmpsimServer]:
    """An agent serving copies of the five real switch recordings."""
    binary = snmpsim_binary()
    data = tmp_path_factory.mktemp("real-snmprec")
    for name in REAL.values():
        src = real_fixtures / "snmp" / f"{name}.snmprec"
        if not src.exists():
            _unavailable(f"real recording {src} is missing")
        shutil.copyfile(src, data / src.name)
    server = SnmpsimServer(data, tmp_path_factory.mktemp("snmpsim"))
    server.start(binary, REAL["nxos"])
    try:
        yield server
    finally:
        server.stop()
