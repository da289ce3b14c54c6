"""The ttar extractor used to unpack the procfs sysfs fixture."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.collectors.host.ttar import extract

SEP = "# ttar - - - - - - - - - - - - - - - - - - - -"
ARCHIVE = "\n".join(
    [
        "# Archive created by ttar -c -f x.ttar a/",
        "Directory: a",
        "Mode: 755",
        SEP,
        "Path: a/rate",
        "Lines: 1",
        "400 Gb/sec (4X NDR)",
        "Mode: 444",
        SEP,
        "File: a/cmdline",
        "Lines: 2",
        "vimNULLBYTEx\\NULLBYTE",
        "tailEOF",
        "Mode: 644",
        SEP,
        "Path: a/empty",
        "Lines: 0",
        "Mode: 644",
        SEP,
        "Path: a/link",
        "SymlinkTo: rate",
        SEP,
        "Path: b/other",
        "Lines: 1",
        "skipped",
        "Mode: 644",
        "",
    ]
)


def test_extract_records(tmp_path: Path) -> None:
    archive = tmp_path / "x.ttar"
    archive.write_text(ARCHIVE)
    out = tmp_path / "out"
    assert extract(archive, out, only=["a"]) == 5
    assert (out / "a/rate").read_text() == "400 Gb/sec (4X NDR)\n"
    assert (out / "a/rate").stat().st_mode & 0o777 == 0o444
    assert (out / "a/cmdline").read_bytes() == b"vim\0xNULLBYTE\ntail"  # EOF: no final newline
    assert (out / "a/empty").read_bytes() == b""
    assert os.readlink(out / "a/link") == "rate" and (out / "a/link").read_text() == "400 Gb/sec (4X NDR)\n"
    assert not (out / "b").exists()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Path: ../escape\nLines: 1\nx\n", "unsafe path"),
        ("Path: a/f\nLines: 3\nx\n", "archive ends inside a/f"),
        ("Lines: 1\nx\n", "Lines before Path"),
        ("Bogus: 1\n", "unknown ttar line"),
    ],
)
def test_malformed_archives(tmp_path: Path, text: str, error: str) -> None:
    archive = tmp_path / "x.ttar"
    archive.write_text(text)
    with pytest.raises(ValueError, match=error):
        extract(archive, tmp_path / "out")
