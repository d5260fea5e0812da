"""The API key can come from ``VLLM_API_KEY`` (vLLM's name), and the harness passes it that way,
so a secret given in ``--server-args`` never shows in the process list."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from loadtests.services.stack import Stack, TargetServerProcess, split_api_key
from target_server.config import ServerConfig


def status_with_and_without(url: str, key: str) -> tuple[int, int]:
    without = httpx.get(url + "/v1/models", timeout=10).status_code
    with_key = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code
    return without, with_key


def test_the_server_takes_its_key_from_vllm_api_key() -> None:
    server = TargetServerProcess.start((), env={**os.environ, "VLLM_API_KEY": "from-the-env"})
    try:
        assert status_with_and_without(server.url, "from-the-env") == (401, 200)
    finally:
        server.stop()


@pytest.mark.fast
def test_the_command_line_key_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "env-key")
    assert ServerConfig.from_args(["--api-key", "cli-key"]).api_key == "cli-key"
    assert ServerConfig.from_args([]).api_key == "env-key"
    assert ServerConfig.from_args(["--api-key", ""]).api_key == "env-key"  # vLLM: args.api_key or VLLM_API_KEY
    monkeypatch.setenv("VLLM_API_KEY", "")
    assert ServerConfig.from_args([]).api_key is None  # empty is unset, as in vLLM


@pytest.mark.fast
def test_help_names_the_variable_and_who_wins() -> None:
    text = " ".join(ServerConfig.parser().format_help().split())
    assert "also read from $VLLM_API_KEY" in text and "this option wins if both are given" in text


@pytest.mark.fast
@pytest.mark.parametrize(
    ("server_args", "expected"),
    [
        (["--max-num-seqs", "2"], (["--max-num-seqs", "2"], None)),
        (["--api-key", "s1", "--max-num-seqs", "2"], (["--max-num-seqs", "2"], "s1")),
        (["--max-num-seqs", "2", "--api-key=s=2"], (["--max-num-seqs", "2"], "s=2")),
        (["--api-key", "first", "--api-key", "last"], ([], "last")),
        (["--api", "abbreviated"], ([], "abbreviated")),
        (["--api-key"], (["--api-key"], None)),
        (["--model", "--api-key-like"], (["--model", "--api-key-like"], None)),
    ],
)
def test_split_api_key_takes_every_spelling_argparse_accepts(
    server_args: list[str], expected: tuple[list[str], str | None]
) -> None:
    assert split_api_key(server_args) == expected


def test_a_vllm_api_key_exported_for_another_server_does_not_reach_the_bundled_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "meant-for-a-real-vllm")
    server = TargetServerProcess.start(())
    try:
        assert httpx.get(server.url + "/v1/models", timeout=10).status_code == 200
    finally:
        server.stop()


@pytest.mark.parametrize("spelling", [["--api-key", "{key}"], ["--api-key={key}"]])
def test_a_key_in_server_args_stays_out_of_the_server_command_line(spelling: list[str]) -> None:
    key = "sekrit-7f3a9c"
    stack = Stack.start(None, ["--max-num-seqs", "2", *(arg.format(key=key) for arg in spelling)])
    try:
        (server,) = stack.services
        assert key.encode() not in Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert b"--max-num-seqs" in Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert status_with_and_without(stack.url, key) == (401, 200)
    finally:
        stack.stop()
