"""The CPU reference, computed once: kept in the file the plugin names for it.

The plugin names the file in ``$NEURONSUPPORT_REFERENCE``, keyed by everything that changes a
reference (the checkpoint, the run's parameters but those that only concern the device, the dtype
first; the run code, the torch and transformers versions: see
:mod:`pytest_neuronsupport.pipeline.reference`), so a second sweep of the same models pays only
for the device. The plugin computes it before the device's run, in a run of the same script
that does only that (:func:`reference_pass`), so the device's cores wait for no CPU work. Unset
(``python3 run.py`` by hand), every run computes its reference afresh.

Besides the CPU fp32 run, a reference holds the outputs in float64 and eagerly in the device's
own dtype (:func:`exact_reference`; in a half dtype rounded as the dtype defines it, the same on
every host: :mod:`~pytest_neuronsupport.runners.lib.rounding`), from which the checks measure the
noise they allow; and what computed it (:func:`reference_host`: the CPU, oneDNN's ISA, the
threads, torch's and oneDNN's versions), which the row's ``reference_*`` columns say.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import torch

from pytest_neuronsupport.runners.lib.models import load_pretrained
from pytest_neuronsupport.runners.lib.protocol import (
    REFERENCE_ENV,
    REFERENCE_FAILED_ENV,
    REFERENCE_ONLY_ENV,
    Result,
    phase,
    reference_key,
)
from pytest_neuronsupport.runners.lib.rounding import eager_outputs


class ReferenceFailed(Exception):
    """The reference's own pass failed (told in ``$NEURONSUPPORT_REFERENCE_FAILED``): shown as
    that pass's error."""

    def __repr__(self) -> str:
        return str(self.args[0])


def reference_only() -> bool:
    """Whether this run only computes its CPU reference (``$NEURONSUPPORT_REFERENCE_ONLY``):
    off the device, before the device's run leases its cores."""
    return bool(os.environ.get(REFERENCE_ONLY_ENV))


def reference_pass(params: dict[str, Any], compute: Callable[[], Any]) -> dict[str, Any]:
    """The verdict of a reference-only run: the reference computed into its file (or found
    there), or why it failed (the device's run is told, and says so)."""
    phase("reference")
    verdict: dict[str, Any] = {"result": Result.PASS, "reference_only": True}
    try:
        verdict["reference_cached"] = cached_reference(params, compute)[1]
    except Exception as exc:
        verdict["reference_error"] = f"{exc!r}"[:480]
    return verdict


def cached_reference(params: dict[str, Any], compute: Callable[[], Any]) -> tuple[Any, bool]:
    """The CPU reference of the run of ``params``, from its file if there is one made for the
    same key (:func:`reference_key`: the dtype first); and whether it came from there."""
    if os.environ.get(REFERENCE_FAILED_ENV):  # its own pass failed, off the lease
        raise ReferenceFailed(os.environ[REFERENCE_FAILED_ENV])
    path, key = os.environ.get(REFERENCE_ENV), reference_key(params)
    try:  # none named, none yet, another run's (a file named by hand), damaged: computed
        kept = torch.load(path, weights_only=True)  # type: ignore[arg-type]
        if kept["key"] == key:
            return kept, True
        miss = "the file was made for other parameters"
    except FileNotFoundError:
        miss = "no file yet"
    except Exception as exc:
        miss = f"the file could not be read: {exc!r}"[:300]
    value, part = {**compute(), "key": key}, f"{path}.{os.getpid()}.tmp"
    value["info"] = {**value.get("info", {}), **reference_host()}  # kept in the file with it
    if path:  # kept (replacing what was there), and its verdict says why it was computed
        torch.save(value, part)
        os.replace(part, path)
        value["info"] = {**value.get("info", {}), "reference_miss": miss}
    return value, False


def exact_reference(
    params: dict[str, Any], cls: Any, outputs: Any, have: Any, info: dict[str, Any]
) -> dict[str, Any]:
    """``outputs`` of the model (``cls``) on the CPU eagerly in the run's dtype (from ``have``,
    by dtype, where the reference computed them already; a half dtype rounded:
    :func:`~pytest_neuronsupport.runners.lib.rounding.eager_outputs`, the operations it left to
    the host's kernels in ``info``) and in float64: ``eager`` and ``fp64``; or
    ``fp64_unavailable``, why not (the sweep's ``fp64_reference`` false: the host's memory
    cannot hold the model in float64; a pass that raised)."""
    if params.get("fp64_reference") is False:
        return {"fp64_unavailable": "the host's memory cannot hold the model in float64"}
    load, dtype = functools.partial(load_pretrained, cls, params, device="cpu"), params["dtype"]
    try:
        if dtype in have:
            eager = have[dtype]
        else:
            eager, info["eager_native_ops"] = eager_outputs(outputs, load(dtype), dtype)
        return {"eager": eager, "fp64": outputs(load("float64"))}
    except Exception as exc:
        return {"fp64_unavailable": f"the eager or float64 CPU pass failed: {exc!r}"[:300]}


def reference_host() -> dict[str, Any]:
    """What computes the reference: the CPU's model, the ISA oneDNN uses on it (its own words;
    ``ONEDNN_MAX_CPU_ISA`` caps it) and ATen's, torch's threads, torch's and oneDNN's versions."""
    names, said = [], onednn_header() + torch.__config__.show()  # MKL-DNN v3.12.0
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        names = re.findall(r"^model name\s*:\s*(.+)$", f.read(), re.MULTILINE)
    isa, onednn = re.search(r",isa:(.*)", said), re.search(r"DNN v(\S+)", said)
    host = dict(reference_cpu=names[0].strip() if names else platform.machine())
    host.update(reference_isa=isa and isa[1].strip(), reference_onednn=onednn and onednn[1])
    host.update(reference_threads=torch.get_num_threads(), reference_torch=str(torch.__version__))
    return {**host, "reference_aten_isa": torch.backends.cpu.get_cpu_capability()}


@functools.cache
def onednn_header() -> str:
    """oneDNN's verbose header (its version, threads, ISA), printed once a process, the first
    time verbose is on: caught from the standard output's file while one tiny reorder runs."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with tempfile.TemporaryFile() as caught:
            os.dup2(caught.fileno(), 1)
            try:
                with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):  # type: ignore[no-untyped-call]
                    torch.ones(1, 1).to_mkldnn()
            finally:
                os.dup2(saved, 1)
            caught.seek(0)
            return caught.read().decode(errors="replace")
    except Exception:  # no oneDNN in this build: no ISA to say
        return ""
    finally:
        os.close(saved)
