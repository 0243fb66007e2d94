"""pytest hooks of pytest-neuronsupport. Thin: options here, the work in plain modules.

Without ``--neuron-sweep`` the plugin adds its options and nothing else: no collection, no
hooks, no imports of torch. With it, ``pytest_configure`` resolves the settings, makes the model
lists the session's collection arguments, and registers a :class:`SweepSession` whose hook
methods do the rest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_neuronsupport import devices
from pytest_neuronsupport.modellist import ModelListError, default_lists, resolve_paths

if TYPE_CHECKING:
    from pytest_neuronsupport.session import Settings

DEFAULT_RESULTS = "results"
DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_MAX_CORES = 16
DEFAULT_PREFILL_CHUNK = 32
DTYPES = ("auto", "bfloat16", "float16", "float32")
ISOLATIONS = ("fork", "fresh")

#: The valued options: --neuron-<name> and the ini key neuron_<name>.
OPTIONS: tuple[tuple[str, str | None, str, tuple[str, ...] | None], ...] = (
    (
        "device",
        None,
        "auto|neuron|cuda|cpu; auto: neuron if present, else cuda, else cpu",
        devices.CHOICES,
    ),
    ("backend", "NAME", "torch.compile backend name, or package.module:callable", None),
    ("dtype", None, "dtype of the device run; auto: bf16 on accelerators, fp32 on cpu", DTYPES),
    ("results", "DIR", f"results folder (default {DEFAULT_RESULTS}/)", None),
    ("timeout", "SECONDS", f"seconds one model may run (default {DEFAULT_TIMEOUT_S:g})", None),
    ("cache", "DIR", "cache: tiny models, references, compile caches (~/.cache/...)", None),
    ("limit", "N", "run at most N models, going down the lists in order", None),
    ("max-memory", "GB", "resident memory one model's run may use before it is stopped", None),
    (
        "max-cores",
        "N",
        f"largest number of cores a model may get (default {DEFAULT_MAX_CORES})",
        None,
    ),
    ("core-memory", "GB", "memory of one core for sizing models (default: the device's)", None),
    (
        "prefill-chunk",
        "N",
        f"decoders prefill in chunks of N tokens (default {DEFAULT_PREFILL_CHUNK}; 0: one pass)",
        None,
    ),
    (
        "judge",
        "MODEL",
        "English judge (Hub id, local path or zoo:<name>) when the CPU comparison does not run",
        None,
    ),
    (
        "isolation",
        None,
        "fork: runs forked from a warm server (default); fresh: a new python",
        ISOLATIONS,
    ),
)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.environ.get("NEURONSUPPORT_CACHE", os.path.join(base, "pytest-neuronsupport")))


def pytest_addoption(parser: pytest.Parser) -> None:
    """One option group; each valued flag has an ini key of the same name."""
    group = parser.getgroup("neuronsupport", "model support sweep (pytest-neuronsupport)")
    group.addoption(
        "--neuron-sweep",
        action="store_true",
        default=False,
        help="run the model sweep: one test per model of the model lists",
    )
    group.addoption(
        "--neuron-models",
        nargs="+",
        metavar="PATH",
        default=None,
        help="model list files (TOML); default: ini neuron_models, else the bundled tiny.toml",
    )
    parser.addini("neuron_models", "model list files (TOML), one per line", type="paths")
    group.addoption(
        "--neuron-rerun",
        action="store_true",
        default=False,
        help="run models again even when their run.py is the one recorded for them",
    )
    for name, metavar, text, choices in OPTIONS:
        group.addoption(
            f"--neuron-{name}", metavar=metavar, default=None, help=text, choices=choices
        )
        parser.addini(f"neuron_{name}", text, default=None)


def _option(config: pytest.Config, name: str) -> str | None:
    """A flag's value, else its ini key's, else None."""
    value = config.getoption(f"--neuron-{name}")
    if value is None:
        value = config.getini(f"neuron_{name}") or None
    return None if value is None else str(value)


def _number(config: pytest.Config, name: str, kind: type[float] | type[int]) -> float | None:
    """A positive number option, or None when unset."""
    text = _option(config, name)
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise pytest.UsageError(
            f"neuronsupport: --neuron-{name} {text!r} is not a number"
        ) from None
    if value <= 0:
        raise pytest.UsageError(f"neuronsupport: --neuron-{name} must be positive, not {text}")
    return value


def prefill_chunk(config: pytest.Config) -> int | None:
    """--neuron-prefill-chunk: a positive size, or 0 for no chunking."""
    text = _option(config, "prefill-chunk")
    if text is None:
        return DEFAULT_PREFILL_CHUNK
    if not text.isdigit():
        raise pytest.UsageError(f"neuronsupport: --neuron-prefill-chunk {text!r} is not a size")
    return int(text) or None


def _path(config: pytest.Config, name: str, default: Path) -> Path:
    """Flags are relative to the invocation folder, ini keys to the ini file's folder."""
    flag = config.getoption(f"--neuron-{name}")
    if flag is not None:
        return (config.invocation_params.dir / str(flag)).resolve()
    ini = config.getini(f"neuron_{name}")
    if ini:
        base = config.inipath.parent if config.inipath else config.rootpath
        return (base / str(ini)).resolve()
    return default.resolve()


def settings_from(config: pytest.Config) -> Settings:
    from pytest_neuronsupport.session import Settings

    try:
        device = devices.resolve(_option(config, "device") or "auto")
        flag_lists = config.getoption("--neuron-models")
        if flag_lists:
            lists = resolve_paths(flag_lists, config.invocation_params.dir)
        else:
            ini_lists = [str(p) for p in config.getini("neuron_models")]
            lists = resolve_paths(ini_lists, config.rootpath) if ini_lists else default_lists()
    except (ModelListError, ValueError) as exc:
        raise pytest.UsageError(f"neuronsupport: {exc}") from None
    dtype = _option(config, "dtype") or "auto"
    for name, choices in (
        ("device", devices.CHOICES),
        ("dtype", DTYPES),
        ("isolation", ISOLATIONS),
    ):
        value = _option(config, name)
        if value is not None and value not in choices:
            raise pytest.UsageError(
                f"neuronsupport: neuron_{name} = {value!r}: choose from {', '.join(choices)}"
            )
    limit = _number(config, "limit", int)
    max_cores = _number(config, "max-cores", int)
    return Settings(
        lists=tuple(lists),
        device=device,
        backend=_option(config, "backend") or device.default_backend,
        dtype=device.default_dtype if dtype == "auto" else dtype,
        results=_path(config, "results", config.invocation_params.dir / DEFAULT_RESULTS),
        cache=_path(config, "cache", default_cache()),
        timeout_s=_number(config, "timeout", float) or DEFAULT_TIMEOUT_S,
        workdir=config.invocation_params.dir,
        isolation=_option(config, "isolation") or "fork",
        limit=None if limit is None else int(limit),
        rerun=bool(config.getoption("--neuron-rerun")),
        max_memory_gb=_number(config, "max-memory", float),
        max_cores=int(max_cores or DEFAULT_MAX_CORES),
        core_memory_gb=_number(config, "core-memory", float),
        prefill_chunk=prefill_chunk(config),
        judge=_option(config, "judge"),
    )


def pytest_configure(config: pytest.Config) -> None:
    """With --neuron-sweep: settings, the model lists as collection args, the session plugin."""
    if not config.getoption("--neuron-sweep"):
        return
    config.addinivalue_line("markers", "neuronsupport: a model of a pytest-neuronsupport sweep")
    # Imported only for a sweep: a plain test run pays nothing for the plugin.
    from pytest_neuronsupport.backends import check_backend
    from pytest_neuronsupport.items import SESSION_KEY
    from pytest_neuronsupport.session import SweepSession, XdistHooks, is_worker

    settings = settings_from(config)
    if not is_worker(config):
        problem = check_backend(settings.backend, settings.device, settings.workdir)
        if problem:
            raise pytest.UsageError(f"neuronsupport: --neuron-backend: {problem}")
    # The model lists are what the session collects, beside any path given explicitly.
    explicit = config.args if config.args_source == pytest.Config.ArgsSource.ARGS else []
    config.args = [str(p) for p in settings.lists] + list(explicit)
    session = SweepSession(config, settings)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "neuronsupport-session")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(session), "neuronsupport-xdist")
