"""One results store, chosen by the ``--neuron-results`` URI, as pytest-benchmark chooses its
storage: a folder (:class:`FolderResults`), or a dataset on object storage shared by the shards
of a sweep, ``s3://bucket/prefix`` (:class:`ObjectStoreResults`), or a Hugging Face Hub dataset
repo, ``hf://datasets/ORG/NAME`` (:class:`HubResults`).

Every store has a local folder the sweep works in (:attr:`Results.folder`): its journal, runs
and merges happen there, and skip-unchanged reads it. A store then says what it does beyond
that folder: :meth:`~Results.pull` (bring the shared rows in before the sweep), ``publish``
(each row, as it is recorded), :meth:`~Results.finish` (fold what was published into the
shared dataset at the end) and :meth:`~Results.write_once` (the shards' split, written once for
every machine). A folder does nothing beyond itself. The session calls the same methods
whatever the store is, and so does every ``neuronsupport`` command that reads results: it asks
the store for a local folder holding its rows as they are now (:meth:`~Results.readable`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_neuronsupport.dataset.durable import atomic_write_bytes, write_once
from pytest_neuronsupport.dataset.layout import is_hub, is_shared, unpublished_dir
from pytest_neuronsupport.dataset.table import Table
from pytest_neuronsupport.dataset.tables import table_named

__all__ = [
    "FolderResults",
    "HubResults",
    "Merged",
    "ObjectStoreResults",
    "Results",
    "ResultsError",
    "local_copy",
    "open_store",
]


class ResultsError(Exception):
    """A results location that cannot be used; the message names it and says why."""


class Results(Protocol):
    """Where a sweep's rows go."""

    #: The location as people name it: a folder's path, or the URI.
    uri: str
    #: The local folder the sweep works in (the folder itself, or a local copy).
    folder: Path

    def pull(self) -> None:
        """Bring the store's rows into :attr:`folder` before the sweep (skip-unchanged and
        ``--neuron-rerun`` read them there). Raises :class:`ResultsError`."""

    def publish(self, sweep_id: str, pair: str, table: Table, row: dict[str, Any]) -> None:
        """Publish a recorded row (validated, in JSON form) beyond the local folder, before it
        is journaled; one that cannot be is kept and tried again by :meth:`finish`."""

    def finish(self) -> list[str]:
        """At the sweep's end, after the local merge: what is left to do beyond the folder;
        returns the problems met (never raises)."""

    def write_once(self, name: str, text: str) -> tuple[str, str]:
        """Write ``name`` (relative to the store's top) unless it exists; return where it is
        and its text either way."""

    def where(self, name: str) -> str:
        """How people name ``name`` (relative to the store's top): a path, or a URI."""

    def merge(self) -> Merged:
        """What ``neuronsupport merge`` does: fold into the store the rows that sweeps left
        on their way to it (a dead sweep's journal, rows shards published)."""

    def readable(self) -> Path:
        """A local folder holding the store's rows as they are now, for a command to read.
        Raises :class:`ResultsError` (naming the store) when the store cannot be read."""


@dataclass
class Merged:
    """What :meth:`Results.merge` did: lines to print, and the problems met."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def merge_folder(folder: Path) -> Merged:
    """A results folder's journals merged into its pair files."""
    from pytest_neuronsupport.dataset.merge import merge_journals

    report = merge_journals(folder)
    problems = [*report.problems, *(f"{path}: {why}" for path, why in report.unreadable)]
    if not report.ok and not problems:
        problems = [
            f"{path}: kept (some rows could not be merged)" for path in report.journals_kept
        ]
    return Merged(
        [f"{path}: {count} row(s) merged" for path, count in report.written.items()], problems
    )


class FolderResults:
    """A results folder: everything happens in it."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.uri = str(self.folder)

    def pull(self) -> None:
        check_folder(self.folder)

    def publish(self, sweep_id: str, pair: str, table: Table, row: dict[str, Any]) -> None:
        return None

    def finish(self) -> list[str]:
        return []

    def write_once(self, name: str, text: str) -> tuple[str, str]:
        return self.where(name), write_once(self.folder / name, text)

    def where(self, name: str) -> str:
        return str(self.folder / name)

    def merge(self) -> Merged:
        return merge_folder(self.folder)

    def readable(self) -> Path:
        return self.folder


class ObjectStoreResults:
    """A dataset on object storage shared by the shards of a sweep
    (:class:`~pytest_neuronsupport.dataset.stores.s3.SharedResults`), through a local copy in the
    cache, one per URI."""

    def __init__(self, uri: str, folder: Path, client: Any = None) -> None:
        from pytest_neuronsupport.dataset.stores.s3 import SharedResults

        self.uri = uri
        self.folder = Path(folder)
        self.shared = SharedResults(uri, client)
        self.published = 0
        #: Rows whose publishing failed, and why: published again by :meth:`finish`.
        self.unpublished: list[tuple[str, str, Table, dict[str, Any], str]] = []

    @property
    def endpoint(self) -> str:
        """The object store's endpoint the client talks to (``AWS_ENDPOINT_URL``, or AWS's)."""
        return str(getattr(getattr(self.shared.s3, "meta", None), "endpoint_url", "") or "AWS")

    def pull(self) -> None:
        """The shared dataset into the local copy; then the rows an earlier sweep could not
        publish (:func:`~pytest_neuronsupport.dataset.layout.unpublished_dir`) are published."""
        check_folder(self.folder)
        try:
            self.shared.pull(self.folder)
        except Exception as exc:  # boto3's and botocore's errors: the store down, say
            raise ResultsError(
                f"cannot read {self.uri} (the object store at {self.endpoint}): "
                f"{type(exc).__name__}: {exc}"
            ) from None
        for path in sorted(unpublished_dir(self.folder).glob("*.jsonl")):
            records = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
            before = len(self.unpublished)
            for record in records:
                table = table_named(record["table"])
                self.publish(record["sweep"], record["pair"], table, record["row"])
            if len(self.unpublished) == before:  # all published: the merge at the end folds them
                path.unlink()
            else:
                del self.unpublished[before:]  # still kept in the file; said at the end

    def publish(self, sweep_id: str, pair: str, table: Table, row: dict[str, Any]) -> None:
        number, self.published = self.published, self.published + 1
        try:
            self.shared.publish(sweep_id, number, pair, row, table, validated=True)
        except Exception as exc:  # the store down: the row is journaled; retried at the end
            self.unpublished.append((sweep_id, pair, table, row, f"{type(exc).__name__}: {exc}"))

    def finish(self) -> list[str]:
        """Publish what could not be, then fold every published row into the shared pair
        files (conditional writes: see :mod:`~pytest_neuronsupport.dataset.stores.s3`)."""
        failed, self.unpublished = self.unpublished, []
        for sweep_id, pair, table, row, _ in failed:
            self.publish(sweep_id, pair, table, row)
        problems = self.keep_unpublished()
        try:
            summary = self.shared.merge()
        except Exception as exc:
            return [*problems, f"merging into {self.uri}: {type(exc).__name__}: {exc}"]
        return [*problems, *summary.problems]

    def keep_unpublished(self) -> list[str]:
        """Write the rows still unpublished into the local copy's ``unpublished`` folder (a
        later pull of the same dataset publishes them) and say where: one problem line."""
        if not self.unpublished:
            return []
        sweep_id, why = self.unpublished[0][0], self.unpublished[0][4]
        path = unpublished_dir(self.folder) / f"{sweep_id}.jsonl"
        lines = [
            json.dumps({"sweep": s, "table": t.name, "pair": p, "row": r})
            for s, p, t, r, _ in self.unpublished
        ]
        old = path.read_text("utf-8") if path.exists() else ""
        atomic_write_bytes(path, (old + "".join(f"{line}\n" for line in lines)).encode())
        models = ", ".join(sorted({r["model_id"] for _, _, _, r, _ in self.unpublished}))
        return [
            f"{len(lines)} row(s) not published to {self.uri}, the object store at "
            f"{self.endpoint} failing ({why}): kept in {path} ({models}); the next sweep "
            f"with --neuron-results {self.uri} publishes them"
        ]

    def write_once(self, name: str, text: str) -> tuple[str, str]:
        return self.where(name), self.shared.put_if_absent(name, text)

    def where(self, name: str) -> str:
        return f"{self.uri.rstrip('/')}/{name}"

    def merge(self) -> Merged:
        """Every row the shards published, folded into the shared pair files."""
        try:
            summary = self.shared.merge()
        except Exception as exc:  # boto3's and botocore's errors
            return Merged(problems=[f"merging into {self.uri}: {type(exc).__name__}: {exc}"])
        lines = [f"{self.where(path)}: {n} row(s) merged" for path, n in summary.written.items()]
        lines.append(
            f"{sum(summary.written.values())} row(s) merged; {summary.retried} write(s) retried"
        )
        return Merged(lines, summary.problems)

    def readable(self) -> Path:
        """The local copy, pulled (:meth:`pull`, as a sweep starts)."""
        self.pull()
        return self.folder


class HubResults:
    """A dataset repo on the Hugging Face Hub (:class:`~pytest_neuronsupport.dataset.stores.hub.
    HubDataset`), through a local copy in the cache, one per URI. Its rows are pulled (merged
    into the copy) before the sweep and pushed (merged into the repo, one commit) at its end:
    each shard pushes its own, and concurrent pushes lose nothing. A row is not published
    one by one (each would be a commit); a shard that dies before its end keeps its rows in
    the local copy's journal, which ``neuronsupport merge --results hf://...`` pushes."""

    def __init__(self, uri: str, folder: Path) -> None:
        from pytest_neuronsupport.dataset.stores.hub import HubDataset

        self.dataset = HubDataset(uri)
        self.uri = self.dataset.uri
        self.folder = Path(folder)

    def pull(self) -> None:
        from pytest_neuronsupport.dataset.stores.hub import HubError

        check_folder(self.folder)
        try:
            self.dataset.pull(self.folder)
        except HubError as exc:
            raise ResultsError(str(exc)) from None

    def publish(self, sweep_id: str, pair: str, table: Table, row: dict[str, Any]) -> None:
        return None

    def finish(self) -> list[str]:
        from pytest_neuronsupport.dataset.stores.hub import HubError

        try:
            self.dataset.push(self.folder)
        except HubError as exc:
            return [
                f"{exc}; the rows are in the local copy {self.folder}: "
                f"`neuronsupport merge --results {self.uri}` pushes them"
            ]
        return []

    def write_once(self, name: str, text: str) -> tuple[str, str]:
        from pytest_neuronsupport.dataset.stores.hub import HubError

        try:
            return self.where(name), self.dataset.write_once(name, text)
        except HubError as exc:
            raise ResultsError(str(exc)) from None

    def where(self, name: str) -> str:
        return f"{self.uri}/{name}"

    def merge(self) -> Merged:
        """The local copy a sweep into the repo left on this machine: its journals merged,
        then pushed."""
        from pytest_neuronsupport.dataset.stores.hub import HubError

        if not self.folder.is_dir():
            return Merged([f"no local copy of {self.uri} here ({self.folder}): nothing to merge"])
        merged = merge_folder(self.folder)
        try:
            merged.lines += self.dataset.push(self.folder).lines()
        except HubError as exc:
            merged.problems.append(str(exc))
        return merged

    def readable(self) -> Path:
        """The repo's files at its head, in a temporary folder (removed at exit): what the
        repo holds, not the local copy (which may hold rows a dead shard did not push)."""
        import atexit
        import shutil
        import tempfile

        from pytest_neuronsupport.dataset.stores.hub import HubError

        folder = Path(tempfile.mkdtemp(prefix="neuronsupport-hub-"))
        atexit.register(shutil.rmtree, folder, True)
        try:
            self.dataset.download(folder, self.dataset.head())
        except HubError as exc:
            raise ResultsError(str(exc)) from None
        return folder


def check_folder(folder: Path) -> None:
    """Make a folder the sweep writes (the results, the cache, the leases), or say why it
    cannot be used.

    Raises:
        ResultsError: it is a file, or it cannot be created or written.
    """
    if folder.exists() and not folder.is_dir():
        raise ResultsError(f"{folder} is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".neuronsupport-probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise ResultsError(f"{folder} cannot be written: {exc.strerror or exc}") from None


def open_store(uri: str | Path, cache: Path) -> Results:
    """The results store a URI names, as pytest-benchmark's ``load_storage(uri)``: one call,
    used by the sweep (``--neuron-results``) and by every ``neuronsupport`` command alike.

    A folder's path is that folder (:class:`FolderResults`); ``s3://bucket/prefix``
    (:class:`ObjectStoreResults`) and ``hf://datasets/ORG/NAME`` (:class:`HubResults`) are
    worked on through their local copy in ``cache`` (:func:`local_copy`).

    Raises:
        ResultsError: an ``s3://`` URI without boto3 installed, a URI without a bucket, an
            ``hf://`` URI that is not a dataset repo's.
    """
    text = str(uri)
    if not is_shared(text):
        return FolderResults(Path(uri))
    folder = local_copy(cache, text)
    if is_hub(text):
        try:
            return HubResults(text, folder)
        except ValueError as exc:
            raise ResultsError(str(exc)) from None
    if importlib.util.find_spec("boto3") is None:
        raise ResultsError(f"{text} needs boto3: pip install 'pytest-neuronsupport[s3]'")
    try:
        return ObjectStoreResults(text, folder)
    except ValueError as exc:
        raise ResultsError(str(exc)) from None


def local_copy(cache: Path, uri: str) -> Path:
    """The local copy a sweep or a command works on for the shared dataset ``uri``: one per
    URI, in the cache."""
    return cache / "shared" / hashlib.sha256(uri.encode()).hexdigest()[:16]
