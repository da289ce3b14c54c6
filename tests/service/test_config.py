"""Configuration: embedded defaults, YAML files and clear errors for bad input."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from graywire.service.config import env_setting, load_settings


def test_defaults_are_sqlite_under_the_data_dir() -> None:
    s = load_settings()
    assert s.db_url == "sqlite:///graywire-data/graywire.db"
    assert s.poll_seconds == 10.0
    assert s.sources == []  # nothing is collected until sources say what: serve refuses to start


def test_serve_without_sources_is_an_error_naming_what_to_add(tmp_path: Path) -> None:
    """Changed: a config without ``sources:`` silently served the built-in simulator."""
    from graywire.service.sources import build_sources

    cfg = tmp_path / "g.yaml"
    cfg.write_text(f"data_dir: {tmp_path}\n")
    with pytest.raises(ValueError, match=r"no sources configured: .*type: fabricsim"):
        build_sources(load_settings(cfg))


def test_yaml_file_and_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(
        "port: 9000\npoll_interval: 30s\n"
        "sources:\n  - type: fabricsim\n    hosts: 16\n    faults: speed_downgrade@1m\n"
    )
    s = load_settings(cfg, port=9100)
    assert s.port == 9100
    assert s.poll_seconds == 30.0
    assert s.sources[0].hosts == 16


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: [1\n", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("colour: blue\n", "colour"),
        ("poll_interval: soon\n", "poll_interval"),
        # A bare number has no unit: refused, not read as seconds (quoted, "10" is ten seconds).
        ("poll_interval: 10\n", "poll_interval: Value error, not a duration: 10"),
        ("http:\n  keep_alive: 0s\n", "http.keep_alive: Value error, must be a positive duration"),
        ("alerts:\n  retry:\n    max_backoff: 0m\n", "alerts.retry.max_backoff"),
        ("sources:\n  - type: fabricsim\n    faults: meteor_strike\n", "unknown fault kind 'meteor_strike'"),
        ("sources:\n  - type: fabricsim\n    hosts: 0\n", "sources.0.fabricsim.hosts"),
        ("sources:\n  - hosts: 4\n", "each source needs a type"),
        ("archive:\n  retension: 1h\n", "archive.retension"),
        # A zero window would count no drain made before this poll: the cap per poll, not per window.
        ("drain:\n  window: 0s\n", "drain.window"),
        ("drain:\n  cooldown: -5m\n", "drain.cooldown"),
        # Detector settings: a typo never leaves the default in force unnoticed.
        (
            "detectors:\n  nccl_bootstrap:\n    stall_timeout: 60\n",
            "detectors.nccl_bootstrap.stall_timeout: no such",
        ),
    ],
)
def test_bad_config_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_settings(cfg)


def test_durations_are_timedeltas_and_dump_back_as_text(tmp_path: Path) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text('poll_interval: "90"\nscrape_timeout: 1.5s\ndrain:\n  window: 1h\n')
    s = load_settings(cfg)
    assert (s.poll_interval, s.scrape_timeout, s.drain.window) == (
        timedelta(seconds=90), timedelta(seconds=1.5), timedelta(hours=1)
    )  # fmt: skip
    assert (s.poll_seconds, s.scrape_timeout_seconds) == (90.0, 1.5)
    dumped = s.model_dump(mode="json")
    assert (dumped["poll_interval"], dumped["scrape_timeout"], dumped["drain"]["window"]) == (
        "90s",
        "1.5s",
        "1h",
    )
    assert (dumped["archive"]["retention"], dumped["alerts"]["retention"]) == ("3d", "7d")
    assert load_settings(None, **dumped).model_dump() == s.model_dump()


def test_the_scrape_timeout_defaults_to_most_of_the_poll_interval() -> None:
    assert load_settings(None, poll_interval="5s").scrape_timeout_seconds == 4.0
    assert load_settings(None, poll_interval=timedelta(seconds=5)).scrape_timeout_seconds == 4.0


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read config"):
        load_settings(tmp_path / "nope.yaml")


def test_environment_beats_the_file_and_the_command_line_beats_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text("port: 8100\narchive:\n  retention: 24h\n")
    monkeypatch.setenv("GRAYWIRE_PORT", "9000")
    monkeypatch.setenv("GRAYWIRE_ARCHIVE__ROLL", "1m")
    s = load_settings(cfg)
    assert (s.port, s.archive.retention, s.archive.roll) == (9000, timedelta(hours=24), timedelta(minutes=1))
    assert load_settings(cfg, port=7000).port == 7000
    assert load_settings(cfg, port=None).port == 9000  # None: not given on the command line


def test_the_file_is_read_again_at_every_load(tmp_path: Path) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text("poll_interval: 30s\n")
    assert load_settings(cfg).poll_interval == timedelta(seconds=30)
    cfg.write_text("poll_interval: 1m\n")
    assert load_settings(cfg).poll_interval == timedelta(minutes=1)
    assert load_settings().poll_interval == timedelta(seconds=10)


def test_env_setting_reads_one_variable_and_knows_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAYWIRE_BER_THRESHOLDS", "/etc/graywire/ber.csv")
    monkeypatch.setenv("GRAYWIRE_PORT", "not a port")  # not this command's concern
    assert env_setting("ber_thresholds") == "/etc/graywire/ber.csv"
    monkeypatch.setenv("GRAYWIRE_BER_THRESHOLDS", "")
    assert env_setting("ber_thresholds") is None
    with pytest.raises(KeyError, match="ber_threshold"):
        env_setting("ber_threshold")


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAYWIRE_PORT", "8123")
    monkeypatch.setenv("GRAYWIRE_SOURCES", '[{"type": "fabricsim", "hosts": 12}]')
    s = load_settings()
    assert s.port == 8123
    assert s.sources[0].hosts == 12


def test_the_shipped_example_config_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "graywire.example.yaml"
    s = load_settings(example)
    assert s.sources[0].hosts == 128
    assert s.scrape_timeout_seconds == 8.0


def test_the_readme_sources_example_is_a_valid_config(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("```yaml", readme.index("Sources (full field lists")) + len("```yaml")
    cfg = tmp_path / "g.yaml"
    cfg.write_text(readme[start : readme.index("```", start)])
    s = load_settings(cfg)
    assert [src.type for src in s.sources] == ["ufm", "snmp", "agent", "nccl", "nccl_ras", "fabricsim"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"poll_intervall": "10s"},
            "poll_intervall: unknown key 'poll_intervall' (did you mean 'poll_interval'?)",
        ),
        ({"drain": {"shadw": True}}, "drain.shadw: unknown key 'shadw' (did you mean 'shadow'?)"),
        (
            {"sources": [{"type": "ufmm", "url": "http://ufm"}]},
            "unknown source type 'ufmm' (did you mean ufm?)",
        ),
        (
            {"sources": [{"type": "snmp", "targets": [{"host": "sw1", "comunity": "x"}]}]},
            "targets.0.comunity: unknown key 'comunity' (did you mean 'community'?)",
        ),
        ({"zzzz": 1}, "zzzz: unknown key 'zzzz'\n"),
        (
            {
                "database_url": "postgresql+psycopg://gw@db/graywire",
                "cluster": {"nats_url": "nats://nats:4222", "members_table": "gw_members"},
            },
            "cluster.members_table: 'members_table' is not a setting: the members are rows of "
            "the table cluster_members",
        ),
    ],
)
def test_a_typo_is_named_with_what_was_meant(tmp_path: Path, overrides: dict, message: str) -> None:
    with pytest.raises(ValueError) as e:
        load_settings(None, data_dir=tmp_path, **overrides)
    assert message in str(e.value) + "\n"


def test_a_fresh_install_is_in_shadow_mode(tmp_path: Path) -> None:
    """No config at all: drains are recommended, never acted on, until someone turns it off."""
    settings = load_settings(None, data_dir=tmp_path)
    assert settings.drain.shadow is True
    assert (settings.drain.min_nodes, settings.drain.max_fraction) == (2, 0.1)


def test_a_cluster_needs_postgresql_and_a_part_to_play(tmp_path: Path) -> None:
    nats = {"nats_url": "nats://127.0.0.1:4222"}
    with pytest.raises(ValueError, match="cluster: needs database_url on PostgreSQL"):
        load_settings(None, data_dir=tmp_path, cluster=nats)
    pg = "postgresql+psycopg://graywire@db/graywire"
    with pytest.raises(ValueError, match="a member must lead, collect, or both"):
        load_settings(None, database_url=pg, cluster={**nats, "lead": False, "collect": False})
    with pytest.raises(ValueError, match="is not a NATS URL"):
        load_settings(None, database_url=pg, cluster={"nats_url": "http://nats:4222"})
    s = load_settings(
        None, database_url=pg, poll_interval="10s", cluster={"nats_url": "nats://a:4222, nats://b:4222"}
    )
    assert s.cluster is not None and s.cluster.nats_url == ["nats://a:4222", "nats://b:4222"]
    assert s.cluster.history == timedelta(minutes=30) and s.cluster.stream == "GRAYWIRE"
    timing = s.cluster_timing
    # Defaults follow the poll: a dead leader is replaced within lease + a tick, under two polls.
    assert (timing.lease_ttl, timing.member_ttl, timing.tick) == (12.5, 12.5, 3.125)
    assert timing.lease_ttl + timing.tick < 2 * s.poll_seconds
    fast = load_settings(None, database_url=pg, poll_interval="1s", cluster={**nats, "lease_ttl": "5s"})
    assert (fast.cluster_timing.lease_ttl, fast.cluster_timing.member_ttl) == (5.0, 2.0)


def test_without_a_cluster_section_there_is_no_cluster(tmp_path: Path) -> None:
    s = load_settings(None, data_dir=tmp_path)
    assert s.cluster is None
    with pytest.raises(ValueError, match="no cluster"):
        s.cluster_timing  # noqa: B018


def test_a_cluster_is_configured_from_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a container platform sets it: one variable per field, the servers comma-separated."""
    monkeypatch.setenv("GRAYWIRE_DATABASE_URL", "postgresql+psycopg://graywire@db/graywire")
    monkeypatch.setenv("GRAYWIRE_CLUSTER__NATS_URL", "nats://nats-0:4222,nats://nats-1:4222")
    monkeypatch.setenv("GRAYWIRE_CLUSTER__MEMBER_ID", "graywire-7")
    monkeypatch.setenv("GRAYWIRE_CLUSTER__LEAD", "false")
    s = load_settings(None)
    assert s.cluster is not None
    assert (s.cluster.nats_url, s.cluster.member_id, s.cluster.lead) == (
        ["nats://nats-0:4222", "nats://nats-1:4222"], "graywire-7", False
    )  # fmt: skip
