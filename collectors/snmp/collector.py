"""The SNMP collector: one per switch, sharing a session (concurrency bound, SNMPv3 engines) per source."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import pyarrow as pa

from graywire.collectors.base import ScrapeResult, Skips, failed
from graywire.collectors.model import Fabric
from graywire.collectors.snmp.config import SnmpSourceConfig, SnmpTarget
from graywire.collectors.snmp.lldp import LLDP_COLUMNS, parse_lldp
from graywire.collectors.snmp.oids import Oid
from graywire.collectors.snmp.parse import PortSelector, build_batch, columns_to_walk, sys_name
from graywire.collectors.snmp.walk import SnmpError, SnmpSession, Tables, auth_data, walk_columns

SOURCE = "snmp"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class SnmpCollector:
    """Polls one switch: bulk walks of IF-MIB and PFC tables -> one ``port_sample`` batch.

    A poll waits for a slot of the source's concurrency bound, then must finish within
    ``timeout_s``; a request is never retried, the service runner retries the poll. With ``lldp``
    the first poll, and then the first one ``lldp_every`` after the last that read it, also walks
    LLDP-MIB in the same requests and adds a ``link`` batch of the switch's cables (none when the
    agent has no LLDP-MIB: that is not news that every cable is gone).
    """

    source = SOURCE

    def __init__(
        self,
        cfg: SnmpSourceConfig,
        target: SnmpTarget,
        session: SnmpSession | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.cfg = cfg
        self.spec = target
        self.session = session or SnmpSession(cfg.max_concurrency)
        self.clock = clock
        where = f"{target.host}:{target.port}"
        self.target = f"{target.name}@{where}" if target.name else where
        self._auth = auth_data(cfg, target)
        self._columns = columns_to_walk(cfg, need_sys_name=target.name is None)
        self._lldp_columns = sorted({*self._columns, *LLDP_COLUMNS})
        self._lldp_at: datetime | None = None
        self._selector = PortSelector(cfg)
        self._port_dict: pa.Array | None = None
        v3 = cfg.v3 if cfg.version == "3" else None
        self._config_error: str | None = None
        if v3 is not None and v3.priv_key is not None and importlib.util.find_spec("cryptography") is None:
            self._config_error = "SNMPv3 privacy (priv_key) needs cryptography: pip install 'graywire[snmp]'"

    def _lldp_due(self, now: datetime) -> bool:
        if not self.cfg.lldp:
            return False
        return self._lldp_at is None or now - self._lldp_at >= self.cfg.lldp_every or now < self._lldp_at

    async def _walk(self, columns: list[Oid] | None = None) -> Tables:
        spec = self.spec
        async with self.session.open(
            spec.host, spec.port, self._auth, spec.context, self.cfg.request_timeout_s
        ) as agent:
            return await walk_columns(
                agent.bulk,
                self._columns if columns is None else columns,
                max_repetitions=self.cfg.max_repetitions,
                max_varbinds=self.cfg.max_varbinds,
            )

    async def aclose(self) -> None:
        """Forget the session's SNMPv3 engines; it is shared, and closing it again is a no-op."""
        self.session.close()

    async def scrape(self) -> ScrapeResult:
        t0 = time.perf_counter()
        if self._config_error:
            return failed(SOURCE, self.target, self._config_error)
        try:
            async with self.session.semaphore():
                now = self.clock()
                lldp = self._lldp_due(now)
                try:
                    async with asyncio.timeout(self.cfg.timeout_s):
                        tables = await (self._walk(self._lldp_columns) if lldp else self._walk())
                except TimeoutError:
                    return failed(
                        SOURCE, self.target, f"no complete answer within {self.cfg.timeout_s:g} s",
                        time.perf_counter() - t0,
                    )  # fmt: skip
            switch = self.spec.name or sys_name(tables)
            if not switch or "/" in switch or switch != switch.strip():
                return failed(
                    SOURCE, self.target, f"switch has no usable sysName ({switch!r}); set 'name' for it",
                    time.perf_counter() - t0,
                )  # fmt: skip
            ports = self._selector.ports(tables)
            skipped: Skips = Counter()
            # Thousands of ports' tables to columns: off the event loop the API answers on.
            batch = await asyncio.to_thread(
                build_batch, tables, switch, ports, now, self.cfg, self._port_dict, skipped
            )
            batches: tuple[pa.RecordBatch, ...] = (batch,)
            if lldp:
                view = await asyncio.to_thread(parse_lldp, tables, switch, ports, skipped)
                if view.has_lldp:
                    batches += (view.links,)
        except SnmpError as e:
            return failed(SOURCE, self.target, f"SNMP: {e}", time.perf_counter() - t0)
        except Exception as e:  # a collector never raises: garbage in is a failed scrape
            return failed(SOURCE, self.target, e, time.perf_counter() - t0)
        self._port_dict = batch.column("port").dictionary
        if lldp:
            self._lldp_at = now
        elapsed = time.perf_counter() - t0
        return ScrapeResult(
            SOURCE, self.target, ok=True, batches=batches, duration_s=elapsed, skipped=dict(skipped)
        )


def build_collectors(cfg: SnmpSourceConfig, fabric: Fabric | None = None) -> list[SnmpCollector]:
    """One collector per switch; they share one session (SNMPv3 engines, the concurrency bound).

    ``fabric`` is not needed: switch ports are named ``<switch>/<ifName>`` directly, which is
    how the inventory names Ethernet switch ports.
    """
    session = SnmpSession(cfg.max_concurrency)
    return [SnmpCollector(cfg, t, session) for t in cfg.targets]
