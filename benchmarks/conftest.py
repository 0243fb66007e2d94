"""The benchmarks as pytest-benchmark tests (``pytest benchmarks/``; the suite's ``testpaths``
leave them out). Each test times one figure; a ratio's test divides its figure by the one a test
before it measured, records the ratio in its ``extra_info`` (kept by ``--benchmark-autosave``,
shown by ``--benchmark-compare``) and every ratio is printed at the end, against its target."""

from __future__ import annotations

import pytest
from ratios import RATIOS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not RATIOS:
        return
    terminalreporter.section("ratios")
    terminalreporter.write_line(f"{'ratio':<56} {'measured':>10} {'target':>10}")
    for name, value, unit, target in RATIOS:
        mark = "ok" if value <= target else "MISSED"
        measured, limit = f"{value:.3f}{unit}", f"<= {target}{unit}"
        terminalreporter.write_line(f"{name:<56} {measured:>10} {limit:>10}  {mark}")
