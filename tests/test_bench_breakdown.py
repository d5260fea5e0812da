"""bench/breakdown.py's categories: every py-spy sample goes to the category of its innermost frame
that has one (GC first, blocking waits left out), on a real capture and on stacks built to the
rules. The capture, ``tests/bench_breakdown_py_spy.txt.gz``, is py-spy 0.4.3's raw output (``record
--native -r 250 --format raw --full-filenames``) of bench/peers.py's sse-soak Locust process for 5 s
of streaming (32 streams, 708 samples), written by a real run (breakdown.ProfileWhenStreaming) and
committed as it came, gzipped."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench_script

pytestmark = pytest.mark.fast

breakdown = load_bench_script("breakdown")
CAPTURE = Path(__file__).resolve().parent / "bench_breakdown_py_spy.txt.gz"


def _capture() -> str:
    return gzip.decompress(CAPTURE.read_bytes()).decode()


PER_FRAME = ("kernel/syscalls", "event-loop hub", "kernel stamp", "HTTP", "SSE parsing", "JSON", "judging")


def _python(function: str, path: str, line: int = 1) -> str:
    return f"{function} ({path}:{line})"


HUB = [
    "0x7f0 (/usr/lib/x86_64-linux-gnu/libc.so.6)",
    "ev_run (/venv/site-packages/gevent/libev/corecext.cpython-311-x86_64-linux-gnu.so)",
    _python("BodyMux._ready", "/repo/loadtests/client/body_mux.py"),
    _python("MuxedBody.readable", "/repo/loadtests/client/body_mux.py"),
]
USERS = "/repo/loadtests/load/users.py"
TAKE = [*HUB, _python("RawBody.take_read", USERS), _python("RawBody.take", USERS)]


def test_a_real_capture_falls_into_the_per_frame_categories_and_little_else() -> None:
    raw = _capture()
    shares = breakdown.categorize(raw)
    assert set(shares) == set(breakdown.CATEGORIES)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(shares[category] > 0 for category in PER_FRAME), shares
    assert shares["other"] < 0.25, shares  # the harness's per-frame code is named, not lumped
    counts = breakdown.sample_counts(raw)
    assert counts[breakdown.WAITING] > 0  # the hub's epoll_wait: py-spy's native mode counts it active


def test_every_real_sample_whose_innermost_python_frame_is_a_hot_path_module_goes_to_its_category() -> None:
    """Read from the capture, not from the rules: the SSE parser's, the stamp's and the JSON decoder's
    own frames are their categories whatever lies below them (libc, the interpreter)."""
    expected = {
        "loadtests/client/sse.py": "SSE parsing",
        "loadtests/client/kernel_stamps.py": "kernel stamp",
        "loadtests/record/lag.py": "lag monitor",
    }
    checked = 0
    for frames, _ in breakdown.samples(_capture()):
        python = [f for f in frames if ".py:" in f]
        below = frames[frames.index(python[-1]) + 1 :] if python else []
        if not python or any(breakdown.frame_category(f) for f in below) or breakdown.is_waiting(frames):
            continue
        if any(breakdown.is_gc(f) for f in frames):
            continue
        for module, category in expected.items():
            if f"/{module}:" in python[-1]:
                assert breakdown.sample_category(frames) == category, frames[-4:]
                checked += 1
    assert checked > 5


def test_the_innermost_frame_with_a_category_wins() -> None:
    parse = _python("SSEParser.feed", "/repo/loadtests/client/sse.py")
    decode = _python("decode_json", "/repo/loadtests/client/outcome.py")
    judge = _python("StreamTracker.frame", "/repo/loadtests/client/outcome.py")
    assert breakdown.sample_category([*TAKE, parse, "memchr (/usr/lib/libc.so.6)"]) == "SSE parsing"
    assert breakdown.sample_category([*TAKE, judge]) == "judging"
    assert breakdown.sample_category([*TAKE, judge, decode, "loads (/venv/orjson/orjson.so)"]) == "JSON"
    assert breakdown.sample_category([*TAKE[:-1]]) == "HTTP"
    assert breakdown.sample_category(HUB) == "event-loop hub"
    interpreter = ["0x7f0 (/usr/lib/libc.so.6)", "_PyEval_EvalFrameDefault (/lib/libpython3.11.so)"]
    assert breakdown.sample_category(interpreter) == "other"


def test_gc_anywhere_on_the_stack_is_gc() -> None:
    gc = "gc_collect_main (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)"
    assert breakdown.sample_category([*TAKE, _python("Frame.__init__", "/repo/loadtests/client/sse.py"), gc]) == "GC"


def test_files_match_whatever_their_functions_are_called_and_however_py_spy_shortens_paths() -> None:
    renamed = "SSEParser._a_fast_path_added_later"
    for path in ("/root/repo/loadtests/client/sse.py", "loadtests/client/sse.py"):
        assert breakdown.frame_category(_python(renamed, path)) == "SSE parsing"
    assert breakdown.frame_category(_python("stamped_read_v2", "loadtests/client/kernel_stamps.py")) == "kernel stamp"
    assert breakdown.frame_category(_python("Hub.run", "gevent/hub.py")) == "event-loop hub"
    assert breakdown.frame_category(_python("Hub.run", "/venv/site-packages/gevent/hub.py")) == "event-loop hub"
    assert breakdown.frame_category(_python("request", "/venv/site-packages/locust/event.py")) == "Locust"
    assert breakdown.frame_category(_python("LagMonitor._run", "loadtests/record/lag.py")) == "lag monitor"
    assert breakdown.frame_category(_python("Recorder.add", "loadtests/record/recorder.py")) == "recording"
    assert breakdown.frame_category(_python("StreamTracker.finish", "loadtests/client/outcome.py")) == "recording"


def test_blocking_waits_are_left_out_but_the_harness_s_own_poll_is_a_syscall() -> None:
    libev_wait = [*HUB[:2], "epoll_poll (/venv/gevent/libev/corecext.so)", "epoll_wait (/usr/lib/libc.so.6)"]
    assert breakdown.sample_category(libev_wait) == breakdown.WAITING
    nested = [
        *HUB[:3],
        "select_epoll_poll_impl (/lib/libpython3.11.so.1.0)",
        "epoll_wait (/usr/lib/x86_64-linux-gnu/libc.so.6)",
    ]
    assert breakdown.sample_category(nested) == "kernel/syscalls"
    lock = ["0x7f0 (/usr/lib/libc.so.6)", "PyThread_acquire_lock_timed (/lib/libpython3.11.so.1.0)"]
    assert breakdown.sample_category(lock) == breakdown.WAITING
    raw = f"{';'.join(libev_wait)} 7\n{';'.join(nested)} 3\n"
    assert breakdown.categorize(raw)["kernel/syscalls"] == pytest.approx(1.0)


def test_the_unsampled_kernel_time_comes_first_and_the_figures_add_up_to_the_cpu_per_frame() -> None:
    shares = dict.fromkeys(breakdown.CATEGORIES, 0.0) | {"kernel/syscalls": 0.1, "JSON": 0.5, "other": 0.4}
    figures = breakdown.breakdown_us(shares, 40.0, stime_share=0.35)
    assert figures[breakdown.UNSAMPLED] == pytest.approx(40.0 * 0.25)
    assert figures["JSON"] == pytest.approx(0.5 * 40.0 * 0.75)
    assert sum(figures.values()) == pytest.approx(40.0)
    assert breakdown.breakdown_us(shares, 40.0, stime_share=0.05)[breakdown.UNSAMPLED] == 0.0


def test_a_syscall_from_the_hub_is_a_syscall_and_libc_s_other_functions_are_their_caller_s() -> None:
    getpid = "getpid (/usr/lib/x86_64-linux-gnu/libc.so.6)"
    assert breakdown.sample_category([*HUB, getpid]) == "kernel/syscalls"
    memcpy = "__memmove_avx_unaligned_erms (/usr/lib/x86_64-linux-gnu/libc.so.6)"
    assert breakdown.sample_category([*TAKE, memcpy]) == "judging"
