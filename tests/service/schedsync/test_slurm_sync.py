"""``graywire slurm-sync`` against a real slurmctld + slurmd, fed by the drain API's JSON."""

from __future__ import annotations

import logging

import pytest

from graywire.service.cli import main
from graywire.service.schedsync.drainlist import DrainListClient
from graywire.service.schedsync.plan import Action
from graywire.service.schedsync.runner import run
from graywire.service.schedsync.slurm import ScontrolBackend
from tests.service.schedsync.conftest import DrainApi, drain_entry
from tests.service.schedsync.slurm_cluster import SlurmCluster


@pytest.fixture(autouse=True)
def _slurm_conf(slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))


def sync(api: DrainApi, *extra: str) -> int:
    return main(["slurm-sync", "--url", api.url, "--once", *extra])


def drained(fields: dict[str, str]) -> bool:
    return "DRAIN" in fields.get("State", "")


def test_drains_the_listed_node_then_resumes_it_when_the_fault_clears(
    slurm: SlurmCluster, drain_api: DrainApi
) -> None:
    drain_api.entries = [drain_entry(slurm.node, "gpu-0001/mlx5_2 negotiated 400G, expected 800G")]
    assert sync(drain_api) == 0
    fields = slurm.wait_for_state(drained)
    assert fields["Reason"].startswith("graywire: gpu-0001/mlx5_2 negotiated 400G, expected 800G [")

    assert sync(drain_api) == 0, "a second pass with the same list changes nothing"
    assert drained(slurm.node_fields())

    drain_api.entries = []
    assert sync(drain_api) == 0
    fields = slurm.wait_for_state(lambda f: not drained(f))
    assert "Reason" not in fields


def test_a_drain_set_by_a_person_is_never_undone(slurm: SlurmCluster, drain_api: DrainApi) -> None:
    slurm.scontrol("update", f"NodeName={slurm.node}", "State=DRAIN", "Reason=bad DIMM, ticket 4711")
    drain_api.entries = [drain_entry(slurm.node)]
    assert sync(drain_api) == 0
    assert slurm.node_fields()["Reason"].startswith("bad DIMM, ticket 4711 [")

    drain_api.entries = []
    assert sync(drain_api) == 0
    fields = slurm.node_fields()
    assert drained(fields) and fields["Reason"].startswith("bad DIMM, ticket 4711 [")


def test_a_person_acting_between_plan_and_apply_wins(slurm: SlurmCluster, drain_api: DrainApi) -> None:
    backend = ScontrolBackend()
    drain_api.entries = [drain_entry(slurm.node)]
    with DrainListClient(drain_api.url) as client:
        (drain,) = backend.plan(client.fetch()).actions
    slurm.scontrol("update", f"NodeName={slurm.node}", "State=DRAIN", "Reason=reseating a cable")
    assert backend.apply(drain) == "now IDLE+DRAIN (reseating a cable)"
    assert slurm.node_fields()["Reason"].startswith("reseating a cable [")
    assert backend.apply(Action(slurm.node, "resume")) == "no longer drained by graywire"
    assert drained(slurm.node_fields())
    assert backend.apply(Action("gpu-9999", "resume")) == "no longer a Slurm node"


def test_unreachable_api_changes_nothing_and_fails(
    slurm: SlurmCluster, drain_api: DrainApi, caplog: pytest.LogCaptureFixture
) -> None:
    drain_api.entries = [drain_entry(slurm.node)]
    assert sync(drain_api) == 0
    slurm.wait_for_state(drained)

    drain_api.status = 503
    with caplog.at_level(logging.ERROR):
        assert sync(drain_api) == 1
    assert "drain list unavailable, not acting" in caplog.text
    assert sync(drain_api, "--url", "http://127.0.0.1:9") == 1  # nothing listens on the discard port
    assert drained(slurm.node_fields()), "an unreadable list must not resume graywire's drains"


@pytest.mark.parametrize("mode", ["shadow", "dry-run"])
def test_shadow_mode_and_dry_run_only_report(
    mode: str, slurm: SlurmCluster, drain_api: DrainApi, caplog: pytest.LogCaptureFixture
) -> None:
    drain_api.entries = [drain_entry(slurm.node)]
    drain_api.shadow = mode == "shadow"
    with caplog.at_level(logging.INFO):
        assert sync(drain_api, *(["--dry-run"] if mode == "dry-run" else [])) == 0
    assert f"would drain {slurm.node} (graywire: link downgraded to 400G)" in caplog.text
    assert not drained(slurm.node_fields())


def test_tripped_circuit_breaker_drains_nothing_new(slurm: SlurmCluster, drain_api: DrainApi) -> None:
    drain_api.entries = [drain_entry(slurm.node)]
    drain_api.tripped = True
    assert sync(drain_api) == 0
    assert not drained(slurm.node_fields())


def test_bearer_token_is_sent(slurm: SlurmCluster, drain_api: DrainApi) -> None:
    drain_api.token = "s3cret"
    assert sync(drain_api) == 1
    assert sync(drain_api, "--token", "s3cret") == 0
    assert drain_api.requests[-1] == ("/api/v1/drain", "Bearer s3cret")


def test_loop_follows_the_list_between_passes(slurm: SlurmCluster, drain_api: DrainApi) -> None:
    drain_api.entries = [drain_entry(slurm.node)]
    seen: list[bool] = []

    def between_passes(_: float) -> None:
        seen.append(drained(slurm.wait_for_state(lambda f: drained(f) == bool(drain_api.entries))))
        if len(seen) == 2:
            raise KeyboardInterrupt
        drain_api.entries = []

    with DrainListClient(drain_api.url) as client, pytest.raises(KeyboardInterrupt):
        run(client, ScontrolBackend(), once=False, interval_s=0.01, sleep=between_passes)
    assert seen == [True, False]


def test_missing_scontrol_is_a_scheduler_error(drain_api: DrainApi, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        assert sync(drain_api, "--scontrol", "/nonexistent/scontrol") == 3
    assert "not found" in caplog.text
