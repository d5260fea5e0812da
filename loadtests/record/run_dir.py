"""One run's directory: its layout, its atomic writes, and the manifest written when the run starts.

``<report-dir>/<scenario>-<UTC stamp>[-N]/`` holds, as reports/README.md describes:
``manifest.json`` (what ran: written at test start), ``requests.parquet/``, ``frames.parquet/`` and
``lag.parquet/`` (parquet parts written as the run goes, ``loadtests.record.parts_writer``),
``server_metrics.parquet/`` (the server's ``/metrics``, scraped as the run goes, ``loadtests.record.server_metrics``),
``resources.csv`` (memory samples of a soak), ``summary.json`` (the verdict), ``report.html``,
``requests.csv`` and, when the disk refused rows, ``unwritable-rows.jsonl``. No other module
spells these names: they ask a ``RunDir``. Every whole-file write goes to a temporary name and is
renamed into place, so a reader never sees half a file.

One writer at a time. ``writer.lock`` is the directory's writer lock (``RunDir.writer_lock``: an
exclusive ``flock``, which the kernel drops when its holder dies, however it dies, so a killed run
leaves no stale lock; the file names its holder). The process that leads a run holds it from the
test's start until the test is judged; ``python -m loadtests report`` holds it while it re-judges,
and refuses a directory whose lock is held (``RunInProgress``): a run still in progress, which
nothing but its own writer may write into, since its judging checks that the parts it judges are
those a summary recorded. A worker of ``--processes`` whose master died writes what it could not
ship under the lock: into the run's tables while the run is unjudged (its killed master never
judged it), else into ``late/`` (``RunDir.late``), parts kept apart, never judged, named by
``report`` (``late_writers``), so a judged directory stays as it was judged.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import platform
import re
import socket
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from loadtests.base.safe_text import plain_name
from loadtests.errors import ManifestError, RecordNotWritten, RunDirError, RunInProgress, WrongType, error_kind
from loadtests.record.lag import LAG_SCHEMA
from loadtests.record.recorder import FRAME_SCHEMA, REQUEST_SCHEMA, to_pandas
from loadtests.record.server_metrics import SERVER_METRICS_SCHEMA

RUN_DIR_ENV = "SSE_SOAK_RUN_DIR"
"""An empty directory the next test writes into instead of making its own (the soak job makes it,
so it knows where the run is without reading Locust's output)."""
PLAN_ONLY_ENV = "SSE_SOAK_PLAN_ONLY"
"""A directory where a scenario only writes the manifest it would start with (its settings and
gates; no services) and exits 0, before it starts or contacts anything (``loadtests.launch.plan``)."""


_SCHEMAS = {
    "requests": REQUEST_SCHEMA,
    "frames": FRAME_SCHEMA,
    "lag": LAG_SCHEMA,
    "server_metrics": SERVER_METRICS_SCHEMA,
}


def read_table(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A requests or frames table (a parquet file or a directory of parts) with nullable integers
    as pandas ``Int64``; an empty table with the right columns when nothing was written. A column
    its schema has and an older run did not write yet (``finish_reason``) reads as nulls."""
    schema = _SCHEMAS.get(path.name.split(".")[0], REQUEST_SCHEMA)
    written = path.is_file() or (path.is_dir() and any(path.glob("*.parquet")))
    if not written:
        table = schema.empty_table()
        return to_pandas(table if columns is None else table.select(columns))
    present = set(pq.ParquetDataset(path).schema.names)
    table = pq.read_table(path, columns=None if columns is None else [name for name in columns if name in present])
    for name in columns or schema.names:
        if name not in present and name in schema.names:
            column = schema.field(name)
            table = table.append_column(column, pa.nulls(len(table), column.type))
    return to_pandas(table if columns is None else table.select(columns))


def parts_problem(recorded: dict[str, int], present: dict[str, int], growing: bool) -> str | None:
    """What differs between the parts a summary ``recorded`` and those ``present`` now, or None.
    New parts are a change too, unless the run was still ``growing`` (a soak's checkpoint)."""
    missing = [name for name in recorded if name not in present]
    changed = [f"{name} ({recorded[name]} rows, now {present[name]})" for name in recorded
               if name in present and present[name] != recorded[name]]  # fmt: skip
    added = [] if growing else [name for name in present if name not in recorded]
    problems = [
        *([f"{len(missing)} part(s) missing: {', '.join(missing[:3])}"] if missing else []),
        *([f"{len(changed)} part(s) changed: {', '.join(changed[:3])}"] if changed else []),
        *([f"{len(added)} part(s) added: {', '.join(added[:3])}"] if added else []),
    ]
    return "; ".join(problems) or None


@dataclass(frozen=True)
class Service:
    """A process the run started and stops: the target server, a proxy."""

    name: str
    url: str
    pid: int


@dataclass(frozen=True)
class Manifest:
    """What ran, written when the run starts: a run killed before its end still says it."""

    scenario: str
    started_at: str
    """UTC, ISO 8601."""
    settings: dict[str, Any]
    gate_specs: list[dict[str, Any]]
    """The scenario's gates as plain data (``loadtests.judge.gates.Gate.spec``): a run judged before it
    wrote a summary (a soak checkpoint, a killed run) is judged by them."""
    services: list[Service] = field(default_factory=list)
    workers: int = 0
    """Worker processes connected when the test started (0: one local process)."""
    versions: dict[str, str] = field(default_factory=dict)
    point: list[str] | None = None
    """The names of the gates that are the scenario's point (``Summary.point``); None: every gate."""
    gate_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    """Where each gate type of ``gate_specs`` that sse-soak does not ship is defined (a user's
    locustfile), by type name (``loadtests.judge.gates.gate_sources``): how another process loads it."""

    def service(self, name: str) -> Service | None:
        return next((service for service in self.services if service.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        """Raises ``TypeError``/``KeyError``/``ValueError`` on anything but a manifest."""
        services = [Service(str(s["name"]), str(s["url"]), int(s["pid"])) for s in data.get("services", [])]
        specs = data.get("gate_specs", [])
        if not isinstance(data.get("settings", {}), dict) or not all(isinstance(s, dict) for s in specs):
            raise WrongType("settings must be an object and gate_specs a list of objects")
        return cls(
            str(data["scenario"]),
            str(data["started_at"]),
            dict(data.get("settings", {})),
            list(specs),
            services,
            int(data.get("workers", 0)),
            dict(data.get("versions", {})),
            None if data.get("point") is None else [str(name) for name in data["point"]],
            {str(kind): dict(source) for kind, source in (data.get("gate_sources") or {}).items()},
        )


def versions() -> dict[str, str]:
    """The versions a run's figures depend on."""
    found = {"python": platform.python_version()}
    for package in ("sse-soak", "locust", "gevent", "geventhttpclient", "openai"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def _open_lock(path: Path, create: bool) -> int | None:
    """The lock file, opened read-only to take its ``flock`` (made when it is not there, if to
    ``create`` it and it can be); None when it can be neither made nor opened. Never held open for
    writing: a disk the system remounts read-only mid-run is not kept busy by it (``_name_holder``
    writes briefly). Opened close-on-exec: no service started later inherits it."""
    for flags in ((os.O_CREAT,) if create else ()) + (0,):
        try:
            return os.open(path, os.O_RDONLY | flags | os.O_CLOEXEC, 0o644)
        except OSError:
            continue
    return None


def _name_holder(path: Path) -> None:
    """Write who holds the lock into its file, opened for writing only that long; nothing when the
    disk refuses it (a lock file opened read-only is still a lock)."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with contextlib.suppress(OSError):
        path.write_text(f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n")


def _holder(fd: int) -> str:
    """Who holds the lock, as the holder wrote it in the file."""
    try:
        said = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        said = ""
    return said or "another process"


def report_root_problem(report_root: str | os.PathLike[str]) -> str | None:
    """Why ``report_root`` cannot hold run directories, without writing anything; None when it can.
    It must be a writable directory, or be creatable under the nearest existing ancestor."""
    root = Path(report_root)
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        if existing == root:
            return "not a directory (a file is in the way)"
        return f"cannot be created (a file is in the way: {existing})"
    if not os.access(existing, os.W_OK | os.X_OK):
        return "not writable" if existing == root else f"cannot be created ({existing} is not writable)"
    return None


WRITER_LOCK_POLL_S = 0.05
"""How often ``writer_lock`` tries again while it waits for another holder."""
_LATE_PART = re.compile(r"^part-(\d+)-\d+\.parquet$")


class WriterLock:
    """The run directory's writer lock, held until ``release()`` or this process's end (``fd``
    None: the directory could hold no lock file, a read-only one, so nothing can write there)."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    @property
    def held(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        """Let the next writer in (closing the file drops the ``flock``); once."""
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> WriterLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


@dataclass(frozen=True)
class LateWriter:
    """One process's parts in ``late/``: written after its run was judged, never judged."""

    pid: int
    worker: str
    """The worker its rows name, else ``pid N``."""
    parts: int
    rows: int

    def line(self) -> str:
        return (
            f"{self.parts} late part(s) ({self.rows} rows) from {self.worker}, written after the run was judged: "
            f"kept apart in {RunDir.LATE}/, not judged"
        )


class RunDir:
    """A run directory (it may not hold a run yet: see ``holds_results``)."""

    MANIFEST = "manifest.json"
    SUMMARY = "summary.json"
    REQUESTS = "requests.parquet"
    FRAMES = "frames.parquet"
    LAG = "lag.parquet"
    SERVER_METRICS = "server_metrics.parquet"
    RESOURCES = "resources.csv"
    REPORT = "report.html"
    REQUESTS_CSV = "requests.csv"
    UNWRITABLE_ROWS = "unwritable-rows.jsonl"
    WRITER_LOCK = "writer.lock"
    LATE = "late"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __str__(self) -> str:
        return str(self.path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    @classmethod
    def create(cls, report_root: str | os.PathLike[str], scenario: str) -> RunDir:
        """``<report_root>/<scenario>-<UTC stamp>[-N]``, made atomically: runs started in the same
        second (or racing from several processes) each get their own directory, because ``mkdir``
        fails rather than reuse one and the next suffix is tried. Raises ``RunDirError`` when the
        root cannot hold it (a file in the way, not writable) or ``scenario`` is not a plain name
        (``loadtests.base.safe_text.plain_name``: a path would put the directory elsewhere)."""
        try:
            plain_name(scenario, "run name")
        except ValueError as exc:
            raise RunDirError(str(exc)) from None
        root = Path(report_root)
        problem = report_root_problem(root)
        if problem is not None:
            raise RunDirError(f"--report-dir {root}: {problem}")
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        suffix = 1
        try:
            root.mkdir(parents=True, exist_ok=True)
            while True:
                directory = root / (f"{scenario}-{stamp}" if suffix == 1 else f"{scenario}-{stamp}-{suffix}")
                try:
                    directory.mkdir()
                    return cls(directory)
                except FileExistsError:  # another run took this name first: try the next one
                    suffix += 1
        except OSError as exc:  # the root changed under us, or the checks above could not tell
            raise RunDirError(f"--report-dir {root}: cannot create a run directory ({exc.strerror or exc})") from None

    # -- paths ------------------------------------------------------------------------------------
    @property
    def requests(self) -> Path:
        return self.path / self.REQUESTS

    @property
    def frames(self) -> Path:
        return self.path / self.FRAMES

    @property
    def lag(self) -> Path:
        return self.path / self.LAG

    @property
    def server_metrics(self) -> Path:
        return self.path / self.SERVER_METRICS

    @property
    def resources(self) -> Path:
        return self.path / self.RESOURCES

    @property
    def summary(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def manifest(self) -> Path:
        return self.path / self.MANIFEST

    @property
    def report_html(self) -> Path:
        return self.path / self.REPORT

    @property
    def requests_csv(self) -> Path:
        return self.path / self.REQUESTS_CSV

    @property
    def unwritable_rows(self) -> Path:
        return self.path / self.UNWRITABLE_ROWS

    @property
    def writer_lock_file(self) -> Path:
        return self.path / self.WRITER_LOCK

    @property
    def late(self) -> RunDir:
        """Where parts written after the run was judged are kept apart (the same layout)."""
        return RunDir(self.path / self.LATE)

    def writer_lock(self, wait_s: float = 0.0, create: bool = True) -> WriterLock:
        """Take the directory's writer lock (module docstring), waiting up to ``wait_s`` for another
        holder; ``RunInProgress`` naming that holder when it still has it. Taken, it names this
        process in the file. A directory that cannot hold the file (read-only), or has none when
        not to ``create`` it (a reader's: a run written before the lock, no writer to wait for),
        gives an unheld lock. Never creates the directory."""
        fd = _open_lock(self.writer_lock_file, create)
        if fd is None:
            return WriterLock(None)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _holder(fd)
                    os.close(fd)
                    raise RunInProgress(
                        f"{self.path}: the run is still in progress ({holder} writes it): nothing was read or "
                        "written; report it once the run has ended"
                    ) from None
                time.sleep(WRITER_LOCK_POLL_S)
        _name_holder(self.writer_lock_file)
        return WriterLock(fd)

    def late_writers(self) -> list[LateWriter]:
        """The processes that wrote parts into ``late/``, by pid (module docstring)."""
        by_pid: dict[int, list[Path]] = {}
        for table in (self.REQUESTS, self.FRAMES, self.LAG):
            for file in sorted((self.late.path / table).glob("part-*.parquet")):
                match = _LATE_PART.match(file.name)
                if match:
                    by_pid.setdefault(int(match[1]), []).append(file)
        writers = []
        for pid, files in sorted(by_pid.items()):
            rows, workers = 0, set()
            for file in files:
                if file.parent.name == self.REQUESTS:
                    named = pq.read_table(file, columns=["worker"]).column("worker").to_pylist()
                    rows += len(named)
                    workers |= {str(name) for name in named if name}
            worker = ", ".join(sorted(workers)) or f"pid {pid}"
            writers.append(LateWriter(pid, worker, len(files), rows))
        return writers

    def part_counts(self) -> dict[str, int]:
        """Each parquet file of the run's tables (``requests.parquet/part-….parquet``, or a table
        written as one file) and its row count, read from the files' footers only."""
        counts: dict[str, int] = {}
        for table in (self.REQUESTS, self.FRAMES, self.LAG, self.SERVER_METRICS):
            path = self.path / table
            files = sorted(path.glob("*.parquet")) if path.is_dir() else [path] if path.is_file() else []
            for file in files:
                counts[str(file.relative_to(self.path))] = pq.read_metadata(file).num_rows
        return counts

    def holds_results(self) -> bool:
        """The run wrote its request table (possibly empty): something to judge."""
        return self.requests.exists()

    # -- tables -----------------------------------------------------------------------------------
    def read_requests(self, columns: list[str] | None = None) -> pd.DataFrame:
        return read_table(self.requests, columns)

    def read_frames(self, columns: list[str] | None = None) -> pd.DataFrame:
        return read_table(self.frames, columns)

    def read_lag(self) -> pd.DataFrame:
        return read_table(self.lag)

    def read_server_metrics(self) -> pd.DataFrame:
        """The server's scraped metrics (``loadtests.record.server_metrics``); empty, with its columns, when none."""
        return read_table(self.server_metrics)

    def read_resources(self) -> pd.DataFrame:
        """Memory samples (``t`` epoch seconds, RSS in MiB); empty when none were taken."""
        if not self.resources.exists():
            return pd.DataFrame(columns=["t", "harness_rss_mb", "server_rss_mb"], dtype=float)
        return pd.read_csv(self.resources)

    # -- whole files ------------------------------------------------------------------------------
    def write_text(self, name: str, text: str) -> Path:
        """Write ``name`` atomically (a temporary file renamed into place); ``RecordNotWritten``
        when the disk refuses, with the temporary file removed."""
        path = self.path / name
        temporary = path.with_name(path.name + ".tmp")
        try:
            temporary.write_text(text, encoding="utf-8")
            temporary.replace(path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise RecordNotWritten(f"could not write {path}: {exc.strerror or exc}") from None
        return path

    def write_json(self, name: str, data: dict[str, Any]) -> Path:
        return self.write_text(name, json.dumps(data, indent=2) + "\n")

    def write_manifest(self, manifest: Manifest) -> None:
        self.write_json(self.MANIFEST, manifest.to_json())

    def read_manifest(self) -> Manifest | None:
        """The manifest, None when the run has not written one (or predates manifests); raises
        ``ManifestError`` when the file is there but is not one."""
        if not self.manifest.exists():
            return None
        try:
            data = json.loads(self.manifest.read_text(encoding="utf-8"))
            return Manifest.from_json(data)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ManifestError(f"{self.manifest}: not a run manifest ({error_kind(exc)}: {exc})") from None


class RunRecord:
    """Everything a judgement reads of one run directory, each part read from disk at most once, when
    first asked for, then shared by the gates, the summary and the report: the manifest, the parquet
    parts' row counts, the requests, frames, lag and server-metrics tables and the memory samples.
    Invariant: a part is read once per record, so a judgement reads the directory once; a record is
    of the directory as it was when each part was first read."""

    def __init__(self, run: RunDir) -> None:
        self.run = run

    def __repr__(self) -> str:
        return f"RunRecord({str(self.run.path)!r})"

    @functools.cached_property
    def manifest(self) -> Manifest | None:
        return self.run.read_manifest()

    @functools.cached_property
    def parts(self) -> dict[str, int]:
        return self.run.part_counts()

    @functools.cached_property
    def requests(self) -> pd.DataFrame:
        """Every request row as written (``requests.csv`` and report.html show these)."""
        return self.run.read_requests()

    @functools.cached_property
    def frames(self) -> pd.DataFrame:
        return self.run.read_frames()

    @functools.cached_property
    def lag(self) -> pd.DataFrame:
        """Every lag sample, not only those taken while streams were open."""
        return self.run.read_lag()

    @functools.cached_property
    def server_metrics(self) -> pd.DataFrame:
        return self.run.read_server_metrics()

    @functools.cached_property
    def resources(self) -> pd.DataFrame:
        return self.run.read_resources()

    def read_every_frame(self) -> None:
        """Read every frame now, once, for a judgement that writes the report (which shows them
        all): its column reads (``frame_columns``) then slice this table, not the file again. A
        damaged part is left to those reads, which say what they could not read."""
        if "frames" not in self.__dict__:
            with contextlib.suppress(OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
                self.__dict__["frames"] = self.run.read_frames()

    def frame_columns(self, columns: list[str]) -> pd.DataFrame:
        """``columns`` of the frames: of the table already read, else only those columns (a judgement
        without a report never reads every frame)."""
        if "frames" in self.__dict__:
            return self.frames[columns]
        return self.run.read_frames(columns)
