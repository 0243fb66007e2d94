"""Collection: a model list file collects one item per model, in list order.

The shape of pytest's own non-Python test example: a file collector yielding custom items with
``runtest``, ``repr_failure`` and ``reportinfo``. An item's test is the per-model pipeline
(:mod:`pytest_neuronsupport.pipeline.steps`); its row goes on the item for the report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

from pytest_neuronsupport import report
from pytest_neuronsupport.dataset.store import find_row
from pytest_neuronsupport.modellist import ModelListError, ModelSpec, check_unique, parse
from pytest_neuronsupport.pipeline.bench import Benchmark
from pytest_neuronsupport.pipeline.classify import PYTEST_OUTCOMES
from pytest_neuronsupport.pipeline.steps import NotRun, Pipeline
from pytest_neuronsupport.pipeline.training import Training
from pytest_neuronsupport.runners import Runners
from pytest_neuronsupport.runners.lib.protocol import Result


class ModelFailure(Exception):
    """A model's test failed; the message is the whole failure text."""


def skip_model(reason: str) -> NoReturn:
    """Skip a model's test, reported at its entry in the list rather than at a line of ours."""
    raise pytest.skip.Exception(reason, _use_item_location=True)


class ModelListFile(pytest.File):
    """A model list (``*.toml``) named by ``--neuron-models`` or the ``neuron_models`` ini key."""

    def __init__(self, *, pipeline: Pipeline, listed: dict[str, ModelSpec], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        #: The models of the lists collected so far: one listed twice would overwrite its row.
        self.listed = listed

    @property
    def runners(self) -> Runners:
        return self.pipeline.runners

    def collect(self) -> Iterator[ModelItem]:
        specs = parse(self.path, runners=self.runners)
        check_unique(specs, self.listed)
        for spec in specs:
            yield ModelItem.from_parent(self, name=spec.id, spec=spec, pipeline=self.pipeline)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        if isinstance(excinfo.value, ModelListError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ModelItem(pytest.Item):
    """One model's test: its pipeline, then passed, failed or skipped by its result."""

    def __init__(self, *, spec: ModelSpec, pipeline: Pipeline, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.pipeline = pipeline
        self.row: dict[str, Any] | None = None
        self.unchanged = False
        #: A training test (``mode = "train"``, or ``--neuron-train``): its row is a training row.
        self.trains = spec.mode == "train" or pipeline.settings.train
        #: The table its row goes to.
        self.table = "train" if self.trains else "support"
        #: Its performance rows (``--neuron-bench``), one per configuration.
        self.perf_rows: list[dict[str, Any]] = []
        self.add_marker("neuronsupport")

    def runtest(self) -> None:
        tried = (Training(self.pipeline) if self.trains else self.pipeline).test(self.spec)
        benches = self.pipeline.settings.bench and not self.trains
        if isinstance(tried, NotRun):
            self.unchanged = tried.unchanged
            if benches and tried.unchanged:  # benchmarked all the same: the model runs
                recorded = find_row(
                    self.pipeline.settings.results, self.pipeline.pair, self.spec.id
                )
                self.perf_rows = Benchmark(self.pipeline).test(self.spec, recorded)
            skip_model(tried.reason)
        self.row = tried.row
        if benches:
            self.perf_rows = Benchmark(self.pipeline).test(self.spec, tried.row)
        self.user_properties.extend(report.junit_properties(tried.row))
        outcome = PYTEST_OUTCOMES[Result(tried.row["result"])]
        if outcome == "failed":
            raise ModelFailure(report.failure_text(tried.row, tried.run_py))
        if outcome == "skipped":
            skip_model(report.skip_text(tried.row))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        if isinstance(excinfo.value, ModelFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, self.spec.line - 1 if self.spec.line else None, f"model {self.spec.id}"
