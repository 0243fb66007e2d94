"""The neuronsupport command, run as a user runs it (the installed console script)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pytest_neuronsupport import __version__, zoo
from pytest_neuronsupport.dataset.schema import SCHEMA
from tests.results_for_tests import result_row, write_results

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


def test_page_card_and_upgrade_write_into_the_results(tmp_path: Path) -> None:
    results = write_results(
        tmp_path / "results",
        [result_row("zoo:llama"), result_row("zoo:t5", "FAIL(gen)", compiler_version="2.14.0")],
    )
    old = results / "data" / "inductor-2.9.0" / "transformers-5.0.0.parquet"
    old.parent.mkdir()
    pq.write_table(pa.table({"model_id": ["zoo:old"], "result": ["PASS"]}), old)
    upgrade = neuronsupport("upgrade", "--results", str(results))
    assert upgrade.returncode == 0 and f"upgraded {old}" in upgrade.stdout
    assert pq.read_schema(old).names == list(SCHEMA.names)
    card = neuronsupport("card", "--results", str(results))
    assert card.returncode == 0 and card.stdout.strip() == str(results / "README.md")
    assert "config_name: inductor-2.14.0" in (results / "README.md").read_text(encoding="utf-8")
    page = neuronsupport("page", "--results", str(results), "--out", str(tmp_path / "site"))
    assert page.returncode == 0
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "zoo:t5" in html and "http://" not in html and "https://" not in html
    (old).write_bytes(b"not parquet")
    broken = neuronsupport("upgrade", "--results", str(results))
    assert broken.returncode == 1 and f"{old} was left as it is" in broken.stderr
    missing = neuronsupport("page", "--results", str(tmp_path / "nowhere"), "--out", "x")
    assert missing.returncode == 2 and "no results dataset at" in missing.stderr
