"""Every alert kind has a runbook, and every alert's ``runbook_url`` names a file that exists."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from graywire.detectors.findings import Kind
from graywire.service.alert_settings import RUNBOOK_DIR, AlertsSettings
from graywire.service.alerts.dispatcher import alert_context
from graywire.service.alerts.events import AlertContext
from graywire.service.drain_engine import OWN_KINDS
from tests.service.alerts.test_payloads import FIRING

ROOT = Path(__file__).resolve().parents[3]
RUNBOOKS = ROOT / RUNBOOK_DIR
KINDS = sorted({k.value for k in Kind} | set(OWN_KINDS))
SECTIONS = ("## What it means", "## Check", "## Act", "## Drain?", "## It closes when")


def alertname(kind: str) -> str:
    return "Graywire" + "".join(part.capitalize() for part in kind.split("_"))


def test_there_is_one_runbook_per_kind_and_no_other() -> None:
    pages = {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"}
    assert pages == set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_each_runbook_says_what_it_means_what_to_check_and_do_and_whether_to_drain(kind: str) -> None:
    text = (RUNBOOKS / f"{kind}.md").read_text()
    assert text.startswith(f"# {kind}: ")
    assert f"`{alertname(kind)}`" in text
    positions = [text.find(f"\n{s}\n") for s in SECTIONS]
    assert -1 not in positions and positions == sorted(positions), f"{kind}: sections {SECTIONS}"
    check = text[positions[1] : positions[2]]
    assert len(check.splitlines()) >= 4, f"{kind}: the Check section is too thin to act on"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", sorted(p.name for p in RUNBOOKS.glob("*.md")))
def test_links_between_the_docs_resolve(page: str) -> None:
    text = (RUNBOOKS / page).read_text()
    for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#([^)]+))?\)", text):
        path, anchor = target
        doc = (RUNBOOKS / path).resolve()
        assert doc.is_file(), f"{page}: {path} does not exist"
        if anchor:
            anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", doc.read_text(), re.MULTILINE)}
            assert anchor in anchors, f"{page}: {path}#{anchor} is not a heading there"


def test_the_index_lists_every_runbook() -> None:
    index = (RUNBOOKS / "README.md").read_text()
    for kind in KINDS:
        assert f"| `{kind}` | `{alertname(kind)}` | [{kind}.md]({kind}.md) |" in index


@pytest.mark.parametrize("kind", KINDS)
def test_the_default_runbook_url_is_the_repository_path_of_an_existing_runbook(kind: str) -> None:
    event = AlertContext().describe(dataclasses.replace(FIRING, kind=kind), {})
    url = event.annotations()["runbook_url"]
    assert url == f"docs/runbooks/{kind}.md" and (ROOT / url).is_file()


def test_a_configured_runbook_base_url_keeps_the_file_name() -> None:
    base = "https://git.example.com/infra/graywire/-/blob/main/docs/runbooks"
    context = alert_context(AlertsSettings(runbook_base_url=base + "/"), instance=None)
    for kind in KINDS:
        url = context.runbook_url(kind)
        assert url is not None and url.startswith(base + "/")
        assert (RUNBOOKS / url.removeprefix(base + "/")).is_file()
