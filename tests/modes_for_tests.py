"""A mode of a user's own, defined outside the plugin (no module of the plugin changes for it):
one row per model with the checkpoint's parameter count, in ``<results>/params``.

A user registers it from a ``conftest.py`` through the ``pytest_neuronsupport_modes`` hook; the
tests copy this file beside the sweep's conftest, and import it in process for the unit tests.
It runs nothing isolated: its "script" is the text that names what it counts, so a second sweep
over the same checkpoint finds it unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from pytest_neuronsupport.dataset.table import RUN_FIELDS, Table
from pytest_neuronsupport.modellist import ModelSpec
from pytest_neuronsupport.modes import ModeOutcome, Script, common_row
from pytest_neuronsupport.pipeline.plan import Plan
from pytest_neuronsupport.pipeline.sizing import checkpoint_parameters
from pytest_neuronsupport.pipeline.sweep import Sweep
from pytest_neuronsupport.settings import Settings

PARAMS = Table(
    "params",
    "params",
    pa.schema(
        [
            pa.field("model_id", pa.string()),
            pa.field("library", pa.string()),
            pa.field("task", pa.string()),
            pa.field("revision", pa.string()),
            pa.field("result", pa.string()),
            pa.field("notes", pa.string()),
            pa.field("exclusion", pa.string()),
            pa.field("error", pa.string()),
            pa.field("parameters", pa.int64()),
            *RUN_FIELDS,
            pa.field("dtype", pa.string()),
            pa.field("run_py_sha256", pa.string()),
            pa.field("check", pa.string()),
        ],
        metadata={"neuronsupport_schema": "1"},
    ),
)


class ParamCountModeForTests:
    """Counts a checkpoint's parameters from its safetensors headers."""

    name = "params"
    table = PARAMS
    budgeted = False
    sized = False
    hooked = False

    def wanted(self, spec: ModelSpec, settings: Settings) -> bool:
        return True

    def ready(self, sweep: Sweep, spec: ModelSpec, before: Mapping[str, ModeOutcome]) -> bool:
        return True

    def base_row(self, sweep: Sweep, spec: ModelSpec) -> dict[str, Any]:
        return common_row(sweep, spec)

    def script(self, sweep: Sweep, planned: Plan, base: dict[str, Any]) -> Script:
        text = f"count the parameters of {planned.checkpoint}\n"
        return Script(text, sweep.run_dir(planned.spec.id) / "params.txt", key=planned.spec.id)

    def run(
        self, sweep: Sweep, planned: Plan, script: Script, base: dict[str, Any]
    ) -> list[dict[str, Any]]:
        script.path.write_text(script.text, encoding="utf-8")
        count = checkpoint_parameters(Path(planned.checkpoint))
        result = "PASS" if count else "FAIL(load)"
        check = json.dumps({"files": sorted(p.name for p in Path(planned.checkpoint).iterdir())})
        fields = {"result": result, "parameters": count, "check": check}
        return [{**base, **fields, "run_py": script.text, "run_py_sha256": script.sha256}]


class RaisingModeForTests(ParamCountModeForTests):
    """A mode whose own code fails: the model still gets its row (FAIL(other))."""

    name = "raising"
    table = Table("raising", "raising", PARAMS.schema)

    def run(
        self, sweep: Sweep, planned: Plan, script: Script, base: dict[str, Any]
    ) -> list[dict[str, Any]]:
        raise RuntimeError("a bug in a mode")


class BadRowModeForTests(ParamCountModeForTests):
    """A mode whose row does not fit its table: FAIL(other), keeping what names the model."""

    name = "badrow"
    table = Table("badrow", "badrow", PARAMS.schema)

    def run(
        self, sweep: Sweep, planned: Plan, script: Script, base: dict[str, Any]
    ) -> list[dict[str, Any]]:
        row = super().run(sweep, planned, script, base)[0]
        return [{**row, "parameters": "many"}]  # not an int64


CONFTEST = """
from modes_for_tests import ParamCountModeForTests


def pytest_neuronsupport_modes(config):
    return [ParamCountModeForTests()]
"""
