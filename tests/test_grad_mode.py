"""One grad mode for compiled runs: ``torch.no_grad()``, never ``torch.inference_mode()``."""

from __future__ import annotations

from importlib.resources import files


def test_no_compiled_call_runs_under_inference_mode() -> None:
    """Under inference_mode dynamo can fail its own guard ("Guard failed on the same frame it
    was created", a BigBird masked LM; FACTS.md); under no_grad it does not. Only the judge,
    which is never compiled, may use it."""
    root = files("pytest_neuronsupport.runners")
    sources = [*root.iterdir(), *root.joinpath("lib").iterdir()]
    using = sorted(
        p.name
        for p in sources
        if p.name.endswith(".py") and "inference_mode()" in p.read_text(encoding="utf-8")
    )
    assert using == ["judge.py"]
