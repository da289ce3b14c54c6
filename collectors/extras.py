"""Optional dependencies: which extra brings each one, and one clear error when it is missing.

``pip install graywire`` installs what the service, the demo and the host agent need. Five
features pull in large packages and come as extras: the multivariate detector
(scikit-learn and scipy, ``graywire[ml]``), SNMP sources and LLDP discovery (pysnmp,
``graywire[snmp]``), the Kubernetes scheduler sync (the official client, ``graywire[k8s]``), PostgreSQL
(psycopg, ``graywire[postgres]``; SQLite needs nothing), and replicas (the NATS client,
``graywire[cluster]``).

Code that needs one of them imports it with :func:`require` where it is used, never at module
level, so nothing loads it unless that feature runs. Start-up asks :func:`available` for every
configured feature first (``Settings.check_extras``): a missing extra is one line naming the
feature and the ``pip install`` that fixes it, at start, not a traceback at the first scrape.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True, slots=True)
class Extra:
    package: str  # the distribution pip installs
    extra: str  # graywire[<extra>]


#: Top-level import name -> the distribution and the extra that bring it.
EXTRAS: dict[str, Extra] = {
    "sklearn": Extra("scikit-learn", "ml"),
    "pysnmp": Extra("pysnmp", "snmp"),
    "kubernetes": Extra("kubernetes", "k8s"),
    "psycopg": Extra("psycopg[binary]", "postgres"),
    "nats": Extra("nats-py", "cluster"),
}


class MissingExtra(ModuleNotFoundError, ValueError):
    """A feature in use needs an optional dependency that is not installed.

    A ``ModuleNotFoundError`` (it is one), and a ``ValueError`` so that the command line reports
    it in one line, as it does a bad setting.
    """


def missing_message(module: str, feature: str) -> str:
    """``<feature> needs <package>: pip install 'graywire[<extra>]'``."""
    e = EXTRAS[module.partition(".")[0]]
    return f"{feature} needs {e.package}: pip install 'graywire[{e.extra}]'"


def available(module: str) -> bool:
    """Whether ``module`` (a top-level name) is installed, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a None entry in sys.modules, a broken parent
        return False


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` (``sklearn.ensemble``, say) or raise :class:`MissingExtra`.

    An installed package that fails to import for want of one of its own dependencies (scipy
    missing under scikit-learn) is reported the same way, with the reason: reinstalling the
    extra mends both.
    """
    top = module.partition(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise missing_import(top, feature, e) from None


def missing_import(module: str, feature: str, error: ImportError) -> MissingExtra:
    """The :class:`MissingExtra` for an ``ImportError`` raised while importing ``module``."""
    message = missing_message(module, feature)
    if error.name is None or error.name.partition(".")[0] != module:
        message += f" (importing {module} failed: {error})"
    return MissingExtra(message, name=module)
