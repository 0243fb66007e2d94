"""The stand-in TorchNeuron, for tests: what a sweep with ``--neuron-device neuron`` needs on a
machine without Trainium.

A test double, named as one everywhere: its versions end ``+standin`` (so the rows it makes say
so), and no claim of hardware support follows from a sweep through it. It is made of:

* ``packages/torch_neuronx``: the package (:mod:`torch_neuronx` there: the ``neuron`` device,
  dynamo backend, op tracking and metrics);
* ``bin/neuron-ls``: a fake ``neuron-ls -j`` (``NEURON_STANDIN_CHIPS`` chips of Trn2 at
  ``NEURON_LOGICAL_NC_CONFIG``);
* what :func:`standin_env` writes into a folder of the test's: the distributions' metadata
  (``torch-neuronx`` and ``neuronx-cc``, or the XLA library's ``torch-neuronx`` 2.9 with its
  ``xla_impl``) and a device folder of ``neuron*`` files, which the plugin reads instead of
  ``/dev`` (``NEURONSUPPORT_DEV_DIR``).
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).parent
PACKAGES = HERE / "packages"
BIN = HERE / "bin"
#: The stand-in's versions: TorchNeuron's first release family, marked as a stand-in.
TORCH_NEURONX = "2.13.3.0+standin"
NEURONX_CC = "2.33.0.0+standin"
#: An XLA library's version, as the Neuron docs spell them.
XLA_TORCH_NEURONX = "2.9.0.2.15.32035"


def _distribution(folder: Path, module: str, name: str, version: str) -> None:
    info = folder / f"{module}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )


def standin_env(
    folder: Path,
    *,
    chips: int = 16,
    torch_neuronx: str = TORCH_NEURONX,
    xla: bool = False,
    environ: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a sweep through the stand-in (``PYTHONPATH``, ``PATH``, the device
    folder, the chips ``neuron-ls`` lists), its files written under ``folder`` (a new one).
    ``xla``: the XLA library instead (``torch_neuronx.xla_impl``, version 2.9)."""
    metadata = folder / "metadata"
    version = XLA_TORCH_NEURONX if xla else torch_neuronx
    _distribution(metadata, "torch_neuronx", "torch-neuronx", version)
    _distribution(metadata, "neuronx_cc", "neuronx-cc", NEURONX_CC)
    paths = [metadata, PACKAGES]
    if xla:  # first on the path: the XLA library's package, whose import needs torch_xla
        library = folder / "xla" / "torch_neuronx"
        (library / "xla_impl").mkdir(parents=True)
        (library / "__init__.py").write_text("import torch_xla  # noqa: F401\n", encoding="utf-8")
        (library / "xla_impl" / "__init__.py").write_text("", encoding="utf-8")
        paths.insert(0, library.parent)
    dev = folder / "dev"
    dev.mkdir(parents=True)
    for n in range(chips):
        (dev / f"neuron{n}").touch()
    env = dict(environ if environ is not None else os.environ)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {
        "PYTHONPATH": os.pathsep.join([*map(str, paths), *inherited]),
        "PATH": os.pathsep.join([str(BIN), env.get("PATH", "")]),
        "NEURONSUPPORT_DEV_DIR": str(dev),
        "NEURON_STANDIN_CHIPS": str(chips),
    }
