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
DTYPES = ("auto", "bfloat16", "float16", "float32")


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.environ.get("NEURONSUPPORT_CACHE", os.path.join(base, "pytest-neuronsupport")))


def pytest_addoption(parser: pytest.Parser) -> None:
    """One option group; each flag (but --neuron-sweep) has an ini key of the same name."""
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
    options = (
        ("device", "auto|neuron|cuda|cpu; auto: neuron if present, else cuda, else cpu", None),
        ("backend", "torch.compile backend name, or package.module:callable", None),
        ("dtype", "dtype of the device run: auto (bf16 on accelerators, fp32 on cpu)", None),
        ("results", f"results folder (default {DEFAULT_RESULTS}/)", "DIR"),
        ("timeout", f"seconds one model may run (default {DEFAULT_TIMEOUT_S:g})", "SECONDS"),
        ("cache", "cache folder: tiny models, compile caches (default ~/.cache/...)", "DIR"),
    )
    for name, text, metavar in options:
        kwargs: dict[str, object] = {"default": None, "help": text}
        if name == "device":
            kwargs["choices"] = devices.CHOICES
        if name == "dtype":
            kwargs["choices"] = DTYPES
        group.addoption(f"--neuron-{name}", metavar=metavar, **kwargs)
        parser.addini(f"neuron_{name}", text, default=None)


def _option(config: pytest.Config, name: str) -> str | None:
    """A flag's value, else its ini key's, else None."""
    value = config.getoption(f"--neuron-{name}")
    if value is None:
        value = config.getini(f"neuron_{name}") or None
    return None if value is None else str(value)


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
        timeout = float(_option(config, "timeout") or DEFAULT_TIMEOUT_S)
    except (ModelListError, ValueError) as exc:
        raise pytest.UsageError(f"neuronsupport: {exc}") from None
    if timeout <= 0:
        raise pytest.UsageError("neuronsupport: --neuron-timeout must be positive")
    dtype = _option(config, "dtype") or "auto"
    return Settings(
        lists=tuple(lists),
        device=device,
        backend=_option(config, "backend") or device.default_backend,
        dtype=device.default_dtype if dtype == "auto" else dtype,
        results=_path(config, "results", config.invocation_params.dir / DEFAULT_RESULTS),
        cache=_path(config, "cache", default_cache()),
        timeout_s=timeout,
        workdir=config.invocation_params.dir,
    )


def pytest_configure(config: pytest.Config) -> None:
    """With --neuron-sweep: settings, the model lists as collection args, the session plugin."""
    config.addinivalue_line("markers", "neuronsupport: a model of a pytest-neuronsupport sweep")
    if not config.getoption("--neuron-sweep"):
        return
    # Imported only for a sweep: a plain test run pays nothing for the plugin.
    from pytest_neuronsupport.backends import check_backend
    from pytest_neuronsupport.items import SESSION_KEY
    from pytest_neuronsupport.session import SweepSession, is_worker

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
