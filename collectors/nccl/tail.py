"""Following NCCL output files as a job writes them.

A training job writes one Inspector file per process (``<host>-pid<pid>.log``), appending a
dump every interval; the files appear as ranks start, a write can stop mid-line, and files can
be rotated (renamed away, a new one created) or truncated in place. :class:`DirectoryTailer`
keeps, per file identity (device, inode), the byte offset of the first unread byte and hands
out only complete lines: a partial last line stays unread until its newline arrives. A file
whose size drops below its offset, or whose first bytes changed (a new file on a reused inode,
truncated and rewritten past the old offset between two polls), is read again from the start,
with a fresh parser (the Inspector's v4.3 dump context is per file).

:class:`NcclFileCollector` is the collector for one directory: each scrape returns the
nccl_timing rows appended since the previous one, as one batch (one poll, one time: the newest
row's). A malformed line is skipped and counted, never fatal: ``skipped_lines`` counts them
over the collector's life and the scrape's ``error`` text names the first few (the scrape is
still ``ok``; ``ScrapeResult.skipped`` has the scrape's count). Offsets move when lines are
handed out, before they are parsed, so rows are delivered or their offsets kept: a file whose
parse raises is put back where it was (its lines are read again by the next scrape; the other
files' rows are delivered), and a batch that cannot be built puts back every file of its poll.
A job that POSTs its records instead goes through :mod:`graywire.collectors.nccl.push`.
"""

from __future__ import annotations

import asyncio
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from graywire.collectors.base import MALFORMED_LINE, ScrapeResult, failed
from graywire.collectors.nccl.bootstrap import InitViews
from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.debug_log import NcclTopology, process_of
from graywire.collectors.nccl.inspector import InspectorParser
from graywire.collectors.nccl.nccl_tests import NccltestsParser, collective_from_name
from graywire.collectors.nccl.profiler import ProfilerParser, dump_name_parts
from graywire.collectors.nccl.proxy import ProxyRows
from graywire.collectors.nccl.rank_files import RankStateFiles, path_part
from graywire.collectors.nccl.transport import layout_batch, settled_communicators, transport_batch

Format = Literal["inspector", "nccl_tests", "profiler"]
#: The example profiler plugin writes ``<NCCL_PROFILE_DUMP_FILE>_<commHash>_<rank>.json`` (its README's
#: ``-hostname-tid.txt`` naming needs ``pattern: "*.txt"``).
DEFAULT_PATTERN: dict[str, str] = {"inspector": "*-pid*.log", "nccl_tests": "*.log", "profiler": "*.json"}
_FINGERPRINT = 1024
_JOB_DIR = re.compile(r"^nccl-inspector-(?P<job>.+)$")
#: The Inspector's file per process: ``<hostname>-pid<pid>.log``.
_INSPECTOR_FILE = re.compile(r"^(?P<host>.+)-pid(?P<pid>\d+)\.log$")
#: The wiring view is sent again after this many scrapes without a change, so a detector that
#: started later (or expired a communicator) still learns it.
TRANSPORT_REFRESH_SCRAPES = 30


@dataclass
class TailedFile:
    """Read position and parser state of one file (one inode)."""

    path: Path
    offset: int = 0
    fingerprint: bytes = b""
    line_no: int = 0  # lines handed out so far (for messages)
    skipping: bool = False  # inside an over-long line: drop bytes until its newline
    state: Any = None  # the format parser for this file
    emitted: int = 0  # rows of the parser already turned into timing rows


@dataclass
class TailChunk:
    file: TailedFile
    #: The complete lines read, as the file holds them (joined by ``\n``, the last one's newline
    #: left off); None when there are none. Parsers that read whole buffers take this.
    data: bytes | None
    first_line: int
    reset: bool  # the file was truncated or replaced: its parser was restarted
    #: The file's read position before these lines (offset, line_no, skipping, emitted): where
    #: :meth:`DirectoryTailer.rewind` puts it back when the lines were not delivered.
    start: tuple[int, int, bool, int] = (0, 0, False, 0)
    _lines: list[bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def lines(self) -> list[bytes]:
        """The lines, each without its newline and trailing carriage returns."""
        if self._lines is None:
            self._lines = [] if self.data is None else [ln.rstrip(b"\r") for ln in self.data.split(b"\n")]
        return self._lines

    @property
    def size(self) -> int:
        """Bytes the lines take with a newline each (what they cost of a poll's budget)."""
        if self.data is None:
            return 0
        if b"\r" in self.data:
            return sum(len(x) + 1 for x in self.lines)
        return len(self.data) + 1


@dataclass
class DirectoryTailer:
    """Complete lines appended to the files matching ``pattern`` under ``directory``.

    ``new_state(path)`` makes the per-file parser state, again after a truncation. With
    ``start_at="end"``, files present at the first poll are read from their current end.
    """

    directory: Path
    pattern: str
    new_state: Callable[[Path], Any] = lambda _p: None
    start_at: Literal["beginning", "end"] = "beginning"
    max_bytes_per_poll: int = 256 * 2**20
    max_line_bytes: int = 16 * 2**20
    files: dict[tuple[int, int], TailedFile] = field(default_factory=dict)
    dropped_lines: int = 0  # over-long lines skipped
    resets: int = 0
    _polled: bool = False

    def poll(self) -> list[TailChunk]:
        if not self.directory.is_dir():
            raise FileNotFoundError(f"directory {self.directory} does not exist")
        first = not self._polled
        self._polled = True
        budget = self.max_bytes_per_poll
        chunks: list[TailChunk] = []
        present: set[tuple[int, int]] = set()
        for path in sorted(self.directory.glob(self.pattern), key=str):
            try:
                st = path.stat()
            except OSError:
                continue  # gone between the listing and the stat
            if not stat.S_ISREG(st.st_mode):
                continue
            key = (st.st_dev, st.st_ino)
            present.add(key)
            tf = self.files.get(key)
            if tf is None:
                tf = TailedFile(path, state=self.new_state(path))
                if first and self.start_at == "end":
                    tf.offset = _last_line_end(path, st.st_size)
                    tf.fingerprint = _head(path)
                self.files[key] = tf
            tf.path = path
            if budget <= 0:
                continue
            chunk = self._read(tf, st.st_size, budget)
            if chunk is not None:
                budget -= chunk.size
                chunks.append(chunk)
        for key in set(self.files) - present:
            del self.files[key]  # deleted, or renamed out of the pattern
        return chunks

    def _read(self, tf: TailedFile, size: int, budget: int) -> TailChunk | None:
        if size == tf.offset:
            return None  # nothing new (a rewrite to exactly the same size goes unseen until it grows)
        reset = False
        with tf.path.open("rb") as fh:
            head = fh.read(min(size, _FINGERPRINT))
            if size < tf.offset or head[: len(tf.fingerprint)] != tf.fingerprint:
                tf.offset, tf.fingerprint, tf.line_no, tf.skipping, tf.emitted = 0, b"", 0, False, 0
                tf.state = self.new_state(tf.path)
                self.resets += 1
                reset = True
            if len(head) > len(tf.fingerprint):
                tf.fingerprint = head
            if size == tf.offset:
                return TailChunk(tf, None, tf.line_no + 1, reset)
            mark = (tf.offset, tf.line_no, tf.skipping, tf.emitted)
            fh.seek(tf.offset)
            data = fh.read(min(size - tf.offset, max(budget, self.max_line_bytes)))
        start = 0
        if tf.skipping:
            nl = data.find(b"\n")
            if nl < 0:
                tf.offset += len(data)
                return None
            start, tf.skipping = nl + 1, False
        end = data.rfind(b"\n")
        if end < start:
            pending = len(data) - start
            if pending >= self.max_line_bytes:  # a "line" too long to be a record: drop it
                tf.offset += len(data)
                tf.skipping = True
                self.dropped_lines += 1
            else:
                tf.offset += start
            return TailChunk(tf, None, tf.line_no + 1, reset, mark) if reset else None
        body = data[start:end]
        tf.offset += end + 1
        first_line = tf.line_no + 1
        tf.line_no += body.count(b"\n") + 1
        return TailChunk(tf, body, first_line, reset, mark)

    def rewind(self, chunk: TailChunk, restart: bool) -> None:
        """Put the chunk's file back where it was before the chunk: its lines are read again
        by the next poll. ``restart`` (for parsers that gather a whole file and emit from
        ``emitted`` on) reads the file again from its start with a fresh parser; rows already
        delivered are not emitted twice."""
        tf = chunk.file
        tf.offset, tf.line_no, tf.skipping, tf.emitted = chunk.start
        if restart:
            tf.offset, tf.line_no, tf.skipping, tf.fingerprint = 0, 0, False, b""
            tf.state = self.new_state(tf.path)


def _last_line_end(path: Path, size: int, window: int = 2**20) -> int:
    """Offset just past the last newline before ``size``: where reading resumes at the end."""
    start = max(0, size - window)
    with path.open("rb") as fh:
        fh.seek(start)
        tail = fh.read(size - start)
    nl = tail.rfind(b"\n")
    return start + nl + 1 if nl >= 0 else start


def _head(path: Path, n: int = _FINGERPRINT) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def job_from_path(path: Path, root: Path) -> str:
    """The job a file belongs to, from its directory: ``nccl-inspector-<jobid>`` (the Inspector's
    default dump dir under Slurm) gives ``<jobid>``, any other directory its own name."""
    parent = path.parent if path.parent != path else root
    name = parent.name or root.resolve().name
    m = _JOB_DIR.match(name)
    return m.group("job") if m else name


class NcclFileCollector:
    """The NCCL files of one directory (one job, or one job per subdirectory via ``pattern``).

    ``format`` is ``inspector`` (JSON lines), ``nccl_tests`` (test output) or ``profiler``
    (example-plugin traces). ``debug_pattern`` names NCCL_DEBUG=INFO files (e.g. written with
    ``NCCL_DEBUG_FILE=nccl.%h.%p``) in the same directory: they give each process's GPU index
    and each channel's transport, and their wiring is kept in :attr:`topology` for transport
    checks. ``gpus_per_host`` is the fallback GPU index (rank % gpus_per_host). ``clock`` is
    the time the debug lines are stamped with as they are read (NCCL's INFO lines carry none):
    the start-up detector times a stalled init on it. ``flight_recorder_pattern`` (PyTorch's
    Flight Recorder dumps) and ``watchdog_pattern`` (the job's logs, for ProcessGroupNCCL watchdog
    timeouts) add ``nccl_rank_state`` rows (:mod:`~graywire.collectors.nccl.rank_files`), with the
    host from ``host_regex``.
    """

    source = "nccl"

    def __init__(
        self,
        directory: str | Path,
        pattern: str | None = None,
        format: Format = "inspector",
        *,
        job: str | None = None,
        debug_pattern: str | None = None,
        gpus_per_host: int | None = None,
        short_hostnames: bool = False,
        collective: str | None = None,
        placement: Literal["out_of_place", "in_place"] = "out_of_place",
        start_at: Literal["beginning", "end"] = "beginning",
        max_bytes_per_scrape: int = 256 * 2**20,
        clock: Callable[[], datetime] | None = None,
        flight_recorder_pattern: str | None = None,
        watchdog_pattern: str | None = None,
        host_regex: str | None = None,
        job_regex: str | None = None,
    ) -> None:
        if format not in DEFAULT_PATTERN:
            raise ValueError(f"unknown NCCL format {format!r}; use one of {sorted(DEFAULT_PATTERN)}")
        self.directory = Path(directory)
        self.pattern = pattern or DEFAULT_PATTERN[format]
        self.format: Format = format
        self.job = job
        self.job_regex = re.compile(job_regex) if job_regex else None
        self.gpus_per_host = gpus_per_host
        self.short_hostnames = short_hostnames
        self.collective = collective
        self.placement = placement
        self.target = str(self.directory / self.pattern)
        self.tailer = DirectoryTailer(
            self.directory, self.pattern, self._new_state, start_at, max_bytes_per_scrape
        )
        self.topology: NcclTopology | None = None
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self._init_views = InitViews()
        self._read_at: datetime | None = None  # the clock at the last read of the debug lines
        self.debug_tailer: DirectoryTailer | None = None
        if debug_pattern:
            self.topology = NcclTopology()
            # Always from the start: the Init lines that name GPUs and NICs come first.
            self.debug_tailer = DirectoryTailer(self.directory, debug_pattern)
        #: Each debug-logging process's job; None for a file at the top of a shared directory
        #: whose name does not say (its job is then its communicators': :meth:`_jobs`).
        self._proc_job: dict[tuple[str, int], str | None] = {}
        self.rank_files: RankStateFiles | None = None
        if flight_recorder_pattern or watchdog_pattern:
            self.rank_files = RankStateFiles(
                self.directory,
                flight_recorder_pattern,
                DirectoryTailer(self.directory, watchdog_pattern, start_at=start_at)
                if watchdog_pattern
                else None,
                self._top_job,
                re.compile(host_regex) if host_regex else None,
                skip_existing=start_at == "end",
            )
        self._transport_version = -1
        self._transport_age = 0
        self._layout_version = -1
        self._layout_age = 0
        #: Connection lines per communicator at the last wiring and layout views.
        self._transport_links: dict[str, int] = {}
        self._layout_links: dict[str, int] = {}
        self.skipped_lines = 0
        self.last_skipped = 0  # skipped by the last collect (its scrape's parse-skip count)
        self.rows_total = 0
        self._proxy = ProxyRows()  # profiler ProxyOps parsed by the last collect()
        self.last_problems: list[str] = []
        # A scrape that timed out keeps running in its thread; the next must not share the state.
        self._busy = threading.Lock()

    def skip_existing(self) -> None:
        """From the first scrape on, read only what the files gain (as ``start_at: end``): the
        directory moved here from another reader (a replica whose share changed), which read
        what they hold. Ignored once this collector has scraped. The NCCL_DEBUG files are still
        read whole: the Init lines that name GPUs and NICs come first."""
        if self.tailer._polled:
            return
        self.tailer.start_at = "end"
        if self.rank_files is not None and not self.rank_files._polled:
            self.rank_files.skip_existing = True
            if self.rank_files.watchdog is not None:
                self.rank_files.watchdog.start_at = "end"

    def _job(self, path: Path) -> str:
        return self.job or self._named_job(path) or job_from_path(path, self.directory)

    def _named_job(self, path: Path) -> str | None:
        """The job ``job_regex`` reads off a file's path under ``directory`` (its ``job`` group)."""
        return path_part(self.job_regex, self.directory, path, "job")

    def _debug_job(self, path: Path) -> str | None:
        """A debug file's job: configured, named by ``job_regex``, its directory's when it is in
        one below ``directory``; None for a file at the top (many jobs often share one log
        directory: the job is not the directory)."""
        if self.job or (named := self._named_job(path)):
            return self.job or named
        return job_from_path(path, self.directory) if path.parent != self.directory else None

    def _inspector_job(self, path: Path) -> str | None:
        """An Inspector file's job where its directory is shared (a file at the top, no job
        configured or named): its process's (``<host>-pid<pid>.log``) job from the debug lines."""
        if self.job or path.parent != self.directory or self._named_job(path) or self.topology is None:
            return None
        m = _INSPECTOR_FILE.match(path.name)
        if m is None:
            return None
        job = self._proc_job.get((m.group("host"), int(m.group("pid"))), "")
        return self._jobs().get((m.group("host"), int(m.group("pid")))) if job is None else None

    def _jobs(self) -> dict[tuple[str, int], str]:
        """Every debug-logging process's job; one its file does not name is its communicators':
        ``<directory>/<commId of its job's largest communicator>``, processes that share a
        communicator being one job (:meth:`NcclTopology.process_groups`)."""
        groups = self.topology.process_groups() if self.topology is not None else {}
        out: dict[tuple[str, int], str] = {}
        for proc, job in self._proc_job.items():
            if job is None:
                group = groups.get(proc)
                job = f"{self.directory.name}/{group}" if group else self.directory.name
            out[proc] = job
        return out

    def _top_job(self, path: Path) -> str:
        """The job of a dump or log: the file's top directory under ``directory`` (the same as
        :meth:`_job` for files one level down; ``<job>/<host>/nccl_trace_rank_3`` is ``<job>``'s)."""
        if self.job:
            return self.job
        try:
            parts = path.relative_to(self.directory).parts
        except ValueError:
            return job_from_path(path, self.directory)
        return job_from_path(self.directory / parts[0] / "x" if len(parts) > 1 else path, self.directory)

    def collect_rank_state(self) -> pa.RecordBatch | None:
        """Flight Recorder and watchdog rows (``nccl_rank_state``) new since the last call, stamped
        by the clock; None without either pattern or when there are none. Call after :meth:`collect`
        (its problems join that scrape's)."""
        if self.rank_files is None:
            return None
        problems: list[str] = []
        batch = self.rank_files.collect(self.clock(), problems)
        self.last_problems = (self.last_problems + problems)[:5]
        return batch

    def _new_state(self, path: Path) -> Any:
        if self.format == "inspector":
            topo = self.topology
            return InspectorParser(
                self._job(path),
                device_of=topo.device_of if topo is not None else None,
                transport_of=topo.transport_of if topo is not None else None,
                gpus_per_host=self.gpus_per_host,
                short_hostnames=self.short_hostnames,
            )
        if self.format == "nccl_tests":
            return NccltestsParser(collective=self.collective or collective_from_name(path.name))
        return ProfilerParser()

    def collect(self) -> pa.RecordBatch | None:
        """The rows appended since the last call, as one batch (None when there are none)."""
        problems: list[str] = []
        skipped = 0
        if self.debug_tailer is not None and self.topology is not None:
            before = self.topology.malformed
            now = self._read_at = self.clock()
            for chunk in self.debug_tailer.poll():
                job = self._debug_job(chunk.file.path)
                lines = [ln.decode("utf-8", "replace") for ln in chunk.lines]
                for ln in lines[:1] if self.job else lines:
                    if (proc := process_of(ln)) is not None:
                        self._proc_job[proc] = job
                self.topology.feed(lines, now)
            skipped += self.topology.malformed - before
        rows = TimingRows()
        dropped_before = self.tailer.dropped_lines
        chunks = self.tailer.poll()  # every file's offset is past its chunk from here on
        restart = self.format != "inspector"
        for chunk in chunks:
            mark = len(rows)
            try:
                skipped += self._parse(chunk, rows, problems)
            except Exception as e:  # rows not delivered keep their offset: read again next poll
                rows.truncate(mark)
                self.tailer.rewind(chunk, restart)
                problems.insert(0, f"{chunk.file.path.name}: {type(e).__name__}: {e}; read again next scrape")
        skipped += self.tailer.dropped_lines - dropped_before
        try:
            batch = rows.to_batch() if len(rows) else None
        except Exception:
            for chunk in chunks:
                self.tailer.rewind(chunk, restart)
            raise
        self.skipped_lines += skipped
        self.last_skipped = skipped
        self.last_problems = problems[:5]
        self.rows_total += len(rows)
        return batch

    def collect_transport(self, now: datetime | None = None) -> pa.RecordBatch | None:
        """The ranks' wiring (``nccl_transport``) of the communicators that are settled (init
        complete, connection lines no longer arriving: :func:`settled_communicators`), when the
        debug lines changed it or it is due for a refresh; None otherwise, or without
        ``debug_pattern``. Call after :meth:`collect`."""
        topo = self.topology
        if topo is None:
            return None
        self._transport_age += 1
        if topo._version == self._transport_version and self._transport_age < TRANSPORT_REFRESH_SCRAPES:
            return None
        ready, waiting = settled_communicators(topo, self._transport_links)
        # One still settling is looked at again next scrape, though no line changed by then.
        self._transport_version = -1 if waiting else topo._version
        self._transport_age = 0
        job: str | dict[tuple[str, int], str] = self.job or self._jobs()
        return transport_batch(topo, job, now, only=ready)

    def collect_layout(self, now: datetime | None = None) -> pa.RecordBatch | None:
        """What each host's topology probe found per communicator (``nccl_layout``), on the same
        terms as :meth:`collect_transport`; dated by ``now``, else the last :meth:`collect`."""
        topo = self.topology
        if topo is None:
            return None
        self._layout_age += 1
        if topo._version == self._layout_version and self._layout_age < TRANSPORT_REFRESH_SCRAPES:
            return None
        ready, waiting = settled_communicators(topo, self._layout_links)
        self._layout_version = -1 if waiting else topo._version
        self._layout_age = 0
        job: str | dict[tuple[str, int], str] = self.job or self._jobs()
        return layout_batch(topo, job, now or self._read_at, only=ready)

    def _parse(self, chunk: TailChunk, rows: TimingRows, problems: list[str]) -> int:
        tf, name = chunk.file, chunk.file.path.name
        st = tf.state
        if isinstance(st, InspectorParser) and (job := self._inspector_job(tf.path)) is not None:
            st.job = job  # the job of its process's communicators, once its debug lines say it
        if isinstance(st, InspectorParser):
            before, seen = st.skipped, len(st.problems)
            if chunk.data is not None:
                st.feed_data(chunk.data, rows, f"{name} ", chunk.first_line)
            problems.extend(st.problems[seen:])
            del st.problems[:]  # keep only new ones per scrape
            return st.skipped - before
        if isinstance(st, NccltestsParser):
            before, seen = st.skipped, len(st.problems)
            st.feed(chunk.lines)
            problems.extend(f"{name} {p}" for p in st.problems[seen:])
            del st.problems[:]
            mtime = int(tf.path.stat().st_mtime * 1e6) if tf.path.exists() else None
            tf.emitted = st.timing_rows(
                rows,
                job=self._job(tf.path),
                communicator=tf.path.stem,
                placement=self.placement,
                observed_us=mtime,
                start=tf.emitted,
            )
            return st.skipped - before
        assert isinstance(st, ProfilerParser)
        before, seen = st.skipped, len(st.problems)
        if chunk.data is not None:
            st.feed_data(chunk.data)
        problems.extend(f"{name} {p}" for p in st.problems[seen:])
        del st.problems[:]
        mtime = int(tf.path.stat().st_mtime * 1e6) if tf.path.exists() else None
        host = dump_name_parts(name)[0]
        job = self._job(tf.path)
        tf.emitted = st.timing_rows(rows, job=job, host=host, observed_us=mtime, start=tf.emitted)
        topo = self.topology
        st.proxy_rows(
            self._proxy,
            job=job,
            host=host,
            device_of=topo.device_of if topo is not None else None,
            port_of=topo.net_port if topo is not None else None,
            observed_us=mtime,
        )
        return st.skipped - before

    def collect_init(self) -> pa.RecordBatch | None:
        """How far each communicator's init got (``nccl_init``): the communicators whose init
        lines changed since the last call and every one still initializing, dated by the
        clock of the last :meth:`collect`; None without ``debug_pattern`` or such rows."""
        if self.topology is None or self._read_at is None:
            return None
        job: str | dict[tuple[str, int], str] = self.job or self._jobs()
        return self._init_views.batch(self.topology, job, self._read_at)

    def collect_proxy(self) -> pa.RecordBatch | None:
        """The profiler's per-peer network steps (``nccl_proxy``) parsed by the last
        :meth:`collect`, as one batch; None when there were none (or not a profiler source)."""
        rows, self._proxy = self._proxy, ProxyRows()
        return rows.to_batch() if len(rows) else None

    def _collect_once(self) -> tuple[pa.RecordBatch, ...]:
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("the previous scrape of this directory is still reading")
        try:
            timing = self.collect()
            proxy = self.collect_proxy()
            wiring = self.collect_transport(timing.column("time")[0].as_py() if timing is not None else None)
            init = self.collect_init()
            layout = self.collect_layout(timing.column("time")[0].as_py() if timing is not None else None)
            ranks = self.collect_rank_state()
            return tuple(b for b in (timing, proxy, wiring, init, layout, ranks) if b is not None)
        finally:
            self._busy.release()

    async def aclose(self) -> None:
        """Nothing held open between scrapes: files are opened per read."""

    async def scrape(self) -> ScrapeResult:
        t0 = time.perf_counter()
        try:
            batches = await asyncio.to_thread(self._collect_once)
        except Exception as e:  # the contract: never raise out of a scrape
            return failed(self.source, self.target, e, time.perf_counter() - t0)
        note = None
        if self.last_problems:
            note = f"skipped malformed lines or files ({self.skipped_lines} lines so far): " + "; ".join(
                self.last_problems
            )
        return ScrapeResult(
            self.source,
            self.target,
            ok=True,
            batches=batches,
            error=note,
            duration_s=time.perf_counter() - t0,
            skipped={MALFORMED_LINE: self.last_skipped} if self.last_skipped else {},
        )


__all__ = ["DEFAULT_PATTERN", "DirectoryTailer", "Format", "NcclFileCollector", "job_from_path"]
