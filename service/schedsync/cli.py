"""``graywire slurm-sync`` and ``graywire k8s-sync``: arguments and wiring."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from graywire.service.schedsync.drainlist import DrainListClient
from graywire.service.schedsync.runner import Backend, run


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url",
        help="graywire API base URL (default $GRAYWIRE_URL, else http://127.0.0.1:8000)",
    )
    p.add_argument(
        "--token",
        help="bearer token for the API (default $GRAYWIRE_TOKEN)",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit with its status")
    p.add_argument("--interval", default="30s", help="time between passes in the loop (default 30s)")
    p.add_argument("--dry-run", action="store_true", help="log what would change, change nothing")
    p.add_argument("--timeout", type=float, default=10.0, help="API request timeout in seconds")


#: Options a deployment usually sets in the environment: option -> (variable, fallback).
FROM_ENVIRONMENT: dict[str, tuple[str, str | None]] = {
    "url": ("GRAYWIRE_URL", "http://127.0.0.1:8000"),
    "token": ("GRAYWIRE_TOKEN", None),
    "slurm_user": ("SLURM_USER", None),
    "slurm_token": ("SLURM_JWT", None),
}


def with_environment(args: argparse.Namespace) -> argparse.Namespace:
    """Fill options left unset from their environment variables, when the command runs (not
    when the parser is built, so building it reads nothing and ``--help`` shows no secrets)."""
    for option, (variable, fallback) in FROM_ENVIRONMENT.items():
        if hasattr(args, option) and getattr(args, option) is None:
            setattr(args, option, os.environ.get(variable) or fallback)
    return args


def _interval(args: argparse.Namespace) -> float:
    from graywire.collectors.units import parse_duration

    interval = parse_duration(args.interval)
    if interval <= 0:
        raise ValueError(f"--interval must be positive, got {args.interval!r}")
    return interval


def _run(args: argparse.Namespace, backend: Backend, interval: float) -> int:
    if not getattr(args, "verbose", False):  # one line per request every pass drowns the decisions
        logging.getLogger("httpx").setLevel(logging.WARNING)
    with DrainListClient(args.url, token=args.token, timeout=args.timeout) as client:
        return run(client, backend, once=args.once, interval_s=interval, dry_run=args.dry_run)


def cmd_slurm_sync(args: argparse.Namespace) -> int:
    args = with_environment(args)
    interval = _interval(args)
    if args.slurmrestd:
        from graywire.service.schedsync.slurm_rest import SlurmRestBackend

        rest = SlurmRestBackend(
            args.slurmrestd, user=args.slurm_user, token=args.slurm_token, api_version=args.slurmrestd_api
        )
        try:
            return _run(args, rest, interval)
        finally:
            rest.close()
    from graywire.service.schedsync.slurm import ScontrolBackend

    return _run(args, ScontrolBackend(args.scontrol), interval)


def cmd_k8s_sync(args: argparse.Namespace) -> int:
    from graywire.service.schedsync.k8s import KubernetesBackend, load_core_api

    args = with_environment(args)
    interval = _interval(args)
    api = load_core_api(kubeconfig=args.kubeconfig, context=args.context, in_cluster=args.in_cluster)
    try:
        return _run(args, KubernetesBackend(api), interval)
    finally:
        api.api_client.close()


def add_sync_commands(sub: Any) -> None:
    """Register both subcommands on the main parser's subparsers."""
    s = sub.add_parser("slurm-sync", help="drain/resume Slurm nodes to match graywire's drain list")
    _common(s)
    s.add_argument("--scontrol", default="scontrol", help="scontrol binary (SLURM_CONF applies)")
    s.add_argument("--slurmrestd", metavar="URL", help="use slurmrestd at URL instead of scontrol")
    s.add_argument("--slurmrestd-api", default="v0.0.41", help="slurmrestd API version (default v0.0.41)")
    s.add_argument("--slurm-user", help="X-SLURM-USER-NAME (default $SLURM_USER)")
    s.add_argument(
        "--slurm-token",
        help="X-SLURM-USER-TOKEN, a JWT from `scontrol token` (default $SLURM_JWT)",
    )
    s.set_defaults(func=cmd_slurm_sync)

    s = sub.add_parser("k8s-sync", help="cordon/taint Kubernetes nodes to match graywire's drain list")
    _common(s)
    s.add_argument("--kubeconfig", help="kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
    s.add_argument("--context", help="kubeconfig context")
    s.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    s.set_defaults(func=cmd_k8s_sync)
