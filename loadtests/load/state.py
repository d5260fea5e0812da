"""The per-process state of one Locust run, reachable from its ``Environment``.

Users need the recorder, the model, the worker's name and the prepared request mixes; the
scenario hooks need the same objects at the end. Keeping them in one ``RunState`` per
``Environment`` (not in module globals) lets tests run several environments in one process.
Mixes are prepared (prompts built and measured against the target) once per process, by the
first user that needs them, while the others wait on a gevent lock. Under the same lock the
target is discovered once: its model and how prompts are sized (``/tokenize`` or estimates);
when sizing is estimated, the process prints one line saying why.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx
from gevent.lock import Semaphore

from loadtests.base.lines import say
from loadtests.base.process_part import Part
from loadtests.base.safe_text import printable, url_origin, without_credentials
from loadtests.client.outcome import Outcome, RequestRow, StreamTracker
from loadtests.client.tls import client_context
from loadtests.declare.options import option
from loadtests.declare.scenario import RunSettings
from loadtests.declare.workload import (
    PROBE_TIMEOUT,
    PreparedMix,
    RequestMix,
    ServerFacts,
    ServerPace,
    discover,
    milliseconds,
    probe_prompt_sizing,
)
from loadtests.errors import OutOfOrder
from loadtests.load.open_loop import ArrivalSchedule
from loadtests.load.slot_holders import DEFAULT_MAX_SLOT_HOLDERS, Found, SlotHolders, release_period
from loadtests.record.lag import LagMonitor
from loadtests.record.membership import Admission
from loadtests.record.recorder import Recorder

if TYPE_CHECKING:  # importing Locust monkey-patches the process: only the users' modules do
    from locust.env import Environment
    from locust.runners import Runner

STUCK_FACTOR = 3.0
STUCK_MIN_S = 5.0
"""A stream still open when the run ends is stuck (judged a ``timeout``) when it was open over
``STUCK_FACTOR`` times the longest stream of its kind that finished, and over ``STUCK_MIN_S``, and
no data frame came for its last ``STUCK_MIN_S``."""


PACE_CHECK_MIN_TOKENS = 32
"""A finished stream checks the pace in use only when it asked for and streamed at least this many
tokens: a lengthened slot holder."""
PACE_TOLERANCE = 0.25
"""How much faster than the pace in use a holder must stream for the holders to be sized again."""
PACE_MAX_RESIZES = 3
"""Re-sizings before the pace is settled whatever the holders show."""


@dataclass
class RunState:
    """What this process's users and the run controller share for one run. The stream-reading
    values start at their options' defaults (``loadtests.declare.options``) and are set from the
    parsed options at init and at each test start."""

    model_option: str | None = None
    api_key: str | None = None
    credentials: dict[str, str] = field(default_factory=dict)
    """HTTP Basic ``Authorization`` values by origin (``url_origin``), taken out of the URLs given
    (``--host``, the web UI form's host) by ``take_credentials``: every client sends them to that
    origin, while the URL Locust holds, shows and reports carries none."""
    settings: RunSettings | None = None
    """The settings of the test under way (``loadtests.run.settings``): computed at init and again as
    each test starts (the web UI's form may change them), read by everything after; None before init."""
    client_idle_timeout: float = option("client_idle_timeout").default
    stream_deadline: float = option("stream_deadline").default
    """Seconds a stream may stay open from its send, however lively (``--stream-deadline``)."""
    frame_sample_rate: float = option("frame_sample_rate").default
    """Share of ``ok`` streams whose frame records are kept; other outcomes always keep theirs."""
    max_line_bytes: int = option("max_line_bytes").default
    """Longest SSE line a user reads; a longer one is a protocol error and ends that stream."""
    probe_timeout: float = PROBE_TIMEOUT
    """Seconds the first ``/tokenize`` request may take before prompt sizing turns to estimates."""
    hold_slots: bool = False
    """The target is a server the run did not start (``--host``, ``--server vllm``): a mix with
    ``hold_s`` specs starts this test's ``slot_holders``, which make its streams queue; when they
    cannot (a bound reached), once a stream shows its pace, requests with ``hold_s`` are lengthened
    to it so that streams queue behind each other (``learn_pace``)."""
    known_concurrency: Found | None = None
    """The server's concurrency when the run knows it without a search (real vLLM it started, with
    its ``--max-num-seqs``): the slot holders hold that many at once."""
    max_slot_holders: int = DEFAULT_MAX_SLOT_HOLDERS
    """``--max-slot-holders``: the bound on the streams the slot holders send."""
    slot_holders: SlotHolders | None = None
    """This test's slot holders (``loadtests.load.slot_holders``); None until a mix needs them, and
    again at each test's start."""
    _slot_holders_ended: bool = False
    """The test is stopping: its last users start no holders."""
    read_server_gauges: bool = True
    """The slot holders may read the server's gauges at ``/metrics`` (not ``--no-server-metrics``)."""
    read_timeout_judged: float | None = None
    """The proxy read timeout a gate of the run judges silence against, None when none does: the
    slot holders make streams wait past it (set by the run's controller)."""
    streams_open: dict[int, float] = field(default_factory=dict)
    """The run's streams this process has open now (sent, not yet reported): when each was sent
    (``time.monotonic()``), by a key of its own."""
    runner: Runner | None = None
    part: Part | None = None
    """The part this process plays (``loadtests.run.roles``), handed over at init; None before."""
    recorder: Recorder = field(default_factory=Recorder)
    lag: LagMonitor = field(default_factory=LagMonitor)
    """This process's lag monitor; started by the scenario for the whole run."""
    admission: Admission = field(default_factory=Admission)
    """Whether this process may send: a worker waits for its master to admit it (``loadtests.record.membership``)."""
    facts: ServerFacts | None = None
    sizing_host: str | None = None
    """Where prompts are sized (``/v1/models``, ``/tokenize``) when not at the load's target: the
    server behind a proxy or gateway the run started (LiteLLM forwards no ``/tokenize``); sizing is
    set-up, never load, so it need not pass the proxy. None: at the target."""
    arrivals: ArrivalSchedule | None = None
    """Open loop (``--rate``): this process's schedule for the test under way; None in a closed loop."""
    _mixes: dict[int, PreparedMix] = field(default_factory=dict)
    _lock: Semaphore = field(default_factory=Semaphore)
    _announced_estimate: bool = False
    _resizes: int = 0
    """How often the holders were sized again (``learn_pace``); only the first is said."""
    _pace_settled: bool = False
    """The pace is confirmed (or was resized ``PACE_MAX_RESIZES`` times): holders are sized for good."""
    _longest: dict[str, float] = field(default_factory=dict)
    """The longest stream of each name that finished (any outcome but ``stopped``): one float per name."""
    _worker: str | None = None

    @property
    def worker(self) -> str:
        """``worker-N`` on a Locust worker (its index is known only once it joined the master),
        ``local`` in a standalone run (whose runner has a ``worker_index`` of 0 too). Asked for every
        request: remembered once it can no longer change."""
        if self._worker is None:
            name, final = self._worker_name()
            if not final:
                return name
            self._worker = name
        return self._worker

    def _worker_name(self) -> tuple[str, bool]:
        if self.runner is None or self.part is None:
            return "local", False  # both are set at init
        if self.part is not Part.WORKER:
            return "local", True
        index = getattr(self.runner, "worker_index", None)
        return (f"worker-{index}", True) if index is not None and index >= 0 else ("local", False)

    def keeps_frames(self, request_id: str, outcome: str) -> bool:
        """Frame sampling, decided per request (the same request id always decides the same way)."""
        if outcome != Outcome.OK or self.frame_sample_rate >= 1.0:
            return True
        return int(request_id[:8], 16) / 0x1_0000_0000 < self.frame_sample_rate

    @property
    def model(self) -> str:
        if self.facts is None:
            raise OutOfOrder("the target server was not discovered yet")
        return self.facts.model

    @property
    def prompt_sizing(self) -> str | None:
        """``"exact"`` or ``"estimated (<reason>)"`` once this process discovered the target, else None."""
        return None if self.facts is None else self.facts.prompt_sizing

    def prompt_sizing_for(self, host: str) -> str:
        """How this run sizes prompts: what this process found while preparing its mixes, or, in a
        process that prepared none (a master), one probe of ``host`` with this run's key and model."""
        if self.facts is not None:
            return self.facts.prompt_sizing
        target = self.sizing_host or host
        return probe_prompt_sizing(
            target, None, self.model_option, self.probe_timeout, authorization=self.authorization_for(target)
        )

    def take_credentials(self, url: str | None) -> str | None:
        """``url`` without its userinfo, whose Basic auth is kept for its origin (None stays None)."""
        if url is None:
            return None
        bare, authorization = without_credentials(url)
        if authorization is not None:
            self.credentials[url_origin(bare)] = authorization
        return bare

    def authorization_for(self, url: str) -> str | None:
        """The ``Authorization`` value this run sends to ``url``: the Basic auth given for its
        origin, else ``Bearer --api-key``, else None."""
        basic = self.credentials.get(url_origin(url)) if self.credentials else None
        if basic is not None:
            return basic
        return f"Bearer {self.api_key}" if self.api_key else None

    def headers_for(self, url: str) -> dict[str, str]:
        """``{"Authorization": ...}`` for ``url`` (``authorization_for``), or no header."""
        authorization = self.authorization_for(url)
        return {"Authorization": authorization} if authorization else {}

    def http(self, host: str) -> httpx.Client:
        headers = self.headers_for(host)
        return httpx.Client(base_url=host, headers=headers, timeout=self.client_idle_timeout, verify=client_context())

    def prepared_mix(self, mix: RequestMix, host: str) -> PreparedMix:
        """``mix`` built against this run's target; the first caller builds it, others wait."""
        prepared = self._mixes.get(id(mix))
        if prepared is None:
            with self._lock:
                prepared = self._mixes.get(id(mix))
                if prepared is None:
                    with self.http(self.sizing_host or host) as client:
                        if self.facts is None:
                            self.facts = discover(client, self.model_option, self.probe_timeout)
                            self._announce_estimate()
                        prepared = self._mixes[id(mix)] = mix.prepare(client, self.facts)
                        self._announce_estimate()
                        if self.facts.pace is not None:  # a mix prepared after the pace was learnt
                            prepared.hold_slots(self.facts.pace, self.facts.max_model_len)
        if self.slot_holders is None and self.hold_slots and not self._slot_holders_ended:
            self._start_slot_holders(mix, host)
        return prepared

    def _start_slot_holders(self, mix: RequestMix, host: str) -> None:
        """Start this test's slot holders when ``mix`` needs silence (a spec with ``hold_s``), in one
        process of the run (the single one, or worker 0), aimed at the server itself (behind any
        proxy the run started): holding is set-up, never load."""
        holds = [spec.hold_s for spec in mix.specs if spec.hold_s is not None]
        if not holds or self.facts is None or self.part is Part.MASTER:
            return
        if self.part is Part.WORKER and getattr(self.runner, "worker_index", -1) != 0:
            return
        settings = self.settings
        read_timeout = self.read_timeout_judged
        interval = None if settings is None else settings.keep_alive_interval
        headers = self.headers_for(self.sizing_host or host)
        self.slot_holders = SlotHolders(
            self.sizing_host or host,
            headers,
            self.facts.model,
            self.facts.max_model_len,
            release_period(max(holds), read_timeout, interval),
            lambda: list(self.streams_open.values()),
            self.max_slot_holders,
            self.read_server_gauges,
            self.known_concurrency,
        )
        self.slot_holders.start()

    def stop_slot_holders(self) -> None:
        """The test is stopping: close every holder (the object stays, so no user starts new ones)."""
        self._slot_holders_ended = True
        if self.slot_holders is not None:
            self.slot_holders.stop()

    def reset_slot_holders(self) -> None:
        """A test starts: its first mix that needs silence starts holders anew."""
        if self.slot_holders is not None:
            self.slot_holders.stop()
        self.slot_holders = None
        self._slot_holders_ended = False

    def note_finished(self, row: RequestRow) -> None:
        """Remember how long a stream the server ended took, for ``stuck_after``."""
        if row.outcome not in (Outcome.STOPPED, Outcome.NOT_SENT) and row.duration_s > self._longest.get(row.name, 0.0):
            self._longest[row.name] = row.duration_s

    def stuck_after(self, name: str) -> tuple[float, str] | None:
        """How long a stream named ``name`` may be open at the run's end before it is stuck, and
        what that was measured against; None when no stream finished yet (nothing to compare)."""
        if name in self._longest:
            longest, kind = self._longest[name], f"{name} stream"
        elif self._longest:
            longest, kind = max(self._longest.values()), "stream"
        else:
            return None
        return max(
            STUCK_MIN_S, STUCK_FACTOR * longest
        ), f"{STUCK_FACTOR:g}x the longest finished {kind} ({longest:.1f} s)"

    def ended_by_the_run(self, tracker: StreamTracker, open_s: float) -> Outcome:
        """The outcome of a stream the run's end closed ``open_s`` seconds after its send, its reason
        told to ``tracker``: ``stopped`` (no verdict), unless it was open far longer than streams of
        its kind take to finish (``stuck_after``) and no data frame came for ``STUCK_MIN_S``; then it
        is stuck, a ``timeout`` saying so. A stream whose tokens still flowed is making progress, not
        stuck, however long it ran (a slot holder lengthened mid-run outlasts its kind's first ones)."""
        stuck = self.stuck_after(tracker.plan.name)
        silent = tracker.data_silence(open_s)
        if stuck is None or open_s <= stuck[0] or silent <= STUCK_MIN_S:
            tracker.client_ended(f"the run ended {open_s:.1f} s after it was sent")
            return Outcome.STOPPED
        tracker.client_ended(
            f"stuck: still open when the run ended, {open_s:.1f} s after it was sent, over {stuck[1]}, "
            f"with no data for its last {silent:.1f} s"
        )
        return Outcome.TIMEOUT

    def learn_pace(self, row: RequestRow) -> None:
        """With ``hold_slots``, the first ``ok`` stream with tokens sets the server's pace and
        lengthens every prepared mix's slot holders to it, said in one line. The pace depends on
        the load (vLLM's holders streamed at 3 to 20 ms a token as long prefills came and went),
        so holders are sized at the fastest pace seen, to hold their slot at least ``hold_s``: a
        lengthened holder that streamed faster by more than ``PACE_TOLERANCE`` sizes them again
        (said in one more line the first time). The pace settles at the first holder that was not
        faster, or after ``PACE_MAX_RESIZES``: from then on the workload is fixed, so a server that
        slows down shows as longer waits (latency drift), never as shorter holders."""
        if self.slot_holders is not None:
            self.slot_holders.note(row.silence_before_first_token_s, row.start_time)
        if not self.hold_slots or self.facts is None or row.outcome != Outcome.OK:
            return
        if self.slot_holders is not None and self.slot_holders.making_silence:
            return  # the holders make the queue: the run's streams keep their own length
        tokens = row.usage_completion_tokens or row.data_frames - 1
        pace = ServerPace.of(row.ttft_s, row.duration_s, tokens)
        if pace is None:
            return
        current = self.facts.pace
        if current is None:
            self.facts.pace = pace
            self._lengthen_holders(f"{pace.describe()}: to make silence by queueing")
            return
        if self._pace_settled or min(row.max_tokens or 0, tokens) < PACE_CHECK_MIN_TOKENS:
            return  # settled, or not a lengthened holder: too short to show the pace holders stream at
        if pace.per_token_s >= current.per_token_s * (1.0 - PACE_TOLERANCE):
            self._pace_settled = True  # none faster: from here on the workload is fixed, its TTFT the server's
            return
        self._resizes += 1
        self._pace_settled = self._resizes >= PACE_MAX_RESIZES
        self.facts.pace = ServerPace(current.first_token_s, pace.per_token_s)  # its first token waited in the queue
        was, now = milliseconds(current.per_token_s), milliseconds(pace.per_token_s)
        why = f"the slot holders streamed a token every {now} ms, not {was}: sized again"
        self._lengthen_holders(why if self._resizes == 1 else None)

    def _lengthen_holders(self, why: str | None) -> None:
        """Size every prepared mix's slot holders at the pace in use; say so, with ``why``, unless None."""
        assert self.facts is not None and self.facts.pace is not None
        pace, room = self.facts.pace, self.facts.max_model_len
        raised = sorted({what for mix in self._mixes.values() for what in mix.hold_slots(pace, room)})
        if raised and why is not None:
            say(
                f"sse-soak: {why}, {'; '.join(raised)}, each holding a slot; streams queue only with more users "
                "(-u) than the server's concurrent slots"
            )

    def _announce_estimate(self) -> None:
        """One line per process, the first time sizing is (or turns) estimated."""
        if self.facts is not None and self.facts.estimate_reason is not None and not self._announced_estimate:
            self._announced_estimate = True
            say(printable(f"sse-soak: prompt sizing estimated: {self.facts.estimate_reason}"))


_STATES: weakref.WeakKeyDictionary[Environment, RunState] = weakref.WeakKeyDictionary()


def run_state(environment: Environment) -> RunState:
    """The ``RunState`` of ``environment``, created on first use."""
    state = _STATES.get(environment)
    if state is None:
        state = _STATES[environment] = RunState()
    return state
