"""The neuronsupport command, run as a user runs it (the installed console script)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_neuronsupport import __version__, zoo

EXE = shutil.which("neuronsupport")


def neuronsupport(*args: str) -> subprocess.CompletedProcess[str]:
    if EXE is None:
        pytest.skip("the neuronsupport console script is not installed")
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=300)


def test_version() -> None:
    done = neuronsupport("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"neuronsupport {__version__}"


def test_zoo_list_names_every_model() -> None:
    done = neuronsupport("zoo", "list")
    assert done.returncode == 0
    for name in zoo.names():
        assert f"zoo:{name}" in done.stdout
    assert "LlamaForCausalLM" in done.stdout


def test_zoo_build_reuses_a_built_cache_and_refuses_unknown_names(zoo_cache: Path) -> None:
    done = neuronsupport("zoo", "build", "llama", "bert", "--cache", str(zoo_cache))
    assert done.returncode == 0
    assert str(zoo.ensure_built("llama", zoo_cache)) in done.stdout
    bad = neuronsupport("zoo", "build", "nope", "--cache", str(zoo_cache))
    assert bad.returncode == 2 and "unknown zoo model(s): nope" in bad.stderr
