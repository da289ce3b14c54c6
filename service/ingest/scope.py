"""Where a job runs now, as its scheduler says: the hosts a scoped ingest token's push may name.

A push is the job's own word about itself; the scheduler is not the job. So a token scoped to
a scheduler (docs/security.md) may name only the hosts Slurm (``squeue`` or slurmrestd) or
Kubernetes (the nodes of the job's running pods) say the job holds. Answers are cached for
``scheduler.cache`` and concurrent lookups of one job share one call, so a push flood asks
the scheduler once per job and period; calls run in a worker thread, off the event loop. A
scheduler that cannot be asked is :class:`SchedulerUnavailable`: unknown is not trusted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal

from graywire.service.config import SchedulerSettings
from graywire.service.schedsync.plan import SchedulerError

log = logging.getLogger("graywire.ingest")

SchedulerName = Literal["slurm", "slurmrest", "kubernetes"]
#: Hosts of a job (a set or a hostlist), or None: the scheduler knows no such job.
JobHosts = Collection[str] | None
#: Jobs whose answers are remembered at once; past it expired answers go first, then the oldest.
MAX_CACHED_JOBS = 10_000


class SchedulerUnavailable(Exception):
    """The scheduler could not say where the job runs (unreachable, failing, misconfigured)."""


class JobPlacement:
    """The hosts each job runs on, per scheduler, cached briefly."""

    def __init__(self, settings: SchedulerSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.ttl = settings.cache.total_seconds()
        self.timeout = settings.timeout.total_seconds()
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, JobHosts]] = {}
        self._inflight: dict[tuple[str, str], asyncio.Task[JobHosts]] = {}
        self._rest: Any = None
        self._kube: Any = None
        #: Cache misses, by scheduler: at most one call to the scheduler each.
        self.lookups: dict[str, int] = {}

    async def hosts(self, scheduler: SchedulerName, job: str) -> JobHosts:
        """The hosts ``job`` holds now (empty: known but not running), or None for no such job."""
        key = (scheduler, job)
        cached = self._cache.get(key)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        task = self._inflight.get(key)
        if task is None:
            # A task of its own: a caller that goes away (a client hanging up) does not cancel
            # the lookup others wait on.
            task = asyncio.create_task(self._fetch(scheduler, job))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._inflight[key] = task
        return await asyncio.shield(task)

    async def _fetch(self, scheduler: SchedulerName, job: str) -> JobHosts:
        key = (scheduler, job)
        try:
            self.lookups[scheduler] = self.lookups.get(scheduler, 0) + 1
            result = await asyncio.to_thread(self._lookup, scheduler, job)
        finally:
            del self._inflight[key]
        if self.ttl > 0:
            self._remember(key, result)
        return result

    def _remember(self, key: tuple[str, str], result: JobHosts) -> None:
        now = self._clock()
        if len(self._cache) >= MAX_CACHED_JOBS:
            for k in [k for k, (until, _) in self._cache.items() if until <= now]:
                del self._cache[k]
            while len(self._cache) >= MAX_CACHED_JOBS:
                del self._cache[next(iter(self._cache))]
        self._cache.pop(key, None)
        self._cache[key] = (now + self.ttl, result)

    def _lookup(self, scheduler: SchedulerName, job: str) -> JobHosts:
        """One call to the scheduler (in a worker thread); every failure as SchedulerUnavailable."""
        try:
            if scheduler == "slurm":
                from graywire.service.schedsync.slurm import job_hosts

                return job_hosts(job, self.settings.slurm.squeue, self.timeout)
            if scheduler == "slurmrest":
                return self._slurmrest().job_hosts(job)
            namespace, _, name = job.rpartition("/")
            k = self.settings.kubernetes
            return self._kubernetes().job_hosts(namespace or k.namespace, k.job_label, name, self.timeout)
        except (SchedulerError, ValueError, OSError) as e:
            log.warning("%s: cannot place job %r: %s", scheduler, job, e)
            raise SchedulerUnavailable(f"{scheduler}: {e}") from e
        except Exception as e:  # a client's surprise is still no answer: refuse, never a 500
            log.exception("%s: cannot place job %r", scheduler, job)
            raise SchedulerUnavailable(f"{scheduler}: {type(e).__name__}: {e}") from e

    def _slurmrest(self) -> Any:
        from graywire.service.schedsync.slurm_rest import SlurmRestBackend

        cfg = self.settings.slurmrest
        if cfg is None:
            raise ValueError("scheduler.slurmrest is not configured")
        if self._rest is None:
            self._rest = SlurmRestBackend(
                cfg.url, user=cfg.user, token=cfg.token, api_version=cfg.api_version, timeout=self.timeout
            )
        if cfg.token_file is not None:
            self._rest.use_token(_read_jwt(cfg.token_file))
        return self._rest

    def _kubernetes(self) -> Any:
        from graywire.service.schedsync.k8s import KubernetesBackend, load_core_api

        if self._kube is None:
            k = self.settings.kubernetes
            api = load_core_api(
                kubeconfig=str(k.kubeconfig) if k.kubeconfig else None,
                context=k.context,
                in_cluster=k.in_cluster,
            )
            self._kube = KubernetesBackend(api)
        return self._kube

    def close(self) -> None:
        if self._rest is not None:
            self._rest.close()
        if self._kube is not None:
            self._kube.api.api_client.close()


def _read_jwt(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise ValueError(f"cannot read scheduler.slurmrest.token_file {path}: {e.strerror}") from e
    return token.removeprefix("SLURM_JWT=")  # `scontrol token > file` writes the variable form
