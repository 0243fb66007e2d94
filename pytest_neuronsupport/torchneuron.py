"""TorchNeuron and the Neuron machine, as AWS documents them: the cores ``neuron-ls -j``
reports, and the stack a sweep checks before it starts. Only the ``neuron`` device
(:class:`~pytest_neuronsupport.devices.NeuronDevice`) calls this module.

* **Cores** (:func:`neuron_cores`): ``neuron-ls -j`` prints one object per chip, with
  ``nc_count`` (its logical cores), ``neuroncore_ids`` (the ids ``NEURON_RT_VISIBLE_CORES``
  takes), ``logical_neuroncore_config`` (LNC: 1 or 2 physical cores a logical one, 2 by default
  on Trn2 and Trn3) and ``memory_size`` (bytes). A trn2.48xlarge at LNC=2 has 16 chips of 4
  cores: 64, ids 0-63, 24 GiB a core. ``NEURONSUPPORT_CORES_PER_DEVICE`` overrides the count of
  each chip (its ids then run on from the chip's first), nothing else.
* **The stack** (:func:`stack_problem`): the installed ``torch-neuronx`` must be TorchNeuron
  (2.13.3+ and 2.14.3+, the native backend: the ``neuron`` device and dynamo backend), built for
  the installed torch; ``torch-neuronx`` 2.9 and earlier is the older XLA library of the same
  name (``torch_neuronx.xla_impl``, device ``xla``), refused with what to install instead. The
  versions come from package metadata; whether the device and backend register is asked of a
  fresh interpreter with the runs' environment (:data:`PROBE`), so that this process never
  imports torch nor TorchNeuron.

``NEURONSUPPORT_DEV_DIR`` names the folder whose ``neuron*`` files say a Neuron driver is
loaded (``/dev`` unless set: tests point it at a folder of their own).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: The tool that lists the chips, on ``PATH``.
NEURON_LS = "neuron-ls"
#: A count of logical cores per chip that replaces ``neuron-ls``'s ``nc_count``.
CORES_PER_DEVICE_ENV = "NEURONSUPPORT_CORES_PER_DEVICE"
#: The folder of the driver's device files (``/dev`` unless set).
DEV_DIR_ENV = "NEURONSUPPORT_DEV_DIR"
#: TorchNeuron's switch for running a graph that fails to compile eagerly (1, the default:
#: off; 0: on). Every run sets it to 1; a sweep started with 0 is refused.
FALLBACK_ENV = "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"
#: Where TorchNeuron comes from, and its first releases (Neuron SDK 2.33, October 2026).
NEURON_INDEX = "https://pip.repos.neuron.amazonaws.com"
FIRST_RELEASE = (2, 13, 3)
#: ``neuron-ls`` is given this long.
NEURON_LS_TIMEOUT_S = 60.0


class NeuronError(ValueError):
    """Why the Neuron device cannot be used here (a usage error of the sweep)."""


@dataclass(frozen=True)
class Chip:
    """One Neuron device (a chip), as ``neuron-ls -j`` lists it."""

    index: int
    core_ids: tuple[int, ...]
    #: Physical cores per logical core (None: not reported).
    lnc: int | None
    memory_bytes: int


@dataclass(frozen=True)
class Cores:
    """The machine's logical cores, chip by chip."""

    chips: tuple[Chip, ...]

    @property
    def ids(self) -> tuple[int, ...]:
        """Every logical core's id, in order: the allocator's k-th core is ``ids[k]``."""
        return tuple(i for chip in self.chips for i in chip.core_ids)

    @property
    def lnc(self) -> int | None:
        """The logical core configuration of the chips (None: not reported)."""
        return self.chips[0].lnc

    @property
    def core_memory_gb(self) -> float:
        """The memory of one logical core (GB): its chip's memory over its cores, the least
        of any chip."""
        return min(chip.memory_bytes / len(chip.core_ids) for chip in self.chips) / 1e9


def _int(entry: Mapping[str, object], key: str, where: str) -> int:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NeuronError(f"{where}: {key} is {value!r}, not a count")
    return value


def parse_neuron_ls(text: str, per_device: int | None = None) -> Cores:
    """The cores of ``neuron-ls -j``'s output (``per_device``: each chip's count instead of its
    ``nc_count``); a :class:`NeuronError` when it lists no core, or not in its documented
    form."""
    try:
        listed = json.loads(text)
    except ValueError:
        raise NeuronError(f"{NEURON_LS} -j printed no JSON: {text.strip()[:200]!r}") from None
    if not isinstance(listed, list) or not listed:
        raise NeuronError(f"{NEURON_LS} -j lists no Neuron device (it printed {text.strip()!r})")
    chips: list[Chip] = []
    for n, entry in enumerate(listed):
        where = f"{NEURON_LS} -j, device {n}"
        if not isinstance(entry, dict):
            raise NeuronError(f"{where}: not an object")
        count = _int(entry, "nc_count", where)
        listed_ids = entry.get("neuroncore_ids")
        ids: list[int] = []
        if isinstance(listed_ids, list) and all(isinstance(i, int) for i in listed_ids):
            ids = [int(i) for i in listed_ids]
        if len(ids) != count:
            raise NeuronError(f"{where}: nc_count {count} but neuroncore_ids {ids}")
        if per_device is not None:
            first = ids[0] if ids else sum(len(c.core_ids) for c in chips)
            ids = list(range(first, first + per_device))
        lnc = entry.get("logical_neuroncore_config")
        chips.append(
            Chip(
                index=n,
                core_ids=tuple(ids),
                lnc=lnc if isinstance(lnc, int) and not isinstance(lnc, bool) else None,
                memory_bytes=_int(entry, "memory_size", where),
            )
        )
    if not any(chip.core_ids for chip in chips):
        raise NeuronError(f"{NEURON_LS} -j lists {len(chips)} devices and no NeuronCore")
    return Cores(tuple(chip for chip in chips if chip.core_ids))


def per_device_override(environ: Mapping[str, str]) -> int | None:
    """``NEURONSUPPORT_CORES_PER_DEVICE``, or None when unset."""
    text = environ.get(CORES_PER_DEVICE_ENV)
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise NeuronError(f"{CORES_PER_DEVICE_ENV}={text!r} is not a positive count")
    return int(text)


#: What ``neuron-ls`` said, per environment (it reads ``PATH``; the override changes counts).
_SEEN: dict[tuple[tuple[str, str], ...], Cores] = {}


def neuron_cores(environ: Mapping[str, str]) -> Cores:
    """The machine's cores as ``neuron-ls -j`` reports them (run once per environment); a
    :class:`NeuronError` saying why when it is missing, fails or lists no core."""
    key = tuple(sorted(environ.items()))
    if key in _SEEN:
        return _SEEN[key]
    program = shutil.which(NEURON_LS, path=environ.get("PATH"))
    if program is None:
        raise NeuronError(
            f"{NEURON_LS} is not on PATH: the Neuron device's cores are read from "
            f"`{NEURON_LS} -j` (aws-neuronx-tools, on every Neuron DLAMI)"
        )
    try:
        done = subprocess.run(
            [program, "-j"],
            capture_output=True,
            text=True,
            env=dict(environ),
            timeout=NEURON_LS_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NeuronError(f"{program} -j: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-300:]
        raise NeuronError(f"{program} -j exited with status {done.returncode}: {said}")
    cores = parse_neuron_ls(done.stdout, per_device_override(environ))
    _SEEN[key] = cores
    return cores


def device_files(environ: Mapping[str, str]) -> list[str]:
    """The Neuron driver's device files (``/dev/neuron0``...), in ``NEURONSUPPORT_DEV_DIR``."""
    folder = Path(environ.get(DEV_DIR_ENV) or "/dev")
    return sorted(str(p) for p in folder.glob("neuron[0-9]*"))


def release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version: ``2.13.3.0+x`` → ``(2, 13, 3, 0)``."""
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers else ()


def install_line(torch_version: str | None) -> str:
    """The ``pip install`` of the TorchNeuron that matches the installed torch."""
    family = ".".join(map(str, release(torch_version or "")[:2])) or "2.13"
    return f"pip install --extra-index-url {NEURON_INDEX} 'torch-neuronx=={family}.*'"


def xla_library() -> bool:
    """Whether the installed ``torch_neuronx`` has the XLA library's ``xla_impl`` package (its
    files are looked for; nothing is imported)."""
    spec = importlib.util.find_spec("torch_neuronx")
    folders = (spec.submodule_search_locations or []) if spec is not None else []
    return any((Path(folder) / "xla_impl").is_dir() for folder in folders)


def version_problem(neuronx: str | None, torch_version: str | None, xla: bool) -> str | None:
    """Why the installed ``torch-neuronx`` (``neuronx``, its version) is not TorchNeuron for
    the installed torch, or None: absent, the XLA library, or built for another torch."""
    install = install_line(torch_version)
    if neuronx is None:
        return f"TorchNeuron (torch-neuronx) is not installed: {install}"
    ours = release(neuronx)
    if xla or ours[:2] <= (2, 9):
        return (
            f"torch-neuronx {neuronx} is the XLA library (torch-neuronx 2.9 and earlier, device "
            f"'xla', torch_neuronx.xla_impl), not TorchNeuron, the native backend this sweep "
            f"uses (the 'neuron' device and dynamo backend, torch-neuronx 2.13.3+ and 2.14.3+, "
            f"Trn2 and Trn3): {install}"
        )
    if ours[:3] < FIRST_RELEASE:
        return f"torch-neuronx {neuronx} is not a TorchNeuron release (2.13.3+, 2.14.3+): {install}"
    if torch_version is not None and ours[:2] != release(torch_version)[:2]:
        built = ".".join(map(str, ours[:2]))
        return (
            f"torch-neuronx {neuronx} is built for torch {built}, and torch {torch_version} is "
            f"installed: {install} (or torch=={built}.* with it)"
        )
    return None


#: Run in a fresh interpreter with the runs' environment: does TorchNeuron register the
#: ``neuron`` device (``torch.neuron``) and its dynamo backend, and which of its functions the
#: runs call does it have. Prints one JSON object.
PROBE = """\
import json, torch
import torch_neuronx
import torch._dynamo
api = [n for n in ("get_fallback_ops", "get_executed_ops", "clear_op_tracking",
                   "get_dynamo_metrics") if callable(getattr(torch_neuronx, n, None))]
print(json.dumps({
    "device": torch._C._get_privateuse1_backend_name(),
    "module": hasattr(torch, "neuron"),
    "backend": "neuron" in torch._dynamo.list_backends(exclude_tags=()),
    "api": api,
}))
"""


def registration_problem(environ: Mapping[str, str], python: str = sys.executable) -> str | None:
    """Why TorchNeuron, imported as a run imports it, does not register the ``neuron`` device
    and dynamo backend (:data:`PROBE`), or None."""
    try:
        done = subprocess.run(
            [python, "-c", PROBE],
            capture_output=True,
            text=True,
            env=dict(environ),
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"importing torch_neuronx: {exc}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return f"importing torch_neuronx failed: {lines[-1] if lines else done.returncode}"
    try:
        said = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"importing torch_neuronx printed {done.stdout.strip()[-200:]!r}"
    device = said.get("device") == "neuron"
    missing = [
        what
        for what, ok in (
            (f"the 'neuron' device (PrivateUse1 is {said.get('device')!r})", device),
            ("torch.neuron", said.get("module")),
            ("the 'neuron' dynamo backend", said.get("backend")),
        )
        if not ok
    ]
    if missing:
        return f"torch_neuronx does not register {', '.join(missing)}: not TorchNeuron"
    return None


def stack_problem(
    environ: Mapping[str, str],
    neuronx: str | None,
    torch_version: str | None,
    python: str = sys.executable,
) -> str | None:
    """Why this stack cannot run the Neuron device's runs (``neuronx`` and ``torch_version``:
    the installed versions of torch-neuronx and torch), or None: the versions first, then what
    importing TorchNeuron registers."""
    problem = version_problem(neuronx, torch_version, xla_library())
    return problem or registration_problem(environ, python)


def fallback_problem(environ: Mapping[str, str]) -> str | None:
    """Why the environment would let a graph that fails to compile run eagerly, or None."""
    if environ.get(FALLBACK_ENV, "1").strip() == "0":
        return (
            f"{FALLBACK_ENV}=0 runs a graph that fails to compile eagerly (TorchNeuron's "
            f"fallback execution): a model the compiler cannot compile would PASS"
        )
    return None
