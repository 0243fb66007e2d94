"""The neuronsupport command, run as a user runs it (the installed console script), and in
this process where the test's environment (moto's S3 server) must reach it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytest_neuronsupport import __version__, zoo
from pytest_neuronsupport.cli import main as cli_main
from pytest_neuronsupport.dataset.perf import PERF
from pytest_neuronsupport.dataset.stores import local_copy
from pytest_neuronsupport.dataset.stores.s3 import SharedResults
from pytest_neuronsupport.dataset.support import SCHEMA
from pytest_neuronsupport.views.dashboard import dashboard
from tests.results_for_tests import pair_of, perf_row, result_row, write_results
from tests.test_shared import BUCKET, s3  # noqa: F401 (moto's S3 server: a fixture)

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


@pytest.mark.usefixtures("s3")
def test_every_view_reads_a_dataset_on_s3_through_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset on S3 (moto's server on the loopback, tests/test_shared.py's fixture): the
    views read it as a sweep's store pulls it, into the cache's local copy; a store that cannot
    be read, and the commands that write into a folder, are refused naming the URI."""
    uri = f"s3://{BUCKET}/views"
    shared = SharedResults(uri)
    support = [result_row("org/a", compile_s=5.0), result_row("org/c", "FAIL(load)")]
    for number, row in enumerate(support):
        shared.publish("sweep", number, pair_of(row), row)
    bench = perf_row("org/a", "b1-s128-dp1", speedup_vs_eager=2.0)
    shared.publish("bench", 0, pair_of(support[0]), bench, PERF)
    assert not shared.merge().problems
    monkeypatch.setenv("NEURONSUPPORT_CACHE", str(tmp_path / "cache"))

    def run(*args: str) -> tuple[int, str, str]:
        code = cli_main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = run("dashboard", "--results", uri)
    assert code == 0
    (column,) = dashboard(local_copy(tmp_path / "cache", uri)).columns
    assert column.metrics["speedup"] == 2.0 and column.metrics["pass_rate"] == 0.5
    assert out.splitlines()[0].split() == ["inductor-2.13.0", "/", "transformers-5.24.0"]
    code, out, _ = run("lookup", "org/", "--results", uri)
    assert code == 0 and "org/a" in out and "FAIL(load)" in out
    code, out, _ = run("perf", "--results", uri)
    assert code == 0 and "org/a" in out and "b1-s128-dp1" in out
    missing = f"s3://{BUCKET}-none/views"
    code, _, err = run("lookup", "org/", "--results", missing)
    assert code == 2 and f"cannot read {missing} (the object store at http://127.0.0.1:" in err
    code, _, err = run("card", "--results", uri)
    assert code == 2 and f"--results must be a folder, not {uri}" in err
