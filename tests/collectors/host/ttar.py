"""Extract a ttar archive (the plain-text tree format of prometheus/procfs test fixtures).

Records, separated by ``# ttar - - -`` comment lines:

- ``Directory: <path>`` then ``Mode: <octal>``;
- ``Path: <path>`` (older archives: ``File:``) then ``Lines: <n>`` and exactly n content lines,
  then ``Mode: <octal>``. In content, ``NULLBYTE`` stands for a NUL byte (``\\NULLBYTE`` for the
  word itself), and a last line ending in ``EOF`` means the file has no final newline;
- ``Path: <path>`` then ``SymlinkTo: <target>``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

_NUL = re.compile(r"(?<!\\)NULLBYTE")


def _safe(dest: Path, rel: str) -> Path:
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts:
        raise ValueError(f"unsafe path in archive: {rel!r}")
    return dest / p


def _decode(line: str) -> str:
    return _NUL.sub("\0", line).replace("\\NULLBYTE", "NULLBYTE")


def extract(archive: Path, dest: Path, only: Sequence[str] = (), modes: bool = True) -> int:
    """Extract ``archive`` under ``dest``; ``only`` keeps paths under those prefixes.

    Returns the number of entries written. Raises ValueError on a malformed archive.
    """
    lines = archive.read_bytes().decode("utf-8", errors="surrogateescape").split("\n")
    keep = tuple(p.rstrip("/") for p in only)

    def wanted(rel: str) -> bool:
        return not keep or any(rel == k or rel.startswith(k + "/") for k in keep)

    path: Path | None = None
    rel = ""
    written = 0
    dirs: list[tuple[Path, int]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(": ")
        if key == "Directory":
            rel, path = value, _safe(dest, value)
            if wanted(rel):
                path.mkdir(parents=True, exist_ok=True)
                written += 1
        elif key in ("Path", "File"):
            rel, path = value, _safe(dest, value)
        elif key == "Lines":
            if path is None:
                raise ValueError(f"line {i}: Lines before Path")
            n = int(value)
            content = lines[i : i + n]
            if len(content) != n:
                raise ValueError(f"line {i}: archive ends inside {rel}")
            i += n
            if not wanted(rel):
                continue
            text = "".join(_decode(c) + "\n" for c in content)
            if content and content[-1].endswith("EOF"):
                text = text[: -len("EOF\n")]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
            written += 1
        elif key == "SymlinkTo":
            if path is None:
                raise ValueError(f"line {i}: SymlinkTo before Path")
            if wanted(rel):
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.is_symlink() or path.exists():
                    path.unlink()
                os.symlink(value, path)
                written += 1
        elif key == "Mode":
            if path is not None and modes and wanted(rel) and not path.is_symlink() and path.exists():
                mode = int(value, 8)
                if path.is_dir():
                    dirs.append((path, mode | 0o700))  # keep directories writable for cleanup
                else:
                    path.chmod(mode)
        else:
            raise ValueError(f"line {i}: unknown ttar line {line[:60]!r}")
    for d, mode in reversed(dirs):
        d.chmod(mode)
    return written
