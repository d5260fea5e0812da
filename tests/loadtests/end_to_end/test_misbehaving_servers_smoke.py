"""Every misbehaviour of ``tests/misbehaving_server.py`` ends in its one right outcome, for both clients.

One Locust run (6 users, 12 s) against a server that answers each generation request with the
next mode of its list; its log says which request got which mode, and the run's rows are joined
to it by request id. Each (mode, client) pair is its own test, so a failure names the mode.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from tests.loadtests.locust_run import REPORT_LINE, ROOT, locust_command
from tests.loadtests.misbehaving import MISBEHAVING_LOCUSTFILE, MisbehavingServer, start_misbehaving_server
from tests.misbehaving_server import MODES

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

EXPECTED = {
    "ok": "ok",
    "crlf_ok": "ok",
    "close_delimited_ok": "ok",
    "keepalive_ok": "ok",
    "other_comments_ok": "ok",
    "no_done": "cut",
    "content_length_short": "cut",
    "content_length_short_one_read": "cut",
    "reset_mid_frame": "cut",
    "excess_after_done": "ok",
    "html_200": "protocol_error",
    "non_json_frame": "protocol_error",
    "non_object_frame": "protocol_error",
    "invalid_utf8": "protocol_error",
    "deep_json_frame": "protocol_error",
    "long_number_frame": "protocol_error",
    "deep_json_error_body": "http_5xx",
    "long_line": "protocol_error",
    "not_http": "protocol_error",
    "close_before_any_byte": "connect_error",
    "reset_before_any_byte": "connect_error",
    "headers_then_silence": "timeout",
    "error_frame_no_done": "inband_error",
    "inband_500": "inband_error",
    "http_500": "http_5xx",
    "http_429": "rejected",
    "http_503_retry_after": "http_5xx",
    "malformed_usage": "ok",
    "huge_usage": "ok",
    "retry_only_event": "ok",
    "done_with_trailing_space": "protocol_error",
    "frames_after_done": "ok",
    "both_lengths": "protocol_error",
    "huge_header": "protocol_error",
    "interim_100": "ok",
    "early_hints_103": "ok",
    "gzip_stream": "protocol_error",
    "escape_in_error": "inband_error",
    "escape_in_content_type": "protocol_error",
    "finish_abort": "inband_error",
    "finish_error": "inband_error",
}
FINISH_REASONS = {"finish_abort": "abort", "finish_error": "error"}
"""Modes whose stream is well formed but whose generation failed: the column holds the reason
(every other well-formed stream ends with ``length``)."""
PROTOCOL_REASONS = {
    "html_200": "content-type",
    "non_json_frame": "not json",
    "non_object_frame": "not a json object",
    "invalid_utf8": "utf-8",
    "deep_json_frame": "json that cannot be decoded (nested deeper than a json decoder goes)",
    "long_number_frame": "json that cannot be decoded (a number longer than 4300 digits)",
    "long_line": "longer than",
    "not_http": "malformed http response",
}
CLIENT_REASONS = {
    "close_before_any_byte": "closed or reset the connection before any response",
    "reset_before_any_byte": "closed or reset the connection before any response",
    "headers_then_silence": "--client-idle-timeout",
}
"""Rows the client ended carry the cause in ``error_message``, worded alike by both clients."""
CLIENTS = ("raw", "openai")


@pytest.mark.fast
def test_every_mode_has_an_expected_outcome() -> None:
    assert set(EXPECTED) == set(MODES)


@dataclass
class Run:
    output: str
    rows: pd.DataFrame
    """requests.parquet joined to the server's log: one ``mode`` per row (null if the server never saw it)."""
    logged: pd.DataFrame


@pytest.fixture(scope="module")
def misbehaving_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MisbehavingServer]:
    server = start_misbehaving_server(tmp_path_factory.mktemp("misbehaving") / "modes.jsonl")
    yield server
    server.stop()
    assert server.process.returncode is not None


@pytest.fixture(scope="module")
def run(misbehaving_server: MisbehavingServer, tmp_path_factory: pytest.TempPathFactory) -> Run:
    report_dir = tmp_path_factory.mktemp("reports")
    command = locust_command(
        MISBEHAVING_LOCUSTFILE,
        "--headless",
        "-u",
        "6",
        "-r",
        "6",
        "-t",
        "12s",
        "--host",
        misbehaving_server.url,
        "--client-idle-timeout",
        "2",
        "--stop-timeout",
        "5",
        "--report-dir",
        str(report_dir),
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)
    output = result.stdout + result.stderr
    match = REPORT_LINE.search(result.stdout)
    assert match, output[-3000:]
    requests = pd.read_parquet(Path(match["path"]) / "requests.parquet")
    logged = misbehaving_server.logged()
    rows = requests.merge(logged, on="request_id", how="left", validate="many_to_one")
    return Run(output, rows, logged)


def test_no_python_traceback_in_locusts_output(run: Run) -> None:
    assert "Traceback" not in run.output, run.output[-5000:]


def test_every_request_the_server_saw_has_exactly_one_row(run: Run) -> None:
    assert len(run.logged) > 0 and run.logged["request_id"].notna().all()
    assert run.logged["request_id"].is_unique
    rows_per_request = run.rows["request_id"].value_counts()
    missing = set(run.logged["request_id"]) - set(rows_per_request.index)
    assert not missing, f"{len(missing)} requests the server answered have no row: {sorted(missing)[:5]}"
    assert (rows_per_request[run.logged["request_id"]] == 1).all()


def _describe(rows: pd.DataFrame) -> str:
    columns = ["outcome", "status", "error_message", "finish_reason", "usage_prompt_tokens", "keepalive_frames", "done"]
    return rows[[c for c in columns if c in rows.columns]].to_string(max_colwidth=120)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("mode", MODES)
def test_each_misbehaviour_ends_in_its_outcome(run: Run, mode: str, client: str) -> None:
    rows = run.rows[(run.rows["mode"] == mode) & (run.rows["client"] == client)]
    finished = rows[rows["outcome"] != "stopped"]
    assert len(finished) >= 1, f"no finished {client} request met {mode} ({len(rows)} stopped)"
    expected = EXPECTED[mode]
    assert (finished["outcome"] == expected).all(), f"{mode} via {client}: expected {expected}\n{_describe(finished)}"
    if mode in PROTOCOL_REASONS:
        messages = finished["error_message"].fillna("").str.lower()
        assert messages.str.contains(PROTOCOL_REASONS[mode], regex=False).all(), _describe(finished)
    if mode in CLIENT_REASONS:
        messages = finished["error_message"].fillna("")
        assert messages.str.contains(CLIENT_REASONS[mode], regex=False).all(), _describe(finished)
    if mode in ("malformed_usage", "huge_usage"):
        assert "raw_usage" in finished.columns, "requests.parquet has no raw_usage column"
        assert finished["usage_prompt_tokens"].isna().all(), _describe(finished)
        assert finished["raw_usage"].notna().all(), _describe(finished)
    if mode in FINISH_REASONS:
        reason = FINISH_REASONS[mode]
        assert (finished["finish_reason"] == reason).all(), _describe(finished)
        assert finished["done"].all() and finished["error_code"].isna().all(), _describe(finished)
        assert finished["error_message"].str.startswith(f"finish_reason {reason!r} before [DONE]").all()
    elif expected == "ok":
        assert (finished["finish_reason"] == "length").all(), _describe(finished)
    if client == "openai":
        assert finished["keepalive_frames"].isna().all(), "the SDK hides comments: its count must be null"
    elif mode == "keepalive_ok":
        assert (finished["keepalive_frames"] >= 1).all(), _describe(finished)
    elif mode == "other_comments_ok":  # `:ping`, `: `, `:`: every comment is a keep-alive, none another kind
        assert (finished["keepalive_frames"] >= 2).all(), _describe(finished)
        assert (finished["comment_frames"] == 0).all(), _describe(finished)


@pytest.fixture
def well_formed_server(tmp_path: Path) -> Iterator[MisbehavingServer]:
    """A server of the well-formed modes only: each user meets one on every request (the whole
    rotation's pauses, after its instant error answers, would leave a short run few of them)."""
    server = start_misbehaving_server(tmp_path / "well-formed.jsonl", modes=["ok", "keepalive_ok"])
    yield server
    server.stop()


def test_the_line_limit_is_an_option_and_both_clients_stop_at_it(
    well_formed_server: MisbehavingServer, tmp_path: Path
) -> None:
    misbehaving_server = well_formed_server
    command = locust_command(
        MISBEHAVING_LOCUSTFILE,
        "--headless",
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "4s",
        "--host",
        misbehaving_server.url,
        "--max-line-bytes",
        "64",
        "--client-idle-timeout",
        "2",
        "--stop-timeout",
        "5",
        "--report-dir",
        str(tmp_path),
        "--only-summary",
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)
    output = result.stdout + result.stderr
    match = REPORT_LINE.search(result.stdout)
    assert match, output[-3000:]
    rows = pd.read_parquet(Path(match["path"]) / "requests.parquet").merge(misbehaving_server.logged(), on="request_id")
    well_formed = rows[rows["mode"].isin(["ok", "keepalive_ok"])]
    assert set(well_formed["client"]) == set(CLIENTS), _describe(rows)
    assert (well_formed["outcome"] == "protocol_error").all(), _describe(well_formed)
    assert (well_formed["error_message"] == "line longer than 64 bytes").all(), _describe(well_formed)
    assert result.returncode == 1 and "gate FAIL no_protocol_errors: " in output and "verdict: FAIL" in output


def test_a_too_small_line_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    command = locust_command(
        MISBEHAVING_LOCUSTFILE,
        "--headless",
        "-t",
        "1s",
        "--host",
        "http://127.0.0.1:9",
        "--max-line-bytes",
        "0",
        "--report-dir",
        str(tmp_path),
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    assert "sse-soak: --max-line-bytes must be at least 1, got 0" in result.stderr
    assert "Traceback" not in result.stderr and not any(tmp_path.iterdir())


def _comparable(message: object) -> str:
    """An error message with the stream's own numbers taken out (``data frame 3`` is which frame)."""
    return re.sub(r"data frame \d+", "data frame N", str(message)) if isinstance(message, str) else ""


@pytest.mark.parametrize("mode", MODES)
def test_both_clients_give_the_same_bytes_one_verdict(run: Run, mode: str) -> None:
    """Same bytes, same verdict: per route, the raw and the SDK client's finished rows of a mode
    have one outcome, one error reason, and the same count of data frames (the SDK's is what it
    handed over; the raw client's counts every data frame up to [DONE], the marker included)."""
    rows = run.rows[(run.rows["mode"] == mode) & (run.rows["outcome"] != "stopped")]
    compared = 0
    for route, of_route in rows.groupby(rows["route"]):
        seen = {
            client: {
                "outcomes": set(of_client["outcome"]),
                "reasons": set(of_client["error_message"].map(_comparable)),
                "data_frames": set(of_client["data_frames"]),
                "done": set(of_client["done"]),
            }
            for client, of_client in of_route.groupby("client")
        }
        if set(seen) == set(CLIENTS):  # a route a client sent fewer requests to than there are modes
            assert seen["raw"] == seen["openai"], f"{mode} {route}: {seen}"
            compared += 1
    assert compared >= 1, f"{mode}: no route met by both clients\n{_describe(rows)}"


def test_no_row_for_a_request_the_server_never_received(run: Run) -> None:
    """A connection left out of step (an interim response read as the final one, say) makes the
    next request on it read the rest of the last answer: a row, usually a protocol error, for a
    request the server never saw. Every row that is not a client-side failure was logged."""
    unseen = run.rows[run.rows["mode"].isna() & ~run.rows["outcome"].isin(["stopped", "not_sent"])]
    assert unseen.empty, _describe(unseen)
