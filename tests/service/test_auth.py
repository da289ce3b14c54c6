"""Token roles and their configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import HTTPException

from graywire.service.auth import Auth
from graywire.service.config import AuthSettings, load_settings


def auth(tmp_path: Path) -> Auth:
    secret = tmp_path / "ops.token"
    secret.write_text("operator-secret-from-a-file\n")
    return Auth(
        AuthSettings(
            tokens=[
                {"name": "alice", "role": "operator", "token_file": secret},
                {"name": "grafana", "role": "reader", "token": "reader-token-0123456789"},
                {"name": "jobs", "role": "ingest", "token": "ingest-token-0123456789"},
            ]
        )
    )


def test_roles_grant_what_they_say(tmp_path: Path) -> None:
    a = auth(tmp_path)
    assert a.check("operator-secret-from-a-file", "operator").name == "alice"
    assert a.check("operator-secret-from-a-file", "ingest").name == "alice"
    assert a.check("reader-token-0123456789", "reader").role == "reader"
    for token, role, status in [
        ("reader-token-0123456789", "operator", 403),
        ("ingest-token-0123456789", "reader", 403),
        ("reader-token-0123456789", "ingest", 403),
        ("nope-nope-nope-nope", "reader", 401),
        (None, "operator", 401),
    ]:
        with pytest.raises(HTTPException) as e:
            a.check(token, role)  # type: ignore[arg-type]
        assert e.value.status_code == status


@pytest.mark.parametrize(
    ("auth_cfg", "message"),
    [
        ({"tokens": [{"name": "a", "role": "operator", "token": "short"}]}, "at least 16"),
        ({"tokens": [{"name": "a", "role": "operator"}]}, "exactly one of token and token_file"),
        ({"tokens": [{"name": "a", "role": "root", "token": "x" * 20}]}, "auth.tokens.0.role"),
        ({"read_open": "perhaps"}, "auth.read_open"),
    ],
)
def test_bad_auth_config_is_refused_naming_the_key(auth_cfg: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_settings(None, auth=auth_cfg)


@pytest.mark.parametrize(
    ("drain_cfg", "message"),
    [({"max_fraction": 0}, "drain.max_fraction"), ({"window": "soon"}, "not a duration"),
     ({"min_severity": "high"}, "drain.min_severity")],
)  # fmt: skip
def test_bad_drain_config_is_refused(drain_cfg: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_settings(None, drain=drain_cfg)


def test_unreadable_token_file_stops_start_up(tmp_path: Path) -> None:
    settings = AuthSettings(tokens=[{"name": "a", "role": "operator", "token_file": tmp_path / "missing"}])
    with pytest.raises(ValueError, match="cannot read token_file"):
        Auth(settings)


def test_one_secret_under_two_names_stops_start_up_without_echoing_it(tmp_path: Path) -> None:
    # A reader entry pasted with the operator's secret would make every reader an operator
    # (and the audit log name the wrong person): refuse it, naming the entries, not the secret.
    secret = tmp_path / "ops.token"
    secret.write_text("shared-secret-0123456789\n")
    settings = AuthSettings(
        tokens=[
            {"name": "alice", "role": "operator", "token_file": secret},
            {"name": "grafana", "role": "reader", "token": "shared-secret-0123456789"},
        ]
    )
    with pytest.raises(ValueError, match="'grafana' has the same secret as 'alice'") as e:
        Auth(settings)
    assert "shared-secret" not in str(e.value)


def test_reads_stay_guarded_when_served_under_a_path_prefix(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from graywire.service.app import create_app

    reader = "reader-token-0123456789"
    settings = load_settings(
        None,
        data_dir=tmp_path,
        archive={"enabled": False},
        sources=[{"type": "fabricsim", "hosts": 8}],
        auth={"read_open": False, "tokens": [{"name": "grafana", "role": "reader", "token": reader}]},
    )
    # Behind a proxy prefix (uvicorn --root-path) or mounted in another app, the URL path
    # starts with the prefix, not /api/.
    with TestClient(create_app(settings, run_loop=False), root_path="/graywire") as c:
        for path in ("/graywire/api/v1/drain", "/graywire/api/v1/incidents", "/graywire/api/v1/capabilities"):
            assert c.get(path).status_code == 401, path
            assert c.get(path, headers={"authorization": f"Bearer {reader}"}).status_code == 200, path
        assert c.get("/graywire/healthz").status_code == 200
