"""The scenario options' values, checked where they are parsed, with one line per mistake.

``check_options()`` raises ``UsageError`` (one line naming the option, the value and the fix; the
caller prints it and exits 2, the usage-error code, distinct from 1 = a failed verdict) before
anything starts or is written. Special values, decided once here:

- ``--keep-alive-interval``: 0, NaN and inf turn keep-alive off, as vLLM does for any value not in
  (0, inf); the run records 0. A negative value is refused as a likely typo (0 turns it off).
- timeouts and intervals (``--client-idle-timeout``, ``--proxy-read-timeout``, ``--flush-interval``,
  ``--preflight-timeout``, ``--server-metrics-interval``) must be positive and finite;
  ``--flush-interval`` at most an hour.
- ``--frame-sample-rate`` is a share in [0, 1]; ``--max-line-bytes`` at least 1.
- ``--harness-lag-limit-ms``: 0 turns the ``harness_kept_up`` gate off; negative or NaN is refused.
- ``--report-dir`` must be a directory, or creatable as one, that this process can write into
  (checked without writing anything).
- ``--server-args`` must split as a shell would (balanced quotes).
- ``--rate`` (open loop) is a positive finite number of requests a second; ``--max-in-flight`` at
  least 1, and only with ``--rate``.
"""

from __future__ import annotations

import argparse
import math
import shlex
from typing import Any
from urllib.parse import urlsplit

from loadtests.run_dir import report_root_problem

MAX_FLUSH_INTERVAL_S = 3600.0


def http_url(text: str, schemes: tuple[str, ...] = ("http",)) -> str:
    """An argparse type: ``text`` if it is a URL with one of ``schemes``, a host and a usable port."""
    example = "http://127.0.0.1:8000"
    parts = urlsplit(text)
    if parts.scheme not in schemes or not parts.hostname:
        expected = " or ".join(scheme + "://" for scheme in schemes)
        raise argparse.ArgumentTypeError(f"expected an {expected} URL with a host, e.g. {example}, got {text!r}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise argparse.ArgumentTypeError(f"the port of {text!r} must be a number from 1 to 65535")
    return text


def target_url(text: str) -> str:
    """An argparse type: the URL of a server under test (http or https)."""
    return http_url(text, ("http", "https"))


class UsageError(Exception):
    """A bad option value; the message is the one line to print."""


def keep_alive_interval(value: float) -> float:
    """The interval in force: ``value`` when in (0, inf), else 0 (off), as vLLM reads it."""
    return value if 0 < value < math.inf else 0.0


def _positive_seconds(name: str, value: float, most: float = math.inf) -> None:
    if not 0 < value < math.inf:
        raise UsageError(f"{name} must be a positive number of seconds, got {value:g}")
    if value > most:
        raise UsageError(f"{name} must be at most {most:g} s, got {value:g}")


def check_options(options: Any) -> None:
    """Check the scenario options of a parsed Locust command line; raise ``UsageError`` on the first bad one."""
    _positive_seconds("--client-idle-timeout", options.client_idle_timeout)
    _positive_seconds("--proxy-read-timeout", options.proxy_read_timeout)
    _positive_seconds("--flush-interval", options.flush_interval, MAX_FLUSH_INTERVAL_S)
    _positive_seconds("--preflight-timeout", options.preflight_timeout)
    _positive_seconds("--server-metrics-interval", options.server_metrics_interval)
    if not 0 <= options.frame_sample_rate <= 1:
        raise UsageError(f"--frame-sample-rate must be a share from 0 to 1, got {options.frame_sample_rate:g}")
    if options.max_line_bytes < 1:
        raise UsageError(f"--max-line-bytes must be at least 1, got {options.max_line_bytes}")
    if not options.harness_lag_limit_ms >= 0:  # NaN too
        raise UsageError(
            f"--harness-lag-limit-ms must be 0 (gate off) or a positive number, got {options.harness_lag_limit_ms:g}"
        )
    interval = getattr(options, "keep_alive_interval", None)
    if interval is not None and interval < 0:
        raise UsageError(f"--keep-alive-interval must not be negative, got {interval:g} (0 turns keep-alive off)")
    try:
        shlex.split(options.server_args)
    except ValueError as exc:
        raise UsageError(f"--server-args {options.server_args!r}: {exc} (quote as a shell would)") from None
    problem = report_root_problem(options.report_dir)
    if problem is not None:
        raise UsageError(f"--report-dir {options.report_dir}: {problem}")
    _check_arrivals(options.rate, options.max_in_flight)


def _check_arrivals(rate: float | None, max_in_flight: int | None) -> None:
    """The open-loop options (``loadtests.arrivals``): a positive finite rate; a limit only with one."""
    if rate is None:
        if max_in_flight is not None:
            raise UsageError("--max-in-flight limits an open-loop run: give --rate too")
        return
    if not (rate > 0 and math.isfinite(rate)):
        raise UsageError(f"--rate must be a positive, finite number of requests a second, got {rate:g}")
    if max_in_flight is not None and max_in_flight < 1:
        raise UsageError(f"--max-in-flight must be at least 1, got {max_in_flight}")
