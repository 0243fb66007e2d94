"""Running sweeps through pytester and reading back what they wrote (rows, junit)."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

HERE = Path(__file__).parent


def toml_list(entries: Iterable[Mapping[str, Any]]) -> str:
    """A model list's text; JSON strings are valid TOML basic strings."""
    blocks = []
    for entry in entries:
        lines = ["[[model]]"]
        lines += [f"{key} = {json.dumps(value)}" for key, value in entry.items()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


@dataclass
class Sweep:
    """A finished sweep: pytest's result, the dataset's rows and the junit properties."""

    result: pytest.RunResult
    rows: dict[str, dict[str, Any]]
    junit: dict[str, dict[str, str]]
    testcases: dict[str, ET.Element]

    def row(self, model_id: str) -> dict[str, Any]:
        return self.rows[model_id]


class SweepRunner:
    """Runs ``pytest --neuron-sweep`` in a pytester folder with the shared zoo cache."""

    def __init__(self, pytester: pytest.Pytester, cache: Path) -> None:
        self.pytester = pytester
        # Each test has its cache (CPU references) and core leases but shares the built zoo:
        # the leases of one test's sweeps must not wait for another test's, running in parallel.
        self.cache = pytester.path / "cache"
        self.cache.mkdir()
        (self.cache / "zoo").symlink_to(cache / "zoo", target_is_directory=True)
        # an ini file makes the pytester folder the rootdir, and sets the cache through its key
        pytester.makeini(
            f"[pytest]\nneuron_cache = {self.cache}\nneuron_leases = {self.cache / 'leases'}\n"
        )
        shutil.copy(HERE / "backends_for_tests.py", pytester.path / "backends_for_tests.py")

    @property
    def results(self) -> Path:
        return self.pytester.path / "results"

    def write_list(self, entries: Iterable[Mapping[str, Any]], name: str = "models.toml") -> Path:
        path = self.pytester.path / name
        path.write_text(toml_list(entries), encoding="utf-8")
        return path

    def run(
        self,
        *models: str | Mapping[str, Any],
        backend: str = "aot_eager",
        args: Iterable[str] = (),
        list_name: str = "models.toml",
    ) -> Sweep:
        entries = [{"id": m} if isinstance(m, str) else m for m in models]
        path = self.write_list(entries, list_name)
        # a subprocess: an in-process run would drop the modules it imported (transformers',
        # the plugin's) from sys.modules when it ends, splitting classes between two copies
        result = self.pytester.runpytest_subprocess(
            "--neuron-sweep",
            "--neuron-models",
            str(path),
            "--neuron-backend",
            backend,
            "--junitxml",
            "junit.xml",
            "-p",
            "no:cacheprovider",
            "-rA",
            *args,
        )
        return Sweep(result, self.read_rows(), *self.read_junit())

    def read_rows(self) -> dict[str, dict[str, Any]]:
        """The rows of the pair written last (a sweep writes one pair), by model id."""
        data = self.results / "data"
        files = sorted(data.glob("*/*.parquet"), key=lambda p: p.stat().st_mtime)
        rows: dict[str, dict[str, Any]] = {}
        try:
            table = pq.read_table(files[-1]).to_pylist() if files else []
        except Exception:  # a test may damage the file on purpose
            return rows
        for row in table:
            assert row["model_id"] not in rows, f"{row['model_id']} twice in {files[-1]}"
            rows[row["model_id"]] = row
        return rows

    def read_junit(self) -> tuple[dict[str, dict[str, str]], dict[str, ET.Element]]:
        path = self.pytester.path / "junit.xml"
        props: dict[str, dict[str, str]] = {}
        cases: dict[str, ET.Element] = {}
        if not path.exists():
            return props, cases
        for case in ET.parse(path).getroot().iter("testcase"):
            values = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
            key = values.get("model_id", case.get("name", ""))
            props[key] = values
            cases[key] = case
        return props, cases
