"""The corpus of real captures: ``tests/fixtures/corpus/<format>/``, each folder with a SOURCES.md
saying where every file came from. Every parser's tests run over every capture of its format."""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"


def captures(fmt: str, *patterns: str) -> list[Path]:
    """The captures of one format (every file but SOURCES.md, or those matching ``patterns``), sorted."""
    folder = CORPUS / fmt
    if not folder.is_dir():
        raise FileNotFoundError(f"no corpus folder {folder}")
    found = {p for pat in (patterns or ("*",)) for p in folder.glob(pat)}
    return sorted(p for p in found if p.is_file() and p.name != "SOURCES.md")


def ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]
