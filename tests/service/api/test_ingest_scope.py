"""Scoped ingest tokens: a push names only its token's jobs and hosts, from a static list or
from where the scheduler (a real Slurm, real slurmrestd, a Kubernetes API) runs the job."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import SchedulerSettings, load_settings
from graywire.service.ingest.scope import JobPlacement
from tests.service.api.test_ingest import inspector_record
from tests.service.conftest import SlurmRestd
from tests.service.schedsync.fake_kube_api import FakeKubeApi, make_node, make_pod, serve
from tests.service.schedsync.slurm_cluster import SlurmCluster

TOKEN = "scoped-ingest-token-0123"
OPEN_TOKEN = "open-ingest-token-01234"


def make_client(tmp_path: Path, scope: dict[str, Any], **overrides: Any) -> TestClient:
    """The app over an 8-host fabric (gpu-0000..gpu-0007), with one scoped and one open token."""
    settings = load_settings(
        None,
        data_dir=tmp_path / "data",
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8, "seed": 1}],
        auth={
            "tokens": [
                {"name": "trainer", "role": "ingest", "token": TOKEN, "scope": scope},
                {"name": "open", "role": "ingest", "token": OPEN_TOKEN},
            ]
        },
        **overrides,
    )
    c = TestClient(create_app(settings, run_loop=False))
    c.headers["authorization"] = f"Bearer {TOKEN}"
    return c


def push(c: TestClient, job: str, *hosts: str, token: str = TOKEN) -> Any:
    body = "".join(inspector_record(h, time.time()) for h in hosts).encode()
    return c.post(
        "/api/v1/ingest/nccl",
        params={"job": job},
        content=body,
        headers={"content-type": "application/x-ndjson", "authorization": f"Bearer {token}"},
    )


def metric(c: TestClient, line: str) -> bool:
    return any(x.startswith(line) for x in c.get("/metrics").text.splitlines())


# -- a static list ----------------------------------------------------------------------------


def test_a_static_scope_admits_its_jobs_and_hosts_only(tmp_path: Path) -> None:
    with make_client(tmp_path, {"jobs": ["train-*"], "hosts": "gpu-000[1-2]"}) as c:
        r = push(c, "train-7", "gpu-0001", "gpu-0002")
        assert (r.status_code, r.json()["accepted_rows"]) == (202, 2), r.text

        r = push(c, "train-7", "gpu-0001", "gpu-0003")
        assert r.status_code == 403
        assert r.json()["detail"] == "1 rows name hosts outside token 'trainer''s scope: 'gpu-0003'"
        assert metric(c, 'graywire_rejected_rows_total{reason="out_of_scope",record="nccl_timing"} 1.0')

        # Another job is refused before its body is read: a body that is no JSON at all is a 403.
        r = c.post("/api/v1/ingest/nccl", params={"job": "eval-1"}, content=b"not json\n")
        assert r.status_code == 403
        assert r.json()["detail"] == "token 'trainer' may push only for jobs matching train-*, not 'eval-1'"
        assert metric(
            c, 'graywire_ingest_refused_pushes_total{reason="job_out_of_scope",token="trainer"} 1.0'
        )

        # A token without a scope keeps the old rule: any host of the fabric model, any job.
        r = push(c, "eval-1", "gpu-0003", "gpu-0007", token=OPEN_TOKEN)
        assert (r.status_code, r.json()["accepted_rows"]) == (202, 2), r.text
        assert len(list(c.app.state.runner._pushed)) == 2  # type: ignore[attr-defined]


def test_out_of_scope_rows_are_dropped_and_counted_when_unknown_hosts_drop(tmp_path: Path) -> None:
    scope = {"hosts": ["gpu-0001", "gpu-0002"]}
    with make_client(tmp_path, scope, ingest={"unknown_hosts": "drop"}) as c:
        r = push(c, "any", "gpu-0001", "gpu-0005", "gpu-0006")
        assert (r.status_code, r.json()["accepted_rows"]) == (202, 1), r.text
        (queued,) = list(c.app.state.runner._pushed)  # type: ignore[attr-defined]
        assert set(queued.column("host").to_pylist()) == {"gpu-0001"}
        assert metric(c, 'graywire_rejected_rows_total{reason="out_of_scope",record="nccl_timing"} 2.0')


# -- Slurm: squeue against the real slurmctld -------------------------------------------------


@pytest.fixture
def running_job(slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A job running on the cluster's one node (gpu-0001), cancelled afterwards."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    job = slurm.submit(f"--nodelist={slurm.node}", "--job-name=train-scope", "--wrap=sleep 600")
    try:
        slurm.wait_for_job(job, lambda s: s == "RUNNING")
        yield job
    finally:
        slurm.cancel(job)


def test_a_slurm_scope_admits_the_hosts_squeue_gives_the_job(
    running_job: str, slurm: SlurmCluster, tmp_path: Path
) -> None:
    with make_client(tmp_path, {"scheduler": "slurm"}) as c:
        r = push(c, running_job, "gpu-0001")
        assert (r.status_code, r.json()["accepted_rows"]) == (202, 1), r.text

        r = push(c, running_job, "gpu-0001", "gpu-0002")  # gpu-0002 is a fabric host, not the job's
        assert r.status_code == 403
        assert r.json()["detail"] == "1 rows name hosts outside token 'trainer''s scope: 'gpu-0002'"
        # The answer is cached (scheduler.cache, 30 s): two pushes, one squeue.
        assert c.app.state.ingest.placement.lookups == {"slurm": 1}  # type: ignore[attr-defined]

        # The node has one CPU: a second job waits in the queue, holding no node.
        pending = slurm.submit(f"--nodelist={slurm.node}", "--wrap=sleep 600")
        try:
            assert slurm.job_state(pending) == "PENDING"
            r = push(c, pending, "gpu-0001")
            assert r.status_code == 403
            assert r.json()["detail"].endswith(f"(slurm: job {pending!r} is not running)")
        finally:
            slurm.cancel(pending)

        r = push(c, "999999", "gpu-0001")  # no such job
        assert r.status_code == 403 and r.json()["detail"].endswith("(slurm: job '999999' is unknown)")
        r = push(c, "--help", "gpu-0001")  # never handed to squeue as an option
        assert r.status_code == 403 and r.json()["detail"].endswith("is unknown)")


def test_static_hosts_and_the_scheduler_add_up(running_job: str, tmp_path: Path) -> None:
    """A static host passes without asking Slurm; the job's own hosts come from squeue."""
    with make_client(tmp_path, {"scheduler": "slurm", "hosts": ["gpu-0007"]}) as c:
        assert push(c, running_job, "gpu-0007").status_code == 202
        assert c.app.state.ingest.placement.lookups == {}  # type: ignore[attr-defined]
        r = push(c, running_job, "gpu-0001", "gpu-0007")
        assert (r.status_code, r.json()["accepted_rows"]) == (202, 2), r.text
        assert push(c, running_job, "gpu-0003").status_code == 403


def test_a_scheduler_that_cannot_be_asked_refuses_the_push(running_job: str, tmp_path: Path) -> None:
    with make_client(
        tmp_path, {"scheduler": "slurm"}, scheduler={"slurm": {"squeue": str(tmp_path / "no-squeue")}}
    ) as c:
        r = push(c, running_job, "gpu-0001")
        assert r.status_code == 503
        assert r.headers["retry-after"] == "5"
        assert r.json()["detail"].startswith(
            f"cannot tell where job {running_job!r} runs, so this push is refused"
        )
        assert "no-squeue not found" in r.json()["detail"]
        assert metric(
            c, 'graywire_rejected_rows_total{reason="scheduler_unavailable",record="nccl_timing"} 1.0'
        )
        assert metric(
            c, 'graywire_ingest_refused_pushes_total{reason="scheduler_unavailable",token="trainer"} 1.0'
        )
        # A failure is not cached: the next push asks again.
        assert push(c, running_job, "gpu-0001").status_code == 503
        assert c.app.state.ingest.placement.lookups == {"slurm": 2}  # type: ignore[attr-defined]


# -- slurmrestd: the real one, in front of the same slurmctld ---------------------------------


def test_a_slurmrest_scope_reads_the_job_from_slurmrestd(
    running_job: str, slurmrestd: SlurmRestd, tmp_path: Path
) -> None:
    jwt = tmp_path / "slurm.jwt"
    jwt.write_text(f"SLURM_JWT={slurmrestd.token}\n")  # as `scontrol token > file` writes it
    rest = {"url": slurmrestd.url, "user": slurmrestd.user, "token_file": str(jwt)}
    rest["api_version"] = slurmrestd.api_version
    with make_client(tmp_path, {"scheduler": "slurmrest"}, scheduler={"slurmrest": rest}) as c:
        r = push(c, running_job, "gpu-0001")
        assert (r.status_code, r.json()["accepted_rows"]) == (202, 1), r.text
        r = push(c, running_job, "gpu-0004")
        assert r.status_code == 403 and "'gpu-0004'" in r.json()["detail"]
        r = push(c, "999999", "gpu-0001")
        assert r.status_code == 403 and r.json()["detail"].endswith("(slurmrest: job '999999' is unknown)")

        # A JWT slurmctld refuses (read anew from the file): slurmrestd 22.05 says only "Unable
        # to find JobId" with an unspecified error, not "invalid job id": unknown, not trusted.
        jwt.write_text("not-a-jwt\n")
        r = push(c, "424242", "gpu-0001")
        assert r.status_code == 503, r.text
        assert "job/424242: HTTP 500: Unable to find JobId=424242" in r.json()["detail"]


def test_a_slurmrest_scope_refuses_when_slurmrestd_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        rest = {"url": f"http://127.0.0.1:{port}", "user": "nobody", "token": "jwt"}
        with make_client(tmp_path, {"scheduler": "slurmrest"}, scheduler={"slurmrest": rest}) as c:
            r = push(c, "17", "gpu-0001")
    assert r.status_code == 503
    assert "slurmrest: slurmrestd GET /slurm/v0.0.41/job/17" in r.json()["detail"]


# -- Kubernetes: the pods of the job, from an API server speaking the wire format -------------


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeKubeApi, Path]]:
    api = FakeKubeApi(token="kube-token")
    for n in ("gpu-0001", "gpu-0002", "gpu-0003"):
        api.add(make_node(n))
    job = {"batch.kubernetes.io/job-name": "train-a"}
    api.pods += [
        make_pod("train-a-0", "default", "gpu-0001", job),
        make_pod("train-a-1", "default", "gpu-0002", job),
        make_pod("train-a-2", "default", "gpu-0003", job, phase="Succeeded"),  # done: not the job's now
        make_pod("train-a-3", "default", None, job, phase="Pending"),
        make_pod("other-0", "default", "gpu-0004", {"batch.kubernetes.io/job-name": "other"}),
        make_pod("train-a-0", "ml", "gpu-0005", job),  # the same job name in another namespace
    ]
    server = serve(api)
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": api.url}}],
            "users": [{"name": "graywire", "user": {"token": api.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "graywire"}}],
        })
    )  # fmt: skip
    try:
        yield api, path
    finally:
        server.shutdown()
        server.server_close()


def test_a_kubernetes_scope_admits_the_nodes_of_the_jobs_running_pods(
    kube: tuple[FakeKubeApi, Path], tmp_path: Path
) -> None:
    api, kubeconfig = kube
    with make_client(
        tmp_path, {"scheduler": "kubernetes"}, scheduler={"kubernetes": {"kubeconfig": str(kubeconfig)}}
    ) as c:
        r = push(c, "train-a", "gpu-0001", "gpu-0002")
        assert (r.status_code, r.json()["accepted_rows"]) == (202, 2), r.text
        r = push(c, "train-a", "gpu-0003", "gpu-0004")  # a finished pod's node, another job's
        assert r.status_code == 403
        assert "'gpu-0003', 'gpu-0004'" in r.json()["detail"]
        r = push(c, "ml/train-a", "gpu-0005")  # <namespace>/<job>
        assert r.status_code == 202, r.text
        r = push(c, "gone", "gpu-0001")
        assert r.status_code == 403 and r.json()["detail"].endswith("(kubernetes: job 'gone' is not running)")
        # A name that is no label value cannot widen the selector ("train-a,x!=y").
        r = push(c, "train-a,x!=y", "gpu-0001")
        assert r.status_code == 403 and r.json()["detail"].endswith("is unknown)")
    lists = [q for q in api.requests if q["path"].endswith("/pods")]
    assert [q["path"] for q in lists] == ["/api/v1/namespaces/default/pods", "/api/v1/namespaces/ml/pods",
                                          "/api/v1/namespaces/default/pods"]  # fmt: skip


def test_a_kubernetes_scope_refuses_when_the_api_server_refuses(
    kube: tuple[FakeKubeApi, Path], tmp_path: Path
) -> None:
    api, kubeconfig = kube
    api.token = "another-token"  # graywire's credentials no longer work: 401
    with make_client(
        tmp_path, {"scheduler": "kubernetes"}, scheduler={"kubernetes": {"kubeconfig": str(kubeconfig)}}
    ) as c:
        r = push(c, "train-a", "gpu-0001")
    assert r.status_code == 503
    assert "kubernetes: list pods of job default/train-a: HTTP 401" in r.json()["detail"]


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ({"role": "ingest", "scope": {"jobs": ["x*"]}}, "a scope needs hosts, a scheduler, or both"),
        ({"role": "ingest", "scope": {"hosts": "gpu-[1-"}}, "'gpu-[1-' is not a hostlist"),
        ({"role": "ingest", "scope": {"scheduler": "pbs"}}, "auth.tokens.0.scope.scheduler"),
        ({"role": "ingest", "scope": {"scheduler": "slurmrest"}}, "needs scheduler.slurmrest.url"),
        ({"role": "operator", "scope": {"hosts": "gpu-0001"}}, "a scope applies to ingest tokens"),
        ({"role": "ingest", "rate_limit": {"requests_per_second": 0}}, "rate_limit.requests_per_second"),
        ({"role": "ingest", "rate_limit": {"rows_burst": 5}}, "rows_burst needs rows_per_second"),
    ],
)
def test_bad_scopes_and_limits_are_refused_at_start_up(token: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="invalid configuration") as e:
        load_settings(None, auth={"tokens": [{"name": "t", "token": "t" * 16, **token}]})
    assert message in str(e.value)


# -- the cache in front of the schedulers -----------------------------------------------------


def test_concurrent_pushes_of_a_job_share_one_lookup_and_answers_expire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A flood of pushes for one job asks the scheduler once per ``scheduler.cache``."""
    now = [0.0]
    placement = JobPlacement(SchedulerSettings(cache="30s"), clock=lambda: now[0])
    release = threading.Event()
    calls: list[str] = []

    def lookup(scheduler: str, job: str) -> frozenset[str]:
        calls.append(job)
        release.wait(timeout=30)
        return frozenset({"gpu-0001"})

    monkeypatch.setattr(placement, "_lookup", lookup)

    async def flood() -> list[Any]:
        tasks = [asyncio.create_task(placement.hosts("slurm", "17")) for _ in range(50)]
        await asyncio.sleep(0)  # every push is waiting before the one lookup answers
        release.set()
        return await asyncio.gather(*tasks)

    assert asyncio.run(flood()) == [frozenset({"gpu-0001"})] * 50
    assert calls == ["17"]
    now[0] = 29.0
    asyncio.run(placement.hosts("slurm", "17"))
    assert calls == ["17"]
    now[0] = 31.0  # expired: asked again
    asyncio.run(placement.hosts("slurm", "17"))
    assert calls == ["17", "17"]
