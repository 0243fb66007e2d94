"""Tiny wheels made by the tests, and a package index of them that pip reads offline
(``PIP_FIND_LINKS`` to the folder, ``PIP_NO_INDEX``).

``bisectee_for_tests`` stands in for a library whose releases break a model, which we cannot
publish for real: each version is a ``torch.compile`` backend (``bisectee_for_tests:backend``)
that compiles nothing (the graph runs as it is) or raises, as its version says. A few versions
cannot be tried: a wheel that is not a zip (pip refuses it), and one whose module raises when
imported.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest

NAME = "bisectee_for_tests"
#: What each version does: ``good``, ``bad`` (its backend raises), ``broken`` (no zip),
#: ``unimportable`` (its module raises on import), ``otherwise`` (raises another error).
RELEASES: dict[str, str] = {
    "1.0": "good",
    "1.1": "broken",
    "1.2": "good",
    "1.3": "unimportable",
    "1.4": "bad",
    "1.5": "bad",
}

_BACKEND = '''\
"""bisectee_for_tests {version}: a torch.compile backend ({kind})."""

__version__ = "{version}"
{prelude}

def backend(gm, example_inputs):
    """Runs the graph as it is, or fails as release {version} does."""
    {body}
    return gm.forward
'''
_BODIES = {
    "good": "pass",
    "bad": 'raise NotImplementedError(f"bisectee_for_tests {__version__}: no lowering")',
    "otherwise": 'raise RuntimeError("bisectee_for_tests: another failure")',
    "unimportable": "pass",
}


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def wheel(folder: Path, name: str, version: str, files: Mapping[str, str]) -> Path:
    """A pure-Python wheel of ``files`` (path → text) in ``folder``."""
    info = f"{name}-{version}.dist-info"
    contents = {path: text.encode() for path, text in files.items()}
    contents[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    contents[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    contents[f"{info}/top_level.txt"] = f"{name}\n".encode()
    record = [_record_line(path, data) for path, data in contents.items()]
    contents[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name_in, data in contents.items():
            archive.writestr(name_in, data)
    return path


def bisectee_index(folder: Path, releases: Mapping[str, str] = RELEASES) -> Path:
    """A folder of ``bisectee_for_tests`` wheels, one per release (as ``releases`` says)."""
    folder.mkdir(parents=True, exist_ok=True)
    for version, kind in releases.items():
        if kind == "broken":
            (folder / f"{NAME}-{version}-py3-none-any.whl").write_bytes(b"not a zip archive")
            continue
        prelude = (
            'raise ImportError("bisectee_for_tests: needs a library this machine lacks")'
            if kind == "unimportable"
            else ""
        )
        text = _BACKEND.format(version=version, kind=kind, prelude=prelude, body=_BODIES[kind])
        wheel(folder, NAME, version, {f"{NAME}/__init__.py": text})
    return folder


def offline_index(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """pip reads only ``folder`` (no index, no other find-links), for this test's processes."""
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
