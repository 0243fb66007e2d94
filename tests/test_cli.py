"""The neuronsupport command, run as a user runs it (the installed console script)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pytest_neuronsupport import __version__, zoo

#: The console script installed beside this interpreter (the venv need not be activated).
EXE = Path(sys.executable).parent / "neuronsupport"


def neuronsupport(*args: str) -> subprocess.CompletedProcess[str]:
    assert EXE.exists(), "the package is installed with its console script"
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=300)


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
