"""The fabric model from what the configured sources say: ``inventory: discover``.

The same discovery as ``graywire inventory discover`` (``collectors/discovery.py``), fed by the
service's own UFM source (REST ports and links) or, failing one, its SNMP sources' LLDP
neighbours, with the operator's ``discovery.expect`` and ``discovery.purpose`` rules.

The first start writes what it found to ``<data_dir>/inventory.discovered.yaml`` (reviewable,
like a discovered file) and later starts load that file instead of discovering again, so the
model a restart judges against is the one the fabric had when graywire first saw it: a cable
that moves afterwards is a ``cabling_changed`` finding, not a silent change of the model.
Delete the file to take the fabric as it is now.

Beside a declared inventory, ``discover: true`` discovers at every start and compares: the file
stays the model (the intent), what the fabric has that it lacks is logged and written to
``inventory.discovered.yaml`` for review, and cables that differ become findings of the
topology detector from the sources' link views.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from graywire.collectors.discovery import (
    Discovery,
    ExpectRule,
    PurposeRule,
    discover,
    facts_from_lldp,
    facts_from_ufm,
    nic_aliases,
)
from graywire.collectors.host.config import AgentSourceConfig
from graywire.collectors.model import Fabric, load_inventory
from graywire.collectors.snmp import SnmpSourceConfig
from graywire.collectors.ufm import UfmRestCollector, UfmSourceConfig
from graywire.service.config import Settings

log = logging.getLogger("graywire.discovery")

DISCOVERED = "inventory.discovered.yaml"


def ufm_topology(cfg: UfmSourceConfig) -> tuple[Any, Any]:
    """UFM REST ports and links, fetched with the UFM source's own settings and HTTP client."""
    collector = UfmRestCollector(cfg.url or "", None, cfg.http_settings())

    async def fetch() -> tuple[Any, Any]:
        try:
            out = []
            for resource in ("ports", "links"):
                body, _ = await collector.http.get_bytes(f"{collector.prefix}/resources/{resource}")
                out.append(json.loads(body))
            return out[0], out[1]
        finally:
            await collector.aclose()

    try:
        return asyncio.run(fetch())
    except Exception as e:  # httpx errors, UfmHttpError, bad JSON: one line for the operator
        raise ValueError(f"UFM {collector.target}: {e}") from None


async def _agent_ports(
    urls: list[str], timeout: float, limit: int = 64
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every agent's ``/v1/ports``, at most ``limit`` at once; one note per agent that failed."""
    gate = asyncio.Semaphore(limit)
    async with httpx.AsyncClient(timeout=timeout) as client:

        async def one(url: str) -> tuple[list[dict[str, Any]], str | None]:
            async with gate:
                try:
                    r = await client.get(f"{url}/v1/ports")
                    r.raise_for_status()
                    body = r.json()
                except (httpx.HTTPError, ValueError) as e:
                    return [], f"agent {url}: {type(e).__name__}: {e}"
                if not isinstance(body, list):
                    return [], f"agent {url}: /v1/ports is not a list"
                return [p for p in body if isinstance(p, dict)], None

        results = await asyncio.gather(*(one(u) for u in urls))
    return [p for ports, _ in results for p in ports], [n for _, n in results if n]


def agent_aliases(sources: list[AgentSourceConfig], hosts: list[str]) -> tuple[dict[str, str], list[str]]:
    """NIC names (netdev, MAC) -> graywire keys from the host agents of ``sources``; a
    ``url_template`` is expanded over ``hosts`` (the names LLDP neighbours gave)."""
    urls: list[str] = []
    for s in sources:
        urls += s.urls
        if s.url_template is not None:
            urls += [s.url_template.format(host=h) for h in hosts]
    urls = list(dict.fromkeys(u.rstrip("/") for u in urls))
    if not urls:
        return {}, []
    timeout = max(s.timeout for s in sources)
    ports, notes = asyncio.run(_agent_ports(urls, timeout))
    if len(notes) > 20:
        notes = [*notes[:20], f"... and {len(notes) - 20} more agent(s) not answering"]
    return nic_aliases(ports), notes


def lldp_topology(
    sources: list[SnmpSourceConfig], where: str, agents: list[AgentSourceConfig] | None = None
) -> tuple[pa.Table, pa.Table, list[str], str]:
    """LLDP neighbours of the switches of ``sources``, as port facts and cables; host NICs named
    by their RDMA devices where ``agents`` say which netdev or MAC each one is."""
    from graywire.collectors.snmp import walk_lldp  # here: pysnmp is the optional extra graywire[snmp]

    walked = [walk_lldp(s) for s in sources]
    switches = {n for w in walked for n in w.interfaces["switch"].to_pylist()}
    hosts = sorted({n for w in walked for n in w.neighbors["sys_name"].to_pylist() if n} - switches)
    aliases, notes = agent_aliases(agents or [], hosts)
    parts = [facts_from_lldp(w, aliases) for w in walked]
    facts = pa.concat_tables([f for f, _, _ in parts])
    links = pa.concat_tables([lk for _, lk, _ in parts])
    targets = sum(len(s.targets) for s in sources)
    notes += [n for _, _, ns in parts for n in ns]
    return facts, links, notes, f"LLDP over SNMP, {targets} switch(es) of {where}"


def _rules(settings: Settings) -> tuple[list[PurposeRule], list[ExpectRule]]:
    """The config's discovery rules (checked when it loaded)."""
    d = settings.discovery
    return [PurposeRule.parse(r) for r in d.purpose], [ExpectRule.parse(r) for r in d.expect]


def discover_from(
    settings: Settings, purpose: list[PurposeRule], expect: list[ExpectRule], where: str = "the config"
) -> Discovery:
    """Discover from the first UFM source, else from every SNMP source's LLDP."""
    ufm = [s for s in settings.sources if isinstance(s, UfmSourceConfig) and s.url]
    snmp = [s for s in settings.sources if isinstance(s, SnmpSourceConfig)]
    if ufm:
        ports, cables = ufm_topology(ufm[0])
        facts, links, notes, skipped = facts_from_ufm(ports, cables)
        source = f"UFM REST {ufm[0].url}"
        notes += [f"{n} UFM record(s) skipped ({reason})" for reason, n in skipped.items()]
    elif snmp:
        agents = [s for s in settings.sources if isinstance(s, AgentSourceConfig)]
        facts, links, notes, source = lldp_topology(snmp, where, agents)
    else:
        raise ValueError("inventory: discover needs a ufm source with a url, or snmp sources with LLDP")
    result = discover(facts, links, purpose_rules=purpose, expect_rules=expect, source=source)
    result.notes[:0] = notes
    return result


def discovered_fabric(settings: Settings) -> Fabric:
    """The model of ``inventory: discover``: the file a first start wrote, else discovered now."""
    path = settings.data_dir / DISCOVERED
    if path.exists():
        log.info("fabric model from %s (discovered earlier; delete it to discover again)", path)
        return load_inventory(path)
    result = discover_from(settings, *_rules(settings))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{path}.tmp")
    tmp.write_text(result.to_yaml())
    tmp.replace(path)
    f = result.fabric
    log.warning(
        "discovered %d nodes, %d ports, %d cables; wrote %s: review it (CHECK marks doubts)",
        len(f.node_names), f.n_ports, len(f.link_a), path,
    )  # fmt: skip
    for note in result.notes:
        log.warning("discovery: %s", note)
    return load_inventory(path)


def lldp_on(sources: list[Any]) -> list[Any]:
    """The sources with LLDP link views turned on for every snmp source that does not set
    ``lldp`` itself (discovery needs the cables to compare)."""
    return [
        s.model_copy(update={"lldp": True})
        if isinstance(s, SnmpSourceConfig) and "lldp" not in s.model_fields_set
        else s
        for s in sources
    ]


def compare_with_discovery(settings: Settings, declared: Fabric) -> dict[str, int] | None:
    """Discover now and compare with the declared model; None when the sources cannot tell.

    Never stops the service: a source that is away means the comparison is unknown, not that
    the fabric matches (the topology detector judges the cables once views arrive).
    """
    try:
        result = discover_from(settings, *_rules(settings))
    except Exception as e:  # the sources' errors, said in one line
        log.warning("discover: true, but discovery failed (%s); judging against the declared inventory", e)
        return None
    path = settings.data_dir / DISCOVERED
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_yaml())
    found = result.fabric
    declared_keys, found_keys = set(declared.keys), set(found.keys)

    def cables(f: Fabric) -> set[frozenset[str]]:
        return {frozenset((f.keys[a], f.keys[b])) for a, b in zip(f.link_a, f.link_b, strict=True)}

    declared_cables, found_cables = cables(declared), cables(found)
    diff = {
        "undeclared_ports": len(found_keys - declared_keys),
        "unseen_ports": len(declared_keys - found_keys),
        "undeclared_cables": len(found_cables - declared_cables),
        "unseen_cables": len(declared_cables - found_cables),
    }
    level = logging.WARNING if any(diff.values()) else logging.INFO
    log.log(
        level,
        "discovery against the declared inventory: %d port(s) and %d cable(s) the file lacks, %d port(s) "
        "and %d cable(s) not seen; review %s (the file stays the model)",
        diff["undeclared_ports"], diff["undeclared_cables"],
        diff["unseen_ports"], diff["unseen_cables"], path,
    )  # fmt: skip
    for key in sorted(found_keys - declared_keys)[:20]:
        log.warning("discovered, not declared: %s", key)
    return diff
