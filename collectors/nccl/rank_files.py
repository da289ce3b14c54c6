"""PyTorch's Flight Recorder dumps and watchdog log lines, from files -> ``nccl_rank_state``.

A job that sets ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` writes one dump per rank on a watchdog timeout,
to ``${TORCH_NCCL_DEBUG_INFO_TEMP_FILE}<rank>`` (``TORCH_FR_DUMP_TEMP_FILE`` in newer releases);
the watchdog's own ``Watchdog caught collective operation timeout`` line goes to the rank's
stderr, i.e. the job's log files. :class:`RankStateFiles` reads both for a
:class:`~graywire.collectors.nccl.tail.NcclFileCollector`:

- a dump is read once per (name, mtime, size): PyTorch writes it whole and never appends, so a
  changed size or mtime is a new dump (or the end of a half-written one) and is read again;
- the log files are tailed like every other NCCL file (complete lines only, rotation and
  truncation handled by the tailer), and only watchdog lines give rows.

A file that cannot be read or parsed is logged once, by name and reason, and named in the
scrape's note; it gives no rows (no guess) and never fails the scrape. The job is the file's
top directory under the source's ``directory`` (its own name, or ``<id>`` of
``nccl-inspector-<id>``, as for the other NCCL files) unless the source names one; the host
comes from ``host_regex`` (its ``host`` group, matched against the path under ``directory``),
since neither a dump nor a watchdog line names the host.
"""

from __future__ import annotations

import logging
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from graywire.collectors.nccl.flight_recorder import parse_dump, parse_watchdog_lines, rank_of_file
from graywire.collectors.nccl.ras import RankStateRows

log = logging.getLogger("graywire.nccl")
#: A dump larger than this is not one (2000 entries of a few hundred bytes each).
MAX_DUMP_BYTES = 64 * 2**20


@dataclass
class RankStateFiles:
    """Flight Recorder dumps under ``directory`` matching ``dump_pattern``, and watchdog lines
    from the files ``watchdog`` tails (a ``DirectoryTailer``), as one batch per :meth:`collect`."""

    directory: Path
    dump_pattern: str | None
    watchdog: Any  # DirectoryTailer | None (tail.py builds it; it imports this module)
    job_of: Callable[[Path], str]
    host_regex: re.Pattern[str] | None = None
    skip_existing: bool = False
    _seen: dict[Path, tuple[int, int]] = field(default_factory=dict)
    _polled: bool = False
    _logged: set[str] = field(default_factory=set)

    def host_of(self, path: Path) -> str | None:
        return path_part(self.host_regex, self.directory, path, "host")

    def _problem(self, problems: list[str], msg: str) -> None:
        problems.append(msg)
        if msg not in self._logged:  # once per distinct message, not once per scrape
            if len(self._logged) >= 1000:
                self._logged.clear()
            self._logged.add(msg)
            log.warning("%s", msg)

    def collect(self, now: datetime, problems: list[str]) -> pa.RecordBatch | None:
        """The rows of the dumps new or changed since the last call and of the new watchdog
        lines, stamped ``now``; None when there are none."""
        rows = RankStateRows()
        first = not self._polled
        self._polled = True
        if self.dump_pattern is not None:
            self._dumps(rows, problems, first and self.skip_existing)
        if self.watchdog is not None:
            for chunk in self.watchdog.poll():
                path = chunk.file.path
                try:
                    lines = [ln.decode("utf-8", "replace") for ln in chunk.lines]
                    parse_watchdog_lines(lines, self.job_of(path), rows, host=self.host_of(path))
                except Exception as e:  # a line the parser cannot take is that file's problem only
                    self._problem(problems, f"{path.name}: watchdog lines not read ({type(e).__name__}: {e})")
        problems.extend(rows.problems)
        return rows.to_batch(now) if len(rows) else None

    def _dumps(self, rows: RankStateRows, problems: list[str], skip: bool) -> None:
        present: set[Path] = set()
        for path in sorted(self.directory.glob(self.dump_pattern or ""), key=str):
            try:
                st = path.stat()
            except OSError:
                continue  # gone between the listing and the stat
            if not stat.S_ISREG(st.st_mode):
                continue
            present.add(path)
            sig = (st.st_mtime_ns, st.st_size)
            if self._seen.get(path) == sig:
                continue
            self._seen[path] = sig
            if skip:
                continue
            if st.st_size > MAX_DUMP_BYTES:
                self._problem(problems, f"{path.name}: {st.st_size} bytes is not a Flight Recorder dump")
                continue
            mark = len(rows.rows)
            try:
                parse_dump(
                    path.read_bytes(),
                    self.job_of(path),
                    rows,
                    rank=rank_of_file(path.name),
                    host=self.host_of(path),
                    dumped_at_ns=st.st_mtime_ns,
                )
            except Exception as e:  # a half-written or foreign file: no rows, read again when it changes
                del rows.rows[mark:]
                self._problem(problems, f"{path.name}: not read as a Flight Recorder dump: {e}")
        for gone in set(self._seen) - present:
            del self._seen[gone]


def path_part(regex: re.Pattern[str] | None, directory: Path, path: Path, group: str) -> str | None:
    """What ``regex``'s ``group`` reads off ``path`` under ``directory`` (a file's host or job,
    where its name or directories say it); None without a regex or a match."""
    if regex is None:
        return None
    try:
        rel = path.relative_to(directory).as_posix()
    except ValueError:
        rel = path.as_posix()
    m = regex.search(rel)
    return m.group(group) if m and m.group(group) else None
