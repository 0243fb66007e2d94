"""Where the files shipped with the project live: the model lists and the architecture table
(``model_lists/``). A leaf: it imports nothing of the package."""

from __future__ import annotations

from pathlib import Path


def bundled_dir() -> Path:
    """The folder of the model lists shipped with the project.

    Installed from a wheel they sit inside the package; in a source checkout (editable
    install) they are the repository's ``model_lists/``.
    """
    here = Path(__file__).resolve().parent
    inside = here / "model_lists"
    return inside if inside.is_dir() else here.parent / "model_lists"
