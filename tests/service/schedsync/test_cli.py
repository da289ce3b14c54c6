"""Argument errors of the sync commands are clear and exit 2 before anything is read or changed."""

from __future__ import annotations

import pytest

from graywire.service.cli import main
from tests.service.schedsync.conftest import DrainApi


@pytest.mark.parametrize("command", ["slurm-sync", "k8s-sync"])
def test_bad_interval_is_refused(
    command: str, drain_api: DrainApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--url", drain_api.url, "--interval", "0s"]) == 2
    assert main([command, "--url", drain_api.url, "--interval", "soon"]) == 2
    err = capsys.readouterr().err
    assert "--interval must be positive, got '0s'" in err and "not a duration: 'soon'" in err
    assert drain_api.requests == []
