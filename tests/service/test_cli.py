"""The command line as a new user runs it: sim, replay, db upgrade, and the demo server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from graywire.collectors.dataset import DatasetWriter, iter_polls
from graywire.collectors.host.agent_wire import DEFAULT_AGENT_PORT
from graywire.collectors.model import INVENTORY
from graywire.fabricsim.faults import NAMED_ONLY_KINDS
from graywire.fabricsim.sim import EPOCH, FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.cli import DEMO_FAULTS, ber_thresholds, build_parser, main
from graywire.service.simulated import FabricSimCollector, FabricSimSource


def test_sim_then_replay_scores_against_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], real_fixtures: Path
) -> None:
    out = tmp_path / "sim"
    assert main(["sim", "--hosts", "16", "--duration", "40m", "--seed", "2", "--out", str(out), "-q"]) == 0
    assert (out / "truth.json").exists() and (out / "inventory.json").exists()
    assert list((out / "port_sample").glob("hour=*/*.parquet"))
    capsys.readouterr()
    ber = real_fixtures / "ufm" / "pdr_Field_BER_Thresholds.csv"
    assert main(["replay", str(out), "--json", "-q", "--ber-thresholds", str(ber)]) == 0
    report = json.loads(capsys.readouterr().out)
    views = len(list(iter_polls(out, "nccl_transport")))  # the ranks' wiring, when it changed
    # Port samples every poll; timings and proxy steps from the second on; wiring views.
    assert report["batches"] == 241 + 2 * 240 + views and views >= 1
    score = report["score"]
    for kind, s in score["by_fault"].items():
        if kind in NAMED_ONLY_KINDS:  # not in `default` (named, as in their scenarios)
            assert s["faults"] == 0
            continue
        assert (s["covered"], s["recall"], s["localization_top1"]) == (True, 1.0, 1.0), kind
    assert score["findings"]["false"] == 0
    assert score["findings"]["benign_alarms"] == 0


def test_replay_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["replay", str(tmp_path)]) == 2
    assert "no inventory" in capsys.readouterr().err


def test_replay_of_a_live_archive_says_its_files_are_still_being_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The service's archive writer (the same rolling by data time) with its files still open:
    replay says so instead of a bare "0 batches", and replays what has closed."""
    sim = FabricSim(
        SimConfig(topology=TopologySpec(hosts=4), interval_s=60.0, duration_s=600.0, faults="none")
    )
    root = tmp_path / "archive"
    root.mkdir()
    sim.fabric.write_inventory(root / INVENTORY)
    writer = DatasetWriter(root, roll_seconds=300.0)
    steps = iter(sim.run())

    def archive(n: int) -> None:
        for step, _ in zip(steps, range(n), strict=False):
            for batch in (step.port_sample, step.nccl_timing):
                if batch is not None:
                    writer.write(batch)

    def replay() -> tuple[dict, str]:
        assert main(["replay", str(root), "-q"]) == 0
        text = capsys.readouterr().out
        assert main(["replay", str(root), "-q", "--json"]) == 0
        return json.loads(capsys.readouterr().out), text

    hour = f"{EPOCH:%Y-%m-%dT%H}"
    archive(3)  # three polls, every file still open
    report, text = replay()
    assert (report["batches"], report["open_files"]) == (0, 2)
    assert report["note"].startswith(f"0 batches: 2 files of hour {hour} are still being written")
    assert "replay reads closed files only" in report["note"]
    assert f"note: {report['note']}" in text

    archive(5)  # past archive.roll of data time: the first files closed, new ones opened
    report, text = replay()
    assert report["batches"] > 0 and report["open_files"] == 2
    assert report["note"].startswith(f"not replayed: 2 files of hour {hour} are still being written")

    writer.close()  # the service stopped: everything replays, nothing to say
    report, text = replay()
    assert report["open_files"] == 0 and "note" not in report and "note:" not in text
    assert report["batches"] == 8 + 7  # port samples every poll, NCCL timings from the second on


def test_replay_of_an_empty_archive_says_there_is_nothing_closed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_fabric(TopologySpec(hosts=2)).write_inventory(tmp_path / INVENTORY)
    assert main(["replay", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["note"] == f"0 batches: {tmp_path} holds no closed <record>/hour=*/*.parquet file"


def test_ber_thresholds_default_to_the_environment_when_the_command_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = build_parser()  # before the variable is set: it is read when the command runs
    monkeypatch.setenv("GRAYWIRE_BER_THRESHOLDS", "/etc/graywire/ber.csv")
    for argv in (["replay", "dir"], ["eval"]):
        assert ber_thresholds(parser.parse_args(argv)) == "/etc/graywire/ber.csv"
    assert ber_thresholds(parser.parse_args(["eval", "--ber-thresholds", "mine.csv"])) == "mine.csv"
    monkeypatch.delenv("GRAYWIRE_BER_THRESHOLDS")
    assert ber_thresholds(parser.parse_args(["replay", "dir"])) is None


def test_sim_rejects_a_bad_fault_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--hosts", "8", "--faults", "melt@5m", "--out", str(tmp_path / "x")]) == 2
    assert "unknown fault kind 'melt'" in capsys.readouterr().err


def test_db_upgrade_creates_the_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    assert main(["db", "upgrade", "--database-url", url]) == 0
    tables = set(sa.inspect(sa.create_engine(url)).get_table_names())
    assert {"incidents", "findings", "alembic_version"} <= tables


@pytest.mark.postgres
def test_db_upgrade_does_not_print_the_database_password(capsys: pytest.CaptureFixture[str]) -> None:
    from sqlalchemy.engine import make_url

    from tests.conftest import postgres_url, reset_postgres

    url = make_url(postgres_url()).set(password="s3cret-Pa55word")  # the test server trusts any
    rendered = url.render_as_string(hide_password=False)
    reset_postgres(rendered)
    try:
        assert main(["db", "upgrade", "--database-url", rendered]) == 0
    finally:
        reset_postgres(rendered)
    out = capsys.readouterr()
    assert "database at head" in out.out
    assert "s3cret-Pa55word" not in out.out + out.err


def test_db_upgrade_of_a_database_holding_data_keeps_it(db_url: str) -> None:
    from graywire.service.models.engine import upgrade

    upgrade(db_url, "0001")  # a database from before the drain tables, with an incident in it
    engine = sa.create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO incidents (kind, entity, status, severity, summary, detector, score,"
                    " confidence, evidence, opened_at, last_seen_at)"
                    " VALUES ('link_flap', 'gpu-0002/mlx5_1', 'open', 'warning', 'flapping', 'link_flap/1',"
                    " 1, 1, '{}', '2025-03-01 12:00:00+00:00', '2025-03-01 12:00:00+00:00')"
                )
            )
        assert main(["db", "upgrade", "--database-url", db_url]) == 0
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT entity FROM incidents")).scalars().all() == [
                "gpu-0002/mlx5_1"
            ]
            assert conn.execute(sa.text("SELECT count(*) FROM drain_state")).scalar_one() == 1
    finally:
        engine.dispose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_agent_command_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(
        [
            "agent",
            "--sysfs-root",
            str(tmp_path),
            "--hostname",
            "gpu-0007",
            "--port",
            "0",
            "--ethtool-dir",
            str(tmp_path / "e"),
            "--exclude",
            "eno.*",
        ]
    )
    assert parser.parse_args(["agent"]).port == DEFAULT_AGENT_PORT
    served: dict = {}

    def fake_run(app: FastAPI, host: str, port: int, log_level: str) -> None:
        served.update(app=app, host=host, port=port, log_level=log_level)

    monkeypatch.setattr("uvicorn.run", fake_run)
    assert args.func(args) == 0
    reader = served["app"].state.reader
    assert (served["host"], served["port"], served["log_level"]) == ("0.0.0.0", 0, "info")
    assert (reader.cfg.hostname, reader.cfg.sysfs_root, reader.cfg.exclude) == ("gpu-0007", tmp_path, "eno.*")
    assert reader.ethtool.path == tmp_path / "e"


@pytest.mark.alone  # a real demo against a deadline
def test_demo_shows_both_injected_faults_within_a_minute(tmp_path: Path) -> None:
    hosts, seed = 32, 7
    expected = FabricSimCollector(FabricSimSource(hosts=hosts, seed=seed, faults=DEMO_FAULTS), 2.0).faults
    downgrade = next(f for f in expected if f.kind == "speed_downgrade")
    slow = next(f for f in expected if f.kind == "slow_channel")
    port = _free_port()
    cmd = [sys.executable, "-m", "graywire.service.cli", "demo", "--port", str(port), "--hosts", str(hosts),
           "--seed", str(seed), "--data-dir", str(tmp_path / "data")]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        found: dict[str, dict] = {}
        while time.monotonic() < deadline and len(found) < 2:
            time.sleep(2)
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                items = httpx.get(f"http://127.0.0.1:{port}/api/v1/incidents", timeout=5).json()["items"]
            except httpx.TransportError:
                continue
            for i in items:
                if i["kind"] == "speed_downgrade" and i["port"] == downgrade.port:
                    found["downgrade"] = i
                if i["kind"] == "nccl_channel_slow" and i["node"] == slow.node:
                    found["slow"] = i
        assert set(found) == {"downgrade", "slow"}, f"after 60 s only {sorted(found)}"
        assert found["slow"]["evidence"]["channel"] == slow.channel
        assert found["slow"]["port"] == slow.port
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "graywire_polls_total" in metrics
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_db_upgrade_against_an_unreachable_database_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade", "--database-url", "postgresql+psycopg://nobody:secret@127.0.0.1:1/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "graywire: error: database postgresql+psycopg://nobody:***@127.0.0.1:1/x is unreachable"
    )
    assert len(err.strip().splitlines()) == 1 and "secret" not in err


def test_demo_takes_its_port_from_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from graywire.service.config import load_settings

    monkeypatch.setenv("GRAYWIRE_PORT", "8123")
    assert load_settings(None, port=build_parser().parse_args(["demo"]).port).port == 8123
    assert load_settings(None, port=build_parser().parse_args(["demo", "--port", "9001"]).port).port == 9001


def test_every_option_of_every_command_says_what_it_is_for() -> None:
    import argparse

    def walk(parser: argparse.ArgumentParser, name: str) -> list[str]:
        bare = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, p in action.choices.items():
                    bare += walk(p, f"{name} {sub}")
            elif not action.help and action.dest != "help":
                bare.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
        return bare

    parser = build_parser()
    assert walk(parser, "graywire") == []
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert all(c in (parser.description or "") for c in commands), "the top-level help names every command"


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid``, from each process's parent in /proc (Linux)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parent.items() if pp == p and c not in out}
        out |= kids
        todo.extend(kids)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_to_fakes_stops_its_snmpsim(tmp_path: Path) -> None:
    """``kill`` (or systemd's stop) of ``graywire fakes`` takes its snmpsim down with it."""
    ports = [str(_free_port()) for _ in range(4)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "graywire.service.cli", "fakes", "--out", str(tmp_path / "fakes"),
         "--hosts", "4", "--seed", "3", "--ufm-port", ports[0], "--snmp-port", ports[1],
         "--agent-port", ports[2], "--service-port", ports[3], "--agent-hosts", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            if line.startswith("then: graywire serve"):
                break
            assert time.monotonic() < deadline, "fakes never said it was ready"
        snmpsim = [p for p in _children(proc.pid) if "snmpsim" in Path(f"/proc/{p}/cmdline").read_text()]
        assert snmpsim, "fakes runs snmpsim as its child"
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # a stop it was asked for
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in snmpsim):
            assert time.monotonic() < deadline, "snmpsim outlived the fakes it belonged to"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_eval_writes_every_finding_with_what_the_scoring_made_of_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "findings.jsonl"
    args = ["eval", "--quick", "--seeds", "1", "--variants", "host_ethtool+inspector_verbose",
            "--only", "quirks-reload-ramp", "--findings", str(out), "--json", "-q"]  # fmt: skip
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines and {x["scenario"] for x in lines} == {"quirks-reload-ramp-s0"}
    firing = [x for x in lines if x["status"] == "firing"]
    assert all(x["verdict"] in ("true", "false", "benign") for x in firing)
    assert all(x["verdict"] is None for x in lines if x["status"] == "cleared")
    assert sum(x["verdict"] != "true" for x in firing) == result["false_findings"]
    ber = [x for x in firing if x["kind"] == "ber_degradation" and x["verdict"] == "true"]
    assert ber and ber[0]["port"] and 600 <= ber[0]["t_s"] <= 660  # the ramp starts at 600 s
