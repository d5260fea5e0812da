"""Why streams failed between the harness and the server: one judgement that the ``causes:`` line,
the summary's ``causes`` and the gates read, so that they never disagree.

Proxy and gateway timeouts (``proxy_timeouts``). A failed request counts as one when

- its answer says so, whatever its silence (the ``gateway_timeout`` outcome): HTTP 408, 504 or 524
  (``loadtests.client.outcome.TIMEOUT_STATUSES``), an in-band error whose code is one of them, or a known
  gateway's timeout message (LiteLLM's 500 on the chat route; it answers 0.1-0.5 s after its timer
  fires, so its silences run past the window);
- or it is a 502 before the headers (Apache's mod_proxy answers its timeout so, but a reset upstream
  is a 502 too) or a stream cut after them (no ``[DONE]``), and its silence is in the read timeout's
  window: at least ``timeout - early`` and at most ``timeout + late``.

The silence is the time since the last byte the proxy could have received from upstream, as the
harness saw it (``end_silence_s``): from the send to a status, from the last frame (or the headers)
to a cut. The harness sees it later than the proxy does, never earlier, so the window reaches below
the timeout: ``early = late = max(0.25 s, 15% of the timeout)``. Measured behind real proxies with a
2 s timeout (docs/proxies.md): HAProxy without ``option http-no-delay`` holds each write ~200 ms,
so its cuts follow 1.79-1.80 s of silence (in 1.70-2.30 s: counted); nginx and the embedded proxy
cut at 2.00-2.01 s. Squid ticks its timers in whole seconds and cut after 1.37 to 3.7 s (by hand
1.37-1.88 s; through ``--proxy squid`` 2.75-3.7 s): when the row (its ``Server`` or ``Via``
header, its error body) or the run names Squid, ``early`` is 1 s and ``late`` 2 s (1.00-4.00 s); a
proxy the run cannot name gets no such allowance, so an unnamed 1.37 s cut is counted as another
cut (after a shorter silence): a server that drops idle connections after 1.4 s is not a 2 s proxy
timeout, and ``outcomes_as_expected`` fails every cut anyway. A silence
longer than ``timeout + late`` is not this proxy's timer either (it would have fired before).

The timeout is the one the proxy runs, never the one asked: the run's proxy kind states it, with its
window (``ProxyKind.read_timer``: Apache and Squid take whole seconds, so 1.5 s runs as 2 s; Squid's
tick widens the window), and a run that started none judges a row naming a kind by that kind's
timer. Every line, the gate and summary.json print that timer. A silence the harness saw while its
own loop stalled may be off by the stall: a miss of the window no larger than the stall counts
(``loadtests.record.lag.explained_by_stall``, the rule the timing gates excuse by).

Merged writes (``writes_merged``): the run started a proxy that holds and merges writes (HAProxy) or
the token gaps show it, so the gaps and first-token times recorded are that view. Gateway 500s
(``errors_owned``): a 500 whose message is a gateway's own body (LiteLLM's ``litellm.<Exception>:``)
and names an upstream failure is the gateway's, apart from the server's.

Keep-alive withheld (``keepalive_withheld``): raw streams were silent from their send for longer than
the server's keep-alive interval (plus ``keepalive_tolerance``) and none of them got any comment:
something between strips comments or holds the headers (LiteLLM does both), or keep-alive is off.
When the interval is unknown (``--host`` not told it, and no comment showed it), the silence must be
longer than any interval that could keep the run's proxy alive: the proxy read timeout the run
judges, at most ``MAX_PLAUSIBLE_INTERVAL_S``. Headers withheld (``headers_withheld``), said apart and
whatever the interval: every stream silent ``HEADERS_HELD_SILENCE_S`` or more from its send got its
response headers only with its first token (a server sends them at once, queued or not).

What is known of each proxy the run can start (the name a line gives it, the pattern that finds it
in a response, a whole-second timer, withheld keep-alive) is its kind's (``loadtests.services.proxies``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from loadtests.client.outcome import TIMEOUT_STATUSES, Outcome, is_timeout_code
from loadtests.record.lag import coarse_reads_s, explained_by_stall, harness_stall_s
from loadtests.services import proxies
from loadtests.services.proxies.base import ReadTimer, plain_timer

OTHER_KNOWN_PROXIES: tuple[tuple[str, str, int], ...] = (("Envoy", r"envoy", 60), ("Cloudflare", r"cloudflare", 70))
"""Proxies a response can name that the run never starts (no ``--proxy`` kind): each one's name,
pattern and rank, beside the kinds' own (``ProxyKind.recognised_by``, ``recognition_rank``)."""


def known_proxies() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """Proxies and gateways a ``Server`` or ``Via`` header, or an error body, can name, lowest rank
    first; a line only ever shows one of these names, never the header's own text."""
    known = [(kind.display_name, kind.recognised_by, kind.recognition_rank) for kind in proxies.kinds()]
    ranked = sorted(
        [(name, pattern, rank) for name, pattern, rank in known if name and pattern] + list(OTHER_KNOWN_PROXIES),
        key=lambda entry: entry[2],
    )
    return tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern, _ in ranked)


def coarse_timer_proxies() -> frozenset[str]:
    """The names of the proxies measured to tick their read timeout in whole seconds (Squid 5.7: a
    2 s timeout cut after 1.4-3.7 s)."""
    return frozenset(kind.display_name for kind in proxies.kinds() if kind.coarse_timer and kind.display_name)


def proxies_named(rows: pd.DataFrame) -> pd.Series:
    """Per row, the first of ``known_proxies()`` its ``served_by`` names or, failing that, its error
    message (a body such as LiteLLM's ``litellm.Timeout``); None where neither names one."""
    names = pd.Series(None, index=rows.index, dtype="object")
    known = known_proxies()
    for column in ("error_message", "served_by"):  # served_by last: it wins
        text = _column(rows, column, "object").astype("object").fillna("").astype(str)
        for name, pattern in reversed(known):  # the first pattern that matches wins
            names = names.mask(text.str.contains(pattern), name)
    return names.astype("object").where(names.notna(), None)


def run_proxy(started: str | None) -> str | None:
    """The proxy the run started, as a line names it; None for ``none`` or nothing recorded."""
    if not started or started == "none":
        return None
    kind = proxies.find(started)
    return kind.display_name if kind is not None and kind.display_name else started


def window(read_timeout: float, coarse: bool = False) -> tuple[float, float]:
    """The silences that count as a read timeout of ``read_timeout`` firing: ``(low, high)``
    (``loadtests.services.proxies.base.plain_timer``, the one rule)."""
    return plain_timer(read_timeout, coarse=coarse).window


def kind_named(name: str | None) -> proxies.ProxyKind | None:
    """The kind a line names ``name`` (its display name); None for a proxy the run cannot start."""
    return next((kind for kind in proxies.kinds() if name and kind.display_name == name), None)


def run_timer(read_timeout: float | None, run_proxy_kind: str | None) -> ReadTimer | None:
    """The read timer in force for a run: the started proxy's (its ``read_timer``: Apache's 1.5 s
    runs as 2 s), else a plain one as asked; None when no read timeout was in force."""
    if read_timeout is None:
        return None
    return proxies.read_timer(run_proxy_kind, read_timeout)


def _column(requests: pd.DataFrame, name: str, dtype: str = "float64") -> pd.Series:
    """A column as floats (or as it is, for ``object``); nulls when the table predates it."""
    if name not in requests.columns:
        return pd.Series(None, index=requests.index, dtype=dtype)
    column = requests[name]
    return column if dtype == "object" else pd.to_numeric(column, errors="coerce").astype("float64")


@dataclass(frozen=True)
class ProxyTimeouts:
    """A run's failures judged by the rule above, for the read timer ``timer`` (None: no proxy timer
    known, so only statuses that say so count and no window is named)."""

    timer: ReadTimer | None
    before_headers: pd.DataFrame
    """Answers that are a proxy's timeout: 408, 504, 524, and 502s whose silence is in the window."""
    after_headers: pd.DataFrame
    """Streams cut after their headers once silent for the read timeout, and in-band timeouts."""
    other_cuts: pd.DataFrame
    """Cuts after a silence outside the window: not this proxy's read timeout."""
    unseen_cuts: pd.DataFrame
    """Cuts of clients that cannot see comments (the SDK): their silence is unknown."""
    started: str | None = None
    """The proxy the run started (``--proxy``), as a line names it; None when it started none."""
    named_timers: tuple[ReadTimer, ...] = ()
    """The timers of proxies the rows named (a run that started none) where they differ from ``timer``
    (Squid's whole-second tick): those rows were judged by them."""
    stall_counted: pd.DataFrame | None = None
    """Of the timeouts, those whose silence missed the window by no more than the harness stalled
    while they were open (``loadtests.record.lag.explained_by_stall``): counted, as the timing gates
    would leave them unjudged rather than fail them on the harness's lateness."""

    @property
    def read_timeout(self) -> float | None:
        """The read timeout in force (the timer's, never the figure asked); None without one."""
        return None if self.timer is None else self.timer.runs_s

    @property
    def rows(self) -> pd.DataFrame:
        return pd.concat([self.before_headers, self.after_headers])

    @property
    def count(self) -> int:
        return len(self.before_headers) + len(self.after_headers)

    @property
    def named(self) -> list[str]:
        """The proxies and gateways the timed-out rows name, most frequent first."""
        rows = self.rows
        if rows.empty:
            return []
        return [str(name) for name in proxies_named(rows).dropna().value_counts().index]

    def statuses(self) -> dict[str, int]:
        """The statuses of the timeouts before the headers, by count (``{"504": 3, "502": 1}``)."""
        counts = self.before_headers["status"].astype(int).value_counts()
        return {str(code): int(n) for code, n in counts.items()}

    def silences(self) -> pd.Series:
        """The silence each timed-out row ended after, where known."""
        return pd.concat([_silence(self.before_headers), _silence(self.after_headers)]).dropna()

    def phrase(self) -> str:
        """The one wording of these figures, for the ``causes:`` line and the gate's line alike:
        ``1 proxy timeouts before the headers (1x 504), 36 streams cut after them, after 1.79-2.00 s of
        silence (cuts and 502s count after 1.70-2.30 s for a 2 s read timeout); 2 other cuts after 0.30-0.41 s of
        silence, outside it: not read timeouts; answered by HAProxy``."""
        statuses = ", ".join(f"{n}x {code}" for code, n in self.statuses().items())
        text = (
            f"{len(self.before_headers)} proxy timeouts before the headers"
            + (f" ({statuses})" if statuses else "")
            + f", {len(self.after_headers)} streams cut after them"
        )
        silences = self.silences()
        if len(silences):
            text += f", after {_spread(silences)} of silence"
        if self.timer is not None:
            windows = [f"{_window_text(self.timer)} for {self.timer.describe()}"]
            windows += [f"{_window_text(timer)} where {timer.proxy} answered" for timer in self.named_timers]
            text += f" (cuts and 502s count after {'; '.join(windows)})"
        stalled = self.stall_counted
        if stalled is not None and len(stalled):
            coarse = coarse_reads_s(stalled)
            worst = float(harness_stall_s(stalled).max()) - coarse
            read_at = f" plus its {coarse * 1000:g} ms timing resolution" if coarse else ""
            text += (
                f"; {len(stalled)} of them outside the window by no more than the harness stalled while they were "
                f"open (up to {worst:.2f} s){read_at}: counted, as the timing gates allow"
            )
        if len(self.other_cuts):
            other = _spread(_silence(self.other_cuts).dropna())
            text += f"; {len(self.other_cuts)} other cuts after {other} of silence"
            text += ", outside it: not read timeouts" if self.read_timeout is not None else ""
        if len(self.unseen_cuts):
            text += f"; {len(self.unseen_cuts)} cuts of SDK streams, whose silences are unknown"
        named = self.named
        if named:
            text += f"; answered by {', '.join(named)}"
        elif self.count and self.started:
            text += f"; the run's proxy: {self.started}"
        return text

    def as_dict(self) -> dict[str, Any]:
        """The figures as ``summary.json``'s ``causes.proxy_timeouts`` holds them."""
        silences = self.silences()
        timer: dict[str, Any] = (
            {"read_timeout_s": None, "read_timeout_asked_s": None, "window_s": None, "timer_of": None}
            if self.timer is None
            else self.timer.as_dict()
        )
        if self.named_timers:
            timer["named_windows_s"] = {
                str(named.proxy): [round(value, 3) for value in named.window] for named in self.named_timers
            }
        return {
            **timer,
            "before_headers": len(self.before_headers),
            "before_headers_statuses": self.statuses(),
            "after_headers": len(self.after_headers),
            "other_cuts": len(self.other_cuts),
            "unseen_cuts": len(self.unseen_cuts),
            "silence_s": None if silences.empty else [round(silences.min(), 3), round(silences.max(), 3)],
            "named": self.named,
            "run_proxy": self.started,
            "stall_counted": 0 if self.stall_counted is None else len(self.stall_counted),
        }


def _window_text(timer: ReadTimer) -> str:
    low, high = timer.window
    return f"{low:.2f}-{high:.2f} s"


def _spread(silences: pd.Series) -> str:
    """``1.79-1.80 s``, or ``2.00 s`` when they are one value."""
    low, high = float(silences.min()), float(silences.max())
    return f"{low:.2f} s" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f} s"


def _silence(rows: pd.DataFrame) -> pd.Series:
    """Each row's silence before its end: ``end_silence_s``; for a row written before that column,
    the time to its status (not 2xx) or its longest gap (a cut)."""
    silence = _column(rows, "end_silence_s")
    answered = ~rows["status"].between(200, 299).fillna(False).astype(bool)
    older = answered.where(silence.isna(), False).astype(bool)
    silence = silence.where(~older, _column(rows, "ttfb_s"))
    return silence.fillna(_column(rows, "max_gap_s"))


def proxy_timeouts(
    requests: pd.DataFrame, read_timeout: float | None, run_proxy_kind: str | None = None
) -> ProxyTimeouts:
    """The run's failures by the rule of this module's docstring. ``read_timeout`` is the one asked
    (``--proxy-read-timeout``, or the gate's); ``run_proxy_kind`` is the run's ``--proxy``, whose
    ``read_timer`` says what it runs (Apache's 1.5 s runs as 2 s) and its window (Squid's tick).
    A run that started none judges a row that names a proxy kind by that kind's timer."""
    status = requests["status"]
    silence = _silence(requests)
    cut = (requests["outcome"] == Outcome.CUT).astype(bool)
    judged_by_silence = requests[cut | (status == 502).fillna(False).astype(bool)]  # only these need a name
    timer = run_timer(read_timeout, run_proxy_kind)
    named_timers: list[ReadTimer] = []
    stall_counted = requests.iloc[0:0]
    if timer is None:
        in_window = pd.Series(False, index=requests.index)
    else:
        low_s = pd.Series(timer.window[0], index=requests.index)
        high_s = pd.Series(timer.window[1], index=requests.index)
        if run_proxy(run_proxy_kind) is None and read_timeout is not None:
            names = proxies_named(judged_by_silence)
            for name in names.dropna().unique():
                kind = kind_named(str(name))
                named = None if kind is None else kind.read_timer(read_timeout)
                if named is None or named.window == timer.window:
                    continue
                named_timers.append(named)
                rows = names[names == name].index
                low_s[rows], high_s[rows] = named.window
        miss = pd.concat([low_s - silence, silence - high_s], axis=1).max(axis=1).clip(lower=0.0)
        exact = ((silence >= low_s) & (silence <= high_s)).fillna(False).astype(bool)
        # the one rule the timing gates judge by: a miss the harness's own stall explains is no miss
        in_window = (silence.notna() & explained_by_stall(requests, miss.fillna(0.0))).astype(bool)
        stall_counted = requests[in_window & ~exact]
    streamed = status.between(200, 299).fillna(False).astype(bool)
    said = (requests["outcome"] == Outcome.GATEWAY_TIMEOUT).astype(bool)  # and, in runs before that outcome:
    said |= status.isin(TIMEOUT_STATUSES).fillna(False).astype(bool)
    said |= streamed & _column(requests, "error_code", "object").map(is_timeout_code).astype(bool)
    by_silence = ((status == 502).fillna(False).astype(bool) & in_window) & ~said
    before = (said & ~streamed) | by_silence
    unseen = cut & silence.isna()
    after = (said & streamed) | (cut & in_window)
    other = cut & ~in_window & ~unseen
    counted_by_stall = stall_counted.index.intersection(requests.index[(cut | by_silence) & ~said])
    return ProxyTimeouts(
        timer,
        requests[before],
        requests[after],
        requests[other],
        requests[unseen],
        run_proxy(run_proxy_kind),
        tuple(named_timers),
        requests.loc[counted_by_stall],
    )


@dataclass(frozen=True)
class ErrorsOwned:
    """Error answers (HTTP 500s, in-band 500s) split by who wrote them: a gateway's own (its body's
    shape, ``ProxyKind.own_error``, with what its message says happened upstream) or the server's
    (a gateway's body that relays the server's own error included, counted as ``relayed``)."""

    gateway: pd.DataFrame
    """The rows a gateway wrote itself, with ``_gateway`` and ``_upstream`` (the cause, in words)."""
    server: pd.DataFrame
    """The server's own errors, relayed or not."""
    relayed: dict[str, int]
    """Of the server's, how many each gateway passed on in a body of its own."""

    @property
    def by_cause(self) -> dict[str, dict[str, int]]:
        """``{gateway: {upstream cause: count}}``, most frequent first."""
        counts = self.gateway.groupby(["_gateway", "_upstream"], sort=False).size().sort_values(ascending=False)
        found: dict[str, dict[str, int]] = {}
        for key, n in counts.items():
            pair: tuple[Any, ...] = tuple(key)  # type: ignore[arg-type]  # a two-level group: each key is a pair
            found.setdefault(str(pair[0]), {})[str(pair[1])] = int(n)
        return found

    def phrase(self) -> str:
        """``2 LiteLLM's own, not the server's (upstream: 2x the server refused the connection); 1 the
        server's (1 relayed by LiteLLM)``; empty when no gateway wrote or relayed any."""
        if self.gateway.empty and not self.relayed:
            return ""
        parts = [
            f"{sum(causes.values())} {gateway}'s own, not the server's (upstream: "
            + ", ".join(f"{n}x {cause}" for cause, n in causes.items())
            + ")"
            for gateway, causes in self.by_cause.items()
        ]
        relayed = ", ".join(f"{n} relayed by {gateway}" for gateway, n in self.relayed.items())
        parts.append(f"{len(self.server)} the server's" + (f" ({relayed})" if relayed else ""))
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"gateways": self.by_cause, "server": len(self.server), "relayed": dict(self.relayed)}


def errors_owned(rows: pd.DataFrame) -> ErrorsOwned:
    """``rows`` (error answers) split by who wrote them (``ErrorsOwned``): a kind's own error body
    (``ProxyKind.own_error``) whose message names an upstream cause (``upstream_causes``) is that
    gateway's; one that names none relays the server's error; any other is the server's."""
    message = _column(rows, "error_message", "object").astype("object").fillna("").astype(str)
    gateway = pd.Series(None, index=rows.index, dtype="object")
    upstream = pd.Series(None, index=rows.index, dtype="object")
    relayed: dict[str, int] = {}
    for kind in proxies.kinds():
        if not kind.own_error or not kind.display_name:
            continue
        own = message.str.contains(kind.own_error, case=False, regex=True) & gateway.isna()
        cause = pd.Series(None, index=rows.index, dtype="object")
        for pattern, words in reversed(kind.upstream_causes):  # the first pattern that matches wins
            cause = cause.mask(own & message.str.contains(pattern, case=False, regex=True), words)
        written = own & cause.notna()
        gateway = gateway.mask(written, kind.display_name)
        upstream = upstream.mask(written, cause)
        passed_on = int((own & cause.isna()).sum())
        if passed_on:
            relayed[kind.display_name] = passed_on
    written = gateway.notna()
    return ErrorsOwned(
        rows[written].assign(_gateway=gateway[written], _upstream=upstream[written]), rows[~written], relayed
    )


MERGED_GAP_S = 0.002
"""A gap between two token frames shorter than this: they arrived in one read, written together on the way."""
MERGED_SHARE = 0.25
"""The gaps show merging when at least this share of token gaps is merged (HAProxy: 83% of 50 ms gaps)..."""
PACED_GAP_S = 0.02
"""...and the other gaps' median is at least this: a server that writes as fast as it can, its tokens
read together, is not merged on the way."""
MERGE_MIN_GAPS = 20
"""Fewer token gaps than this say nothing of merging."""
MERGE_COLUMNS = ["request_id", "seq", "kind", "gap_s"]
"""The columns of frames.parquet that ``writes_merged`` reads."""
DISTORTED_FIGURES = ("ttft_s", "max_data_gap_s", "max_gap_s")
"""The latency figures a proxy that holds and merges writes makes its own: first token, token gaps."""


@dataclass(frozen=True)
class WritesMerged:
    """Token frames that arrived merged: the run started a proxy known to hold and merge writes
    (``ProxyKind.merges_writes``: HAProxy without ``option http-no-delay``), or the gaps show it
    (``MERGED_SHARE`` of the token gaps under ``MERGED_GAP_S``, the rest paced). Either way the
    inter-token gaps and times to first token the run recorded are that view, not the server's."""

    started: str | None
    """The merging proxy the run started, as a line names it; None when only the gaps show it."""
    gaps: int
    """Gaps between two consecutive token frames of one stream, over the frames recorded."""
    merged: int
    longest_s: float | None
    shown: bool
    """The gaps show merging."""

    def line(self) -> str:
        if self.gaps < MERGE_MIN_GAPS:
            figures = f"too few token gaps ({self.gaps}) to measure how many it merged"
        else:
            figures = (
                f"{self.merged / self.gaps:.0%} of {self.gaps} token gaps arrived merged (under "
                f"{MERGED_GAP_S * 1000:g} ms), the longest {self.longest_s or 0.0:.3f} s"
            )
        if self.started is not None:
            return (
                f"sse-soak: the run started {self.started}, which holds and merges writes as users run it: {figures}; "
                f"inter-token gaps and times to first token here are {self.started}'s view, not the server's pace"
            )
        mergers = " or ".join(name for name in merging_proxies()) or "a proxy that batches writes"
        return (
            f"sse-soak: {figures}: something on the way merges writes (a proxy such as {mergers}) or the server "
            "sends in bursts; inter-token gaps and times to first token here are what came through, not the "
            "server's pace"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "proxy": self.started,
            "token_gaps": self.gaps,
            "merged": self.merged,
            "longest_s": None if self.longest_s is None else round(self.longest_s, 3),
            "shown_by_gaps": self.shown,
            "proxys_view": list(DISTORTED_FIGURES),
            "line": self.line(),
        }


def merging_proxies() -> list[str]:
    """The names of the kinds measured to hold and merge writes (HAProxy)."""
    return [kind.display_name for kind in proxies.kinds() if kind.merges_writes and kind.display_name]


def writes_merged(frames: pd.DataFrame, run_proxy_kind: str | None) -> WritesMerged | None:
    """The rule of ``WritesMerged`` over ``frames`` (``MERGE_COLUMNS`` of frames.parquet); None when
    the run started no merging proxy and the gaps do not show merging."""
    kind = proxies.find(run_proxy_kind)
    started = kind.display_name if kind is not None and kind.merges_writes else None
    gaps = pd.Series(dtype="float64")
    if not frames.empty:
        ordered = frames.sort_values(["request_id", "seq"])
        data = ordered["kind"] == "data"
        after_data = data & data.groupby(ordered["request_id"]).shift(1, fill_value=False)
        gaps = pd.to_numeric(ordered.loc[after_data, "gap_s"], errors="coerce").dropna()
    merged = gaps < MERGED_GAP_S
    paced = gaps[~merged]
    shown = (
        len(gaps) >= MERGE_MIN_GAPS
        and merged.mean() >= MERGED_SHARE
        and not paced.empty
        and float(paced.median()) >= PACED_GAP_S
    )
    if started is None and not shown:
        return None
    longest = float(gaps.max()) if len(gaps) else None
    return WritesMerged(started, len(gaps), int(merged.sum()), longest, bool(shown))


MAX_PLAUSIBLE_INTERVAL_S = 5.0
"""The longest keep-alive interval assumed of a server whose interval is unknown: vLLM's is whole
seconds, and users keep it well under their proxies' timeouts (60 s for nginx, AWS ALB)."""
HEADERS_HELD_SILENCE_S = 1.0
"""A stream silent this long from its send shows whether its headers were held."""
HEADERS_WITH_TOKEN_S = 0.1
"""Headers that came less than this before the first token came with it (LiteLLM: under 10 ms)."""


def keepalive_tolerance(interval: float) -> float:
    """How late a keep-alive comment may come: timers fire a little late, and the server's first timer
    starts at its headers, a little after the send (about 0.1 s for vLLM and the bundled server)."""
    return 0.1 + 0.1 * interval


def raw_silences(requests: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """The raw 200 streams (the SDK cannot see comments) and the silence each endured before its
    first token, from its send (from its headers in a run written before ``silence_from_send_s``)."""
    raw = requests[(requests["status"] == 200).fillna(False).astype(bool) & requests["keepalive_frames"].notna()]
    silence = raw["silence_before_first_token_s"].astype("float64")
    if "silence_from_send_s" in raw.columns:
        silence = pd.to_numeric(raw["silence_from_send_s"], errors="coerce").fillna(silence)
    return raw, silence


@dataclass(frozen=True)
class KeepAliveWithheld:
    """Raw streams silent over ``period_s`` that got no comment at all, while the server sends one
    every ``interval``: the comments were stripped, or the headers held, on the way."""

    streams: int
    period_s: float
    headers_held: int
    """Of them, the streams whose headers came only with their first token (silent from the send,
    not from the headers): a gateway held the headers."""
    started: str | None
    """The run's ``--proxy`` (``none`` when it started none); None when not recorded."""
    interval_known: bool = True
    """False when the server's interval is unknown: ``period_s`` is then the longest plausible one."""

    def line(self) -> str:
        """The one line the console, the summary and ``keepalive_covered`` say it with."""
        held = f" ({self.headers_held} got their headers only with their first token)" if self.headers_held else ""
        unknown = "" if self.interval_known else " (longer than any keep-alive interval the run could judge)"
        between = who_stands_between(self.started, "which does both, measured")
        return (
            f"sse-soak: {self.streams} raw streams were silent over {self.period_s:.2f} s{unknown} and none got a "
            f"keep-alive comment{held}: an intermediary that strips SSE comments or holds the response headers until "
            f"the first token (a gateway such as LiteLLM) may stand between the harness and the server{between}, "
            "or the server's keep-alive is off"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "streams": self.streams,
            "period_s": round(self.period_s, 3),
            "headers_held": self.headers_held,
            "run_proxy": self.started,
            "interval_known": self.interval_known,
            "line": self.line(),
        }


def keepalive_withheld(
    requests: pd.DataFrame,
    interval: float | None,
    run_proxy_kind: str | None = None,
    read_timeout: float | None = None,
) -> KeepAliveWithheld | None:
    """The streams of the rule above when every raw stream silent over the interval plus its tolerance
    got no comment at all (any comment is a keep-alive); an unknown interval (None) is taken as the
    longest plausible one (``read_timeout``, the proxy read timeout the run judges, at most
    ``MAX_PLAUSIBLE_INTERVAL_S``). None when keep-alive is off (0), when no stream was silent that
    long, or when any of them got a comment."""
    if interval is None:
        period = min(read_timeout or MAX_PLAUSIBLE_INTERVAL_S, MAX_PLAUSIBLE_INTERVAL_S)
    elif not interval:
        return None
    else:
        period = interval + keepalive_tolerance(interval)
    raw, silence = raw_silences(requests)
    silent = raw[silence > period]
    if silent.empty:
        return None
    comments = silent["keepalive_frames"].astype("float64") + _column(silent, "comment_frames").fillna(0.0)
    if comments.sum() > 0:
        return None
    held = (silent["silence_before_first_token_s"].astype("float64") < (interval or HEADERS_WITH_TOKEN_S)).sum()
    return KeepAliveWithheld(len(silent), period, int(held), run_proxy_kind, interval is not None)


def who_stands_between(started: str | None, measured: str) -> str:
    """Who may stand between the harness and the server, for a line naming a withholding
    intermediary: the run's proxy (``measured`` said of a kind known to withhold keep-alive), what
    stands behind it, the server given when the run started none (``none``); empty when unrecorded."""
    kind = proxies.find(started)
    named = run_proxy(started)
    if kind is not None and kind.withholds_keep_alive:
        return f" (the run's proxy, {named}, {measured})"
    if named:
        return f" (the run's proxy, {named}, or something behind it)"
    if started == "none":
        return " (the run started no proxy: it stands in front of the server the run was given)"
    return ""


@dataclass(frozen=True)
class HeadersWithheld:
    """Streams silent from their send that got their response headers only with their first token:
    something between held the headers, so nothing the server sent before, keep-alive included,
    reached the client."""

    streams: int
    shortest_silence_s: float
    started: str | None
    """The run's ``--proxy`` (``none`` when it started none); None when not recorded."""

    def line(self) -> str:
        """The one line the console and the summary say it with."""
        between = who_stands_between(self.started, "does, measured")
        return (
            f"sse-soak: {self.streams} streams silent {self.shortest_silence_s:.2f} s or more from their send got "
            f"their response headers only with their first token: an intermediary holds the headers until the "
            f"first token (a gateway such as LiteLLM){between}, so nothing the server sends before it, keep-alive "
            "included, reaches the client"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "streams": self.streams,
            "shortest_silence_s": round(self.shortest_silence_s, 3),
            "run_proxy": self.started,
            "line": self.line(),
        }


def headers_withheld(requests: pd.DataFrame, run_proxy_kind: str | None = None) -> HeadersWithheld | None:
    """The rule of the module docstring, over the 200 streams of any client that got a first token:
    named when every one silent ``HEADERS_HELD_SILENCE_S`` or more from its send got its headers less
    than ``HEADERS_WITH_TOKEN_S`` before that token; None when any got them earlier, or none was silent
    that long. Whatever the keep-alive interval, given or not."""
    if "silence_from_send_s" not in requests.columns:
        return None  # a run written before the column: the silence from the send is unknown
    streamed = requests[(requests["status"] == 200).fillna(False).astype(bool) & requests["ttft_s"].notna()]
    from_send = pd.to_numeric(streamed["silence_from_send_s"], errors="coerce")
    silent = streamed[from_send >= HEADERS_HELD_SILENCE_S]
    if silent.empty:
        return None
    from_headers = pd.to_numeric(silent["silence_before_first_token_s"], errors="coerce")
    if not (from_headers < HEADERS_WITH_TOKEN_S).all():
        return None
    return HeadersWithheld(len(silent), float(from_send[silent.index].min()), run_proxy_kind)
