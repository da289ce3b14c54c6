"""Detector tuning from the service's configuration: ``detectors: {<detector>: {<setting>: value}}``.

Each detector's config is a frozen dataclass beside it; docs/detectors.md lists every setting
and its default. An override replaces a setting by name, and a nested config (``hysteresis``)
takes a mapping of its own settings. An unknown detector or setting, or a value of the wrong
type, is refused with its path (``detectors.nccl_bootstrap.stall_timeout``), so a typo never
leaves the default in force unnoticed. Ranges are the configs' own checks, run on the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, is_dataclass, replace
from typing import Any, TypeVar

from graywire.detectors.ber import BerConfig
from graywire.detectors.checkpoint import CheckpointConfig
from graywire.detectors.congestion import EcnHotspotConfig, PfcStormConfig, XmitWaitConfig
from graywire.detectors.link_flap import LinkFlapConfig
from graywire.detectors.link_state import LinkDowngradeConfig
from graywire.detectors.multivariate import MultivariateConfig
from graywire.detectors.nccl_bootstrap import NcclBootstrapConfig
from graywire.detectors.nccl_channel import NcclChannelConfig
from graywire.detectors.nccl_fault import NcclFaultConfig
from graywire.detectors.nccl_peer import NcclHopConfig
from graywire.detectors.nccl_step import NcclStepTimeConfig
from graywire.detectors.nccl_straggler import NcclStragglerConfig
from graywire.detectors.nccl_topology import NcclTopologyConfig
from graywire.detectors.nccl_transport import NcclTransportConfig
from graywire.detectors.nic_affinity import NicAffinityConfig
from graywire.detectors.saturation import SaturationConfig
from graywire.detectors.topology import TopologyConfig
from graywire.detectors.uplink_balance import UplinkBalanceConfig

#: Detector name (its findings' ``detector`` field, before the version) -> its config class.
CONFIGS: dict[str, type] = {
    "link_downgrade": LinkDowngradeConfig,
    "link_flap": LinkFlapConfig,
    "ber": BerConfig,
    "pfc_storm": PfcStormConfig,
    "ecn_hotspot": EcnHotspotConfig,
    "xmit_wait_hotspot": XmitWaitConfig,
    "counter_saturation": SaturationConfig,
    "nccl_channel_outlier": NcclChannelConfig,
    "nccl_straggler": NcclStragglerConfig,
    "nccl_step_time": NcclStepTimeConfig,
    "nccl_transport": NcclTransportConfig,
    "nccl_hop": NcclHopConfig,
    "topology": TopologyConfig,
    "nccl_fault": NcclFaultConfig,
    "nic_affinity": NicAffinityConfig,
    "nccl_bootstrap": NcclBootstrapConfig,
    "nccl_topology": NcclTopologyConfig,
    "checkpoint": CheckpointConfig,
    "uplink_balance": UplinkBalanceConfig,
    "multivariate_outlier": MultivariateConfig,
}

C = TypeVar("C")
Tuning = Mapping[str, Mapping[str, Any]]


def check(tuning: Tuning | None) -> None:
    """Raise ``ValueError`` naming the first unknown detector, setting or ill-typed value."""
    for name in tuning or {}:
        config(name, tuning)


def config(name: str, tuning: Tuning | None) -> Any:
    """The config of detector ``name``: its defaults with the configured overrides applied."""
    if name not in CONFIGS:
        raise ValueError(f"detectors.{name}: no such detector; known: {', '.join(sorted(CONFIGS))}")
    base = CONFIGS[name]()
    overrides = (tuning or {}).get(name)
    return base if overrides is None else tuned(base, overrides, f"detectors.{name}")


def tuned(base: C, overrides: Mapping[str, Any], where: str) -> C:
    """``base`` with ``overrides`` applied, each checked against the type of the value it replaces."""
    if not isinstance(overrides, Mapping):
        raise ValueError(f"{where}: expected a mapping of settings, got {overrides!r}")
    known = {f.name for f in fields(base)}  # type: ignore[arg-type]
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(f"{where}.{key}: no such setting; known: {', '.join(sorted(known))}")
        current = getattr(base, key)
        changes[key] = (
            tuned(current, value, f"{where}.{key}")
            if is_dataclass(current)
            else _value(current, value, f"{where}.{key}")
        )
    try:
        return replace(base, **changes)  # type: ignore[type-var]
    except (TypeError, ValueError) as e:  # the config's own range checks
        raise ValueError(f"{where}: {e}") from None


_KIND = {bool: "true or false", int: "whole number", float: "number", str: "string", tuple: "list",
         type(None): "number or string"}  # fmt: skip


def _value(current: Any, value: Any, where: str) -> Any:
    """``value`` if it has the type of the default it replaces (an int for a float, a list for a
    tuple); a default of None takes a number or a string."""
    ok: bool
    if isinstance(current, bool):
        ok = isinstance(value, bool)
    elif isinstance(current, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(current, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(current, str):
        ok = isinstance(value, str)
    elif isinstance(current, tuple):
        ok = isinstance(value, list | tuple)
        value = tuple(value) if ok else value
    elif current is None:
        ok = isinstance(value, int | float | str) and not isinstance(value, bool)
    else:
        ok = False
    if not ok:
        kind = _KIND.get(type(current), type(current).__name__)
        raise ValueError(f"{where}: {value!r} is not a {kind} like its default {current!r}")
    return value
