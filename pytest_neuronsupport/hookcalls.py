"""How the mode loop calls its users' per-model hooks (declared in
:mod:`pytest_neuronsupport.hookspec`) on each row; the runners' and the modes' hooks are called
once, when the sweep is configured (:func:`pytest_neuronsupport.configure.configure`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_neuronsupport.modellist import ModelSpec


class Hooks:
    """The per-model hooks; without a pytest config, none is called."""

    def __init__(self, config: pytest.Config | None = None) -> None:
        self.config = config

    def verdict(self, row: dict[str, Any], spec: ModelSpec) -> str | None:
        if self.config is None:
            return None
        hook = self.config.hook.pytest_neuronsupport_verdict
        result: str | None = hook(row=row, spec=spec, config=self.config)
        return result

    def row(self, row: dict[str, Any], spec: ModelSpec) -> None:
        if self.config is not None:
            self.config.hook.pytest_neuronsupport_row(row=row, spec=spec, config=self.config)
