"""The proxy kinds' registry: every part of a kind (``--proxy``'s choice, the causes' name and rules,
the server-bind check, the start-up) comes from its one module, and a kind registered elsewhere shows
in each of them. Starts no process: the kind registered here starts nothing."""

from __future__ import annotations

import importlib
import re
from argparse import Namespace
from collections.abc import Iterator
from dataclasses import dataclass, field

import pandas as pd
import pytest

from loadtests.declare.options import option
from loadtests.declare.scenario import Scenario
from loadtests.errors import UsageError
from loadtests.judge.causes import KeepAliveWithheld, coarse_timer_proxies, known_proxies, proxies_named, run_proxy
from loadtests.run.settings import run_settings
from loadtests.services import proxies
from loadtests.services.child import ChildService
from loadtests.services.proxies.base import Front, ProxyKind
from loadtests.services.stack import Stack

pytestmark = pytest.mark.fast

CHOICES = ("none", "embedded", "nginx", "haproxy", "caddy", "apache", "squid", "litellm")
"""``--proxy``'s choices, in the order they have always had."""


@dataclass(frozen=True, kw_only=True)
class RecordingKind(ProxyKind):
    """A kind defined outside the package: it starts nothing and keeps what it was started with."""

    fronts: list[Front] = field(default_factory=list, compare=False)

    def timeout_notes(self, read_timeout: float) -> list[str]:
        return [f"{self.name}: takes {read_timeout:g} s its own way"]

    def start(self, front: Front) -> ChildService | None:
        self.fronts.append(front)
        return None


@pytest.fixture
def registered() -> Iterator[RecordingKind]:
    kind = RecordingKind(
        name="test-gateway",
        order=100,
        display_name="Test Gateway",
        recognised_by=r"test-gateway",
        recognition_rank=65,
        withholds_keep_alive=True,
        coarse_timer=True,
        loopback_only=False,
    )
    proxies.register(kind)
    try:
        yield kind
    finally:
        proxies.unregister(kind.name)


def test_the_options_choices_are_the_registered_kinds_in_their_order() -> None:
    assert proxies.names() == CHOICES
    assert option("proxy").kind.choices == proxies.names()


def test_each_kind_is_the_kind_of_its_own_module() -> None:
    for kind in proxies.kinds():
        assert importlib.import_module(f"loadtests.services.proxies.{kind.name}").KIND is kind
    assert len({kind.order for kind in proxies.kinds()}) == len(CHOICES)
    assert set(proxies.real_proxies()) == {"nginx", "haproxy", "caddy", "apache", "squid"}


def test_the_causes_name_and_judge_the_kinds_as_measured() -> None:
    names = [name for name, _ in known_proxies()]
    assert names == ["Squid", "HAProxy", "Apache", "nginx", "Caddy", "Envoy", "Cloudflare", "LiteLLM"]
    assert [run_proxy(kind) for kind in CHOICES] == [
        None,
        "the embedded proxy",
        "nginx",
        "HAProxy",
        "Caddy",
        "Apache",
        "Squid",
        "LiteLLM",
    ]
    assert run_proxy("traefik") == "traefik"  # a kind this version does not know: shown as given
    assert coarse_timer_proxies() == {"Squid"}
    assert [kind.name for kind in proxies.kinds() if kind.withholds_keep_alive] == ["litellm"]
    assert [kind.name for kind in proxies.kinds() if not kind.loopback_only] == ["none", "embedded"]


def test_a_name_or_an_order_taken_is_refused() -> None:
    with pytest.raises(ValueError, match="clashes with 'nginx'"):
        proxies.register(RecordingKind(name="nginx", order=100, display_name="nginx"))
    with pytest.raises(ValueError, match="clashes with 'squid'"):
        proxies.register(RecordingKind(name="other", order=6, display_name="other"))
    assert proxies.names() == CHOICES


def test_the_stack_starts_a_registered_kind_by_its_own_start_up(registered: RecordingKind) -> None:
    stack = Stack.start("http://127.0.0.1:9", [], proxy="test-gateway", read_timeout=2.5, api_key="key")
    assert registered.fronts == [Front("http://127.0.0.1:9", 2.5, "key", "127.0.0.1")]
    assert stack.url == "http://127.0.0.1:9" and stack.services == []
    assert stack.describe() == ["test-gateway: takes 2.5 s its own way"]


def test_the_stack_refuses_a_name_no_kind_has() -> None:
    with pytest.raises(ValueError, match=re.escape(f"proxy must be one of {', '.join(CHOICES)}, got 'bogus'")):
        Stack.start("http://127.0.0.1:9", [], proxy="bogus")


def test_the_causes_name_and_judge_a_registered_kind(registered: RecordingKind) -> None:
    assert run_proxy("test-gateway") == "Test Gateway"
    names = [name for name, _ in known_proxies()]
    assert names.index("Envoy") < names.index("Test Gateway") < names.index("Cloudflare")  # by its rank
    rows = pd.DataFrame({"served_by": ["test-gateway/1.0", "nginx/1.22", None], "error_message": [None] * 3})
    assert proxies_named(rows).tolist() == ["Test Gateway", "nginx", None]
    assert coarse_timer_proxies() == {"Squid", "Test Gateway"}
    line = KeepAliveWithheld(3, 1.2, 0, "test-gateway").line()
    assert "(the run's proxy, Test Gateway, which does both, measured)" in line


def test_server_bind_lets_a_kind_through_by_where_it_listens(registered: RecordingKind) -> None:
    scenario = Scenario(name="s")
    given = {"host": None, "keep_alive_interval": None, "server_args": "", "proxy_read_timeout": 60.0, "rate": None}
    bound = run_settings(scenario, Namespace(**given, proxy="test-gateway", server_bind="10.0.0.1"))
    assert bound.proxy == "test-gateway"
    said = "--proxy nginx listens on loopback only, out of the workers' reach: give --proxy none or embedded or "
    with pytest.raises(UsageError, match=re.escape(said + "test-gateway")):
        run_settings(scenario, Namespace(**given, proxy="nginx", server_bind="10.0.0.1"))


def test_the_proxy_options_help_speaks_of_every_kind_in_its_own_words() -> None:
    """--proxy's help names each kind with what it says of itself, and --proxy-read-timeout's help
    each kind's own setting: a new kind appears in both without an edit to the options."""
    proxy_help, timeout_help = option("proxy").help, option("proxy_read_timeout").help
    for known in proxies.kinds():
        assert known.described and f"{known.name} ({known.described})" in proxy_help
        assert known.name == "none" or (known.read_timeout_setting and known.read_timeout_setting in timeout_help)
