"""Durable file operations: fsyncs, flocks, atomic replacement, cleaning up temp files.

A parquet file is rewritten only under its lock (the hidden ``.<file>.lock`` beside it) by
writing a hidden temp file ``.<file>.<16 hex digits>.tmp``, fsyncing it and ``os.replace``-ing
it over the file, so the file is always complete, old or new, whenever a writer is killed.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Final

import filelock
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "LOCK_TIMEOUT_S",
    "atomic_write",
    "data_lock",
    "file_lock",
    "fsync_dir",
    "makedirs_durable",
    "remove_temps",
    "sweep_temps",
]

LOCK_TIMEOUT_S: Final = 600.0
"""How long a writer waits for the lock of a parquet file."""

_TEMP_NAME: Final = re.compile(r"\.(?P<target>.+)\.[0-9a-f]{16}\.tmp")


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (creations, renames, deletions) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durable(path: Path) -> None:
    """``mkdir -p`` that fsyncs the parent of every directory it created."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:  # pragma: no cover - filesystem root
            break
        current = current.parent
    path.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        fsync_dir(created.parent)


def file_lock(path: Path, timeout: float) -> filelock.BaseFileLock:
    """An flock on ``path`` (created if need be), not taken yet.

    flock only: a soft lock outlives a killed process, which would make a dead journal look
    alive forever. ``thread_local=False``: the hold belongs to the object, whichever thread.
    """
    return filelock.FileLock(path, timeout=timeout, thread_local=False, fallback_to_soft=False)


def data_lock(target: Path, timeout: float = LOCK_TIMEOUT_S) -> filelock.BaseFileLock:
    """The lock serialising rewrites of one parquet file: hidden ``.<file>.lock`` beside it."""
    return file_lock(target.parent / f".{target.name}.lock", timeout)


def remove_temps(target: Path) -> None:
    """Delete temp files left by killed writers of ``target`` (call with its lock held)."""
    for temp in target.parent.glob(f".{target.name}.*.tmp"):
        match = _TEMP_NAME.fullmatch(temp.name)
        if match is not None and match["target"] == target.name:
            with suppress(FileNotFoundError):
                temp.unlink()


def sweep_temps(data_dir: Path) -> None:
    """Delete every orphaned temp file under ``data_dir`` whose target is not being written."""
    if not data_dir.is_dir():
        return
    for folder in sorted(data_dir.iterdir()):
        if not folder.is_dir():
            continue
        targets = {
            match["target"]
            for temp in folder.glob(".*.tmp")
            if (match := _TEMP_NAME.fullmatch(temp.name)) is not None
        }
        for name in sorted(targets):
            lock = data_lock(folder / name, timeout=0)
            try:
                lock.acquire()
            except filelock.Timeout:
                continue  # being written right now; its writer owns those temps
            try:
                remove_temps(folder / name)
            finally:
                lock.release()


def atomic_write(target: Path, table: pa.Table) -> None:
    """Write ``table`` to ``target`` so that ``target`` is always old-complete or new-complete.

    Call with the target's lock held (:func:`data_lock`)."""
    replaced(target, lambda temp: pq.write_table(table, str(temp)))


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` so that a reader sees the old file or the new one, never a
    part. Creates the folder."""
    target.parent.mkdir(parents=True, exist_ok=True)
    replaced(target, lambda temp: temp.write_bytes(data))


def replaced(target: Path, write: Callable[[Path], object]) -> None:
    """The crash-safe write, once: ``write`` a hidden temp file beside ``target``
    (``.<name>.<16 hex digits>.tmp``), fsync it, rename it over ``target``, fsync the folder;
    the temp file is deleted if any of it fails."""
    temp = target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"
    try:
        write(temp)
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        with suppress(OSError):
            temp.unlink()
        raise
    fsync_dir(target.parent)


def atomic_write_text(target: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8."""
    atomic_write_bytes(target, text.encode("utf-8"))


def write_once(target: Path, text: str) -> str:
    """Write ``target`` unless it exists (atomically: a complete file appears, or nothing, and
    of two writers at once the first wins); return the file's text either way."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        temp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
        temp.write_text(text, encoding="utf-8")
        try:
            os.link(temp, target)  # fails if another writer got there first
        except FileExistsError:
            pass
        finally:
            temp.unlink()
    return target.read_text(encoding="utf-8")
