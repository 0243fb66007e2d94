"""Bisections that run models: a sweep that bisects its new failures (``--neuron-bisect``) and
the command (``neuronsupport bisect``), over the releases of a package of the tests' own on a
local index (fast: tiny wheels, no network); then, marked slow, transformers' own releases over
PyPI (the BERT-style causal LM that 5.25.0 broke) and PyTorch's compiler bisector on an
inductor whose pass the tests broke.

The fast sweep bisects ``bisectee_for_tests`` (tests/wheels_for_tests.py) from 1.2 to 1.5, the
version its environment has (1.0 and 1.2 pass, 1.1 is no wheel, 1.3 does not import, 1.4 and
1.5 fail). The search runs the ends, then 1.3 (a skip), then its neighbour 1.4 (bad): the first
failing is 1.3 or 1.4, 1.3 being undecided; the boundary (1.2, 1.4) runs again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import transformers

from pytest_neuronsupport import devices
from pytest_neuronsupport.bisect.environments import ENVIRONMENTS
from pytest_neuronsupport.bisect.search import most_runs
from pytest_neuronsupport.dataset.layout import pair_relpath
from pytest_neuronsupport.views.failures import format_groups, pair_failures
from pytest_neuronsupport.views.lookup import lookup
from pytest_neuronsupport.views.page import write_page
from tests.sweeping import Sweep, SweepRunner, session_leases
from tests.wheels_for_tests import NAME, bisectee_index

BISECT = pytest.mark.xdist_group("bisect")
BACKEND = f"{NAME}:backend"
MODEL = "zoo:bert-mlm"


@dataclass
class Bisected:
    """A sweep that bisected its new failures, in a folder the command runs in too."""

    runner: SweepRunner
    sweep: Sweep
    env: dict[str, str]
    pair: str

    def rows(self) -> list[dict[str, Any]]:
        """The rows of the sweep's pair in the ``bisect/`` table."""
        rows: list[dict[str, Any]] = pq.read_table(
            self.runner.results / "bisect" / self.pair
        ).to_pylist()
        return rows

    def bisect(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``neuronsupport bisect ARGS`` in the sweep's folder, with its environment, its cache
        and the test session's leases."""
        cache = self.runner.cache
        where = ["--cache", str(cache), "--leases", str(session_leases(cache))]
        return subprocess.run(
            [str(Path(sys.executable).parent / "neuronsupport"), "bisect", *args, *where],
            cwd=self.runner.path,
            env=self.runner.environment(self.env),
            capture_output=True,
            text=True,
            timeout=1800,
        )


def pair_of(backend: str) -> str:
    """The pair a sweep of ``backend`` on the CPU records here."""
    compiler = devices.resolve("cpu").compiler(backend)
    return pair_relpath(*compiler, "transformers", transformers.__version__)


@pytest.fixture(scope="session")
def bisected(
    sweep_folder: Callable[..., SweepRunner], tmp_path_factory: pytest.TempPathFactory
) -> Bisected:
    """A sweep of zoo:bert-mlm under ``bisectee_for_tests`` 1.5 (installed on the sweep's
    path), held to a baseline where it passed, with ``--neuron-bisect`` from 1.2."""
    index = bisectee_index(tmp_path_factory.mktemp("bisectee-index"))
    pip_env = {"PIP_FIND_LINKS": str(index), "PIP_NO_INDEX": "1"}
    runner = sweep_folder("bisectee", **pip_env)
    installed = runner.path / "installed"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
         str(installed), f"{NAME}==1.5"],
        env={**os.environ, **pip_env},
        check=True,
    )  # fmt: skip
    pair = pair_of(BACKEND)
    baseline = runner.path / "expected.toml"
    baseline.write_text(
        f'pair = "{pair.removesuffix(".parquet")}"\n\n[expected]\n"{MODEL}" = "PASS"\n'
    )
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(installed), os.environ.get("PYTHONPATH")]))
    }
    args = ["--neuron-baseline", str(baseline), "--neuron-bisect",
            "--neuron-bisect-package", f"{NAME}==1.2"]  # fmt: skip
    sweep = runner.run(MODEL, backend=BACKEND, args=args, env=env, isolated=True)
    return Bisected(runner, sweep, env, pair)


@BISECT
def test_a_sweep_bisects_a_model_that_newly_fails(bisected: Bisected) -> None:
    sweep = bisected.sweep
    assert sweep.row(MODEL)["result"] == "FAIL(forward)"
    assert sweep.result.ret == 1  # the regression fails the check, bisected or not
    (row,) = bisected.rows()
    assert row["answer"] == f"broke in {NAME} 1.3..1.4"
    assert (row["status"], row["good"], row["bad"]) == ("found within a range", "1.2", "1.5")
    assert (row["last_good"], row["first_bad"], row["first_bad_range"]) == (
        "1.2",
        "1.4",
        ["1.3", "1.4"],
    )
    assert row["tried"] == ["1.5 bad", "1.2 good", "1.3 skip", "1.4 bad", "1.2 good", "1.4 bad"]
    assert (row["runs"], row["confirm_runs"], row["result"]) == (3, 2, "FAIL(forward)")
    assert row["signature"] == f"FAIL(forward) NotImplementedError site {NAME}:backend"
    report = json.loads(row["report"])
    skipped = next(t for t in report["trials"] if t["outcome"] == "skip")
    assert "does not import here: ImportError" in skipped["skip"]
    assert report["first_bad_run"]["run_py"].endswith("/bisect/bisectee-for-tests/1.4/run.py")
    assert f'"{NAME}==1.4"' in row["run_py"] and f'"{NAME}==1.2"' in row["run_py_good"]
    out = "\n".join(sweep.result.outlines)
    assert f"run 3, step: {NAME} 1.3 (1 other release undecided between 1.2 and 1.5" in out
    assert f"bisect: {MODEL}: broke in {NAME} 1.3..1.4 (5 runs)" in out


@BISECT
def test_lookup_failures_and_the_page_say_which_release_broke_it(bisected: Bisected) -> None:
    results, said = bisected.runner.results, f"broke in {NAME} 1.3..1.4 (last passing 1.2)"
    assert f"bisected {NAME} 1.2..1.5: {said}" in "\n".join(lookup(results, MODEL))
    pair_file, groups = pair_failures(results)
    text = format_groups(groups, pair_file)
    assert f"{MODEL}  FAIL(forward)  {said}" in text
    assert f"  {NAME} 1.3..1.4: {MODEL}" in text
    page = write_page(results, bisected.runner.path / "page").read_text(encoding="utf-8")
    assert said in page


def environments(bisected: Bisected) -> set[Path]:
    """The candidate environments made in the sweep's cache."""
    return {p for p in (bisected.runner.cache / ENVIRONMENTS).iterdir() if p.is_dir()}


@pytest.mark.slow  # a candidate that cannot install: test_bisect_parts.py, without runs
@BISECT
def test_an_end_that_cannot_install_is_a_skip_and_environments_are_made_once(
    bisected: Bisected,
) -> None:
    made = environments(bisected)
    done = bisected.bisect(
        MODEL, "--package", NAME, "--good", "1.1", "--bad", "1.4", "--format", "json"
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "an end cannot be tried"
    assert [(t["version"], t["outcome"]) for t in report["trials"]] == [
        ("1.4", "bad"),
        ("1.1", "skip"),
    ]
    assert "pip cannot install it" in report["trials"][1]["skip"]
    assert "its environment: cached in" in done.stderr  # 1.4's, made by the sweep's bisection
    (one,) = environments(bisected) - made  # 1.1's, a skip
    assert "pip cannot install it" in json.loads((one / "overlay.json").read_text())["skip"]


@BISECT
def test_a_bad_end_that_passes_says_so(bisected: Bisected) -> None:
    done = bisected.bisect(MODEL, "--package", NAME, "--good", "1.0", "--bad", "1.2")
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith(
        f"{MODEL}: {NAME} 1.2 (the bad end) passes here: nothing to bisect"
    )
    assert "run 1, bad end" in done.stderr and "run 2" not in done.stderr
    rows = {(r["good"], r["bad"]): r for r in bisected.rows()}
    assert rows["1.0", "1.2"]["status"] == "the bad end passes"
    assert rows["1.2", "1.5"]["first_bad"] == "1.4"  # another range's answer stays


# --- slow: transformers' own releases, PyTorch's compiler bisector -------------------------------

BERT_LM = "zoo:arch/BertLMHeadModel"


@pytest.fixture(scope="session")
def transformers_broke_it(sweep_folder: Callable[..., SweepRunner]) -> Bisected:
    """zoo:arch/BertLMHeadModel swept here (transformers 5.25.0: FAIL(gen)), held to a baseline
    of transformers 5.24.0 where it passed, with ``--neuron-bisect``."""
    runner = sweep_folder("transformers-broke-it")
    pair = pair_of("aot_eager")
    baseline = runner.path / "expected.toml"
    then = pair.removesuffix(".parquet").replace(transformers.__version__, "5.24.0")
    baseline.write_text(f'pair = "{then}"\n\n[expected]\n"{BERT_LM}" = "PASS"\n')
    args = ["--neuron-baseline", str(baseline), "--neuron-bisect"]
    sweep = runner.run(BERT_LM, backend="aot_eager", args=args, isolated=True)
    return Bisected(runner, sweep, {}, pair)


@pytest.mark.slow
@pytest.mark.skipif(
    transformers.__version__ != "5.25.0", reason="the suite's transformers broke it"
)
def test_transformers_5_25_broke_the_bert_causal_lm(transformers_broke_it: Bisected) -> None:
    (row,) = transformers_broke_it.rows()  # the sweep's, against the baseline's 5.24.0
    assert (row["package"], row["answer"], row["last_good"]) == (
        "transformers", "broke in transformers 5.25.0", "5.24.0",
    )  # fmt: skip
    # docs/bisect.md's search from 5.20.0, narrowed to the releases from 5.22.0 (patch
    # releases among them): a binary search still, each release one more environment to install
    done = transformers_broke_it.bisect(
        BERT_LM, "--package", "transformers", "--good", "5.22.0", "--bad", "5.25.0",
        "--format", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["first_bad"], report["last_good"]) == ("5.25.0", "5.24.0")
    between = len(report["candidates"]) - 2
    assert report["runs"] <= most_runs(between) + 2
    assert report["first_bad_run"]["result"] == "FAIL(gen)"
    assert report["context"]["config_flags"]["is_decoder"] is False


@pytest.mark.slow
def test_the_compiler_bisector_names_the_pass_that_broke_inductor(
    sweep_folder: Callable[..., SweepRunner],
) -> None:
    runner = sweep_folder("compiler")
    backend = "backends_for_tests:breaking_a_pass_inductor_backend_for_tests"
    sweep = runner.run(MODEL, backend=backend, isolated=True)
    assert sweep.row(MODEL)["result"] == "FAIL(forward)"
    done = Bisected(runner, sweep, {}, pair_of(backend)).bisect(
        MODEL, "--compiler", "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["stage"], report["subsystem"]) == ("inductor", "post_grad_passes")
    assert report["application_info"] == "post_grad_custom_pre_pass"
    assert report["answer"].startswith("breaks in inductor: post_grad_passes, application")


@pytest.mark.slow  # no faster test runs the minifier's path of --compiler
@BISECT
def test_the_minifier_narrows_a_compile_to_its_graph(bisected: Bisected) -> None:
    done = bisected.bisect(MODEL, "--compiler", "--compiler-method", "minifier", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["method"], report["status"]) == ("minifier", "found")
    assert report["signature"]["exception"] == "NotImplementedError"
    assert report["repro"]["path"].endswith("/bisect/compiler/repro.py")
    assert "minified from" in report["repro"]["note"]  # its backend refuses any graph:
    assert report["answer"].startswith("breaks on any graph, whatever its ops")  # no op to name
