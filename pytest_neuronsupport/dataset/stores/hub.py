"""A results dataset in a Hugging Face Hub dataset repo (``hf://datasets/ORG/NAME``), through
``huggingface_hub`` only, at the endpoint ``HF_ENDPOINT`` names (read when it is used).

What the repo holds is what a reader needs: the pair files of every table (``data/``,
``perf/``, ``train/``) and the dataset card (``README.md``, as ``neuronsupport card`` writes
it), plus the shards' split when a sharded sweep writes one (``shards/``). Never runs,
journals or locks.

**A push loses nothing, whoever pushes at once.** It reads the repo at its head commit,
merges its own pair files into the repo's with the journals' rules (:func:`.merge.merge_file`:
a later ``tested_at`` replaces), writes the card of the result, and makes one commit of the
files whose content changed, with ``parent_commit`` set to the commit it read. When the Hub
refuses it (412: another push came first), it reads the new head and merges again. A push
with nothing new makes no commit. A commit is all or nothing, so a refused push (a token that
cannot write, a missing organization) leaves the repo as it was.

Uploads take the plain LFS path (the files are handed to the client as file objects, which
Xet does not take): the pair files are small, and every Hub-shaped server speaks LFS.
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.dataset.durable import atomic_write_bytes
from pytest_neuronsupport.dataset.files import read_table, upgrade_dataset
from pytest_neuronsupport.dataset.layout import HUB_SCHEME, README, check_relpath, data_files
from pytest_neuronsupport.dataset.merge import merge_file
from pytest_neuronsupport.dataset.tables import TABLES

__all__ = ["DATASETS", "HubDataset", "HubError", "PushSummary", "download_file", "repo_of"]

DATASETS: Final = f"{HUB_SCHEME}datasets/"
SPACES: Final = f"{HUB_SCHEME}spaces/"
_REFUSED: Final = 412  # parent_commit is not the head any more


class HubError(Exception):
    """The Hub refused or could not do what was asked; the message names the repo."""


def repo_of(uri: str) -> str:
    """``ORG/NAME`` of ``hf://datasets/ORG/NAME``.

    Raises:
        ValueError: not a dataset repo's URI (a model's or a space's, or a path inside one).
    """
    if not uri.startswith(DATASETS):
        raise ValueError(
            f"{uri}: results live in a dataset repo, hf://datasets/ORG/NAME (not a model's "
            "hf://ORG/NAME or a space's hf://spaces/ORG/NAME)"
        )
    repo_id = uri.removeprefix(DATASETS).strip("/")
    if len(repo_id.split("/")) != 2 or not all(repo_id.split("/")):
        raise ValueError(f"{uri}: expected hf://datasets/ORG/NAME")
    return repo_id


def _api(token: str | None = None) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)


@contextmanager
def _refusals(where: str, doing: str) -> Iterator[None]:
    """The client's errors as a :class:`HubError` that names ``where`` and says why."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        yield
    except RepositoryNotFoundError:
        raise HubError(
            f"{where}: not found while {doing} (or this token may not see it; set HF_TOKEN)"
        ) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        said = exc.server_message or str(exc).strip().splitlines()[0]
        if status == 401:
            why = "needs a token that may write there (HF_TOKEN, or `hf auth login`)"
        elif status == 403:
            why = "this token may not write there (a read token, or not a member of the org)"
        else:
            why = f"the Hub answered {status}"
        raise HubError(f"{where}: {doing}: {why}: {said}") from None
    except ValueError as exc:  # the client's own checks
        raise HubError(f"{where}: {doing}: {exc}") from None
    except Exception as exc:  # the endpoint down or unreachable: the transport's errors
        if isinstance(exc, (HubError, _Refused)):
            raise
        raise HubError(f"{where}: {doing}: {type(exc).__name__}: {exc}") from None


class _NoXetNotice(logging.Filter):
    """Drops the client's notice that file objects take the LFS path: it is meant."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "binary IO buffer" not in record.getMessage()


@contextmanager
def _plain_lfs() -> Iterator[None]:
    notice = _NoXetNotice()
    logger = logging.getLogger("huggingface_hub._commit_api")
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


@dataclass
class PushSummary:
    """What :meth:`HubDataset.push` did."""

    uri: str
    #: The commit made, or None when there was nothing new.
    commit: str | None = None
    #: The commit the repo is at afterwards.
    head: str = ""
    #: Each pair file committed → (rows new, rows replaced); README.md → (0, 0).
    changed: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Commits refused because another push came first, then merged again.
    retried: int = 0

    def lines(self) -> list[str]:
        if self.commit is None:
            return [f"{self.uri}: nothing new to push (at {self.head[:12]})"]
        return [
            f"{self.uri}: commit {self.commit[:12]}: {message_of(self.changed)}",
            *(f"  {path}: {new} new, {replaced} replaced" for path, (new, replaced) in self.rows),
        ]

    @property
    def rows(self) -> list[tuple[str, tuple[int, int]]]:
        return [(p, c) for p, c in self.changed.items() if p != README]


def message_of(changed: dict[str, tuple[int, int]]) -> str:
    """A push's commit message: its pairs and their counts."""
    pairs = [
        f"{path.removesuffix('.parquet')} (+{new} ~{replaced})"
        for path, (new, replaced) in changed.items()
        if path != README
    ]
    new = sum(n for p, (n, _) in changed.items() if p != README)
    replaced = sum(r for p, (_, r) in changed.items() if p != README)
    if not pairs:
        return "neuronsupport push: the dataset card"
    return f"neuronsupport push: {new} new, {replaced} replaced row(s) in " + ", ".join(pairs)


def _keyed(path: Path | None, table: Any) -> dict[str, str]:
    """Each key's row of a pair file, as comparable text."""
    if path is None:
        return {}
    rows = read_table(path, keep_extra=True, table=table).to_pylist()
    return {
        json.dumps(table.key_of(row), default=str): json.dumps(row, default=str, sort_keys=True)
        for row in rows
    }


class HubDataset:
    """One dataset repo of the Hub: ``hf://datasets/ORG/NAME``."""

    def __init__(self, uri: str, token: str | None = None) -> None:
        self.repo_id = repo_of(uri)
        self.uri = f"{DATASETS}{self.repo_id}"
        self.api = _api(token)

    # --- reading --------------------------------------------------------------------------------

    def head(self) -> str:
        """The commit ``main`` is at."""
        with _refusals(self.uri, "reading it"):
            return str(self.api.dataset_info(self.repo_id).sha)

    def files(self, revision: str) -> list[str]:
        """The pair files of every table, and the card, at ``revision``."""
        with _refusals(self.uri, "listing its files"):
            names = self.api.list_repo_files(self.repo_id, repo_type="dataset", revision=revision)
        kept = []
        for name in names:
            folder, _, relpath = name.partition("/")
            if name == README:
                kept.append(name)
            elif any(t.folder == folder for t in TABLES.values()):
                try:
                    check_relpath(relpath)
                except ValueError:
                    continue
                kept.append(name)
        return sorted(kept)

    def download(self, folder: Path, revision: str) -> list[str]:
        """Copy the repo's pair files and card at ``revision`` into ``folder``; return them."""

        names = self.files(revision)
        for name in names:
            atomic_write_bytes(folder / name, self.fetch(name, revision).read_bytes())
        return names

    def fetch(self, name: str, revision: str) -> Path:
        """The repo's file ``name`` at ``revision``, in the client's cache."""
        from huggingface_hub import hf_hub_download

        with _refusals(self.uri, f"downloading {name}"):
            return Path(
                hf_hub_download(
                    self.repo_id,
                    name,
                    repo_type="dataset",
                    revision=revision,
                    endpoint=self.api.endpoint,
                    token=self.api.token,
                )
            )

    def pull(self, folder: Path) -> int:
        """Merge the repo's rows into the local results ``folder`` (rows there that are newer
        stay); return the pair files read. A repo that does not exist yet has none."""
        from huggingface_hub.errors import RepositoryNotFoundError

        try:
            head = str(self.api.dataset_info(self.repo_id).sha)
        except RepositoryNotFoundError:
            return 0
        except Exception:
            head = self.head()  # the error, in words
        with tempfile.TemporaryDirectory(prefix="neuronsupport-pull-") as tmp:
            names = [n for n in self.download(Path(tmp), head) if n != README]
            for name in names:
                table = self._table(name)
                merge_file(Path(tmp) / name, folder / name, table)
        return len(names)

    @staticmethod
    def _table(name: str) -> Any:
        folder = name.partition("/")[0]
        return next(t for t in TABLES.values() if t.folder == folder)

    # --- writing --------------------------------------------------------------------------------

    def create(self) -> None:
        """Make the repo unless it exists (asked first: a token that may not create repos
        then fails at the commit, with the Hub's reason)."""
        from huggingface_hub.errors import RepositoryNotFoundError

        with _refusals(self.uri, "creating it"):
            try:
                self.api.dataset_info(self.repo_id)
            except RepositoryNotFoundError:
                self.api.create_repo(self.repo_id, repo_type="dataset", exist_ok=True)

    def push(self, results: Path, attempts: int = 30, merged: Path | None = None) -> PushSummary:
        """Merge the pair files of ``results`` into the repo, with the card; one commit, or
        none when nothing changed. ``merged``, when given, receives the dataset as pushed (the
        repo's rows and ours)."""
        from huggingface_hub.errors import HfHubHTTPError

        self.create()
        summary = PushSummary(self.uri)
        for attempt in range(attempts):
            head = self.head()
            with tempfile.TemporaryDirectory(prefix="neuronsupport-push-") as tmp:
                ours = self._merged(results, head, Path(tmp))
                summary.head = head
                if not ours:
                    self._keep(Path(tmp) / "merged", merged)
                    return summary
                operations = [
                    self._add(name, (Path(tmp) / "merged" / name).read_bytes()) for name in ours
                ]
                try:
                    with _plain_lfs(), _refusals(self.uri, "committing"):
                        try:
                            info = self.api.create_commit(
                                self.repo_id,
                                operations,
                                commit_message=message_of(ours),
                                commit_description="\n".join(
                                    f"{p}: {n} new, {r} replaced" for p, (n, r) in ours.items()
                                ),
                                repo_type="dataset",
                                parent_commit=head,
                            )
                        except HfHubHTTPError as exc:
                            response = exc.response
                            if response is not None and response.status_code == _REFUSED:
                                raise _Refused from None
                            raise
                except _Refused:
                    summary.retried += 1
                    time.sleep(random.uniform(0.05, 0.3) * min(attempt + 1, 5))
                    continue
                summary.commit = summary.head = str(info.oid)
                summary.changed = ours
                self._keep(Path(tmp) / "merged", merged)
                return summary
        raise HubError(f"{self.uri}: still changing after {attempts} attempts to push")

    @staticmethod
    def _add(name: str, data: bytes) -> Any:
        from huggingface_hub import CommitOperationAdd

        return CommitOperationAdd(name, io.BytesIO(data))

    @staticmethod
    def _keep(folder: Path, merged: Path | None) -> None:
        if merged is not None:
            shutil.rmtree(merged, ignore_errors=True)
            shutil.copytree(folder, merged)

    def _merged(self, results: Path, head: str, tmp: Path) -> dict[str, tuple[int, int]]:
        """The repo at ``head`` in ``tmp/remote``, ours merged into a copy in ``tmp/merged``
        with its card; returns what differs from the repo: file → (rows new, replaced)."""
        from pytest_neuronsupport.views.card import write_card

        remote, merged = tmp / "remote", tmp / "merged"
        remote.mkdir()
        names = self.download(remote, head)
        shutil.copytree(remote, merged, dirs_exist_ok=True)
        (merged / README).unlink(missing_ok=True)
        for table in TABLES.values():
            for path in data_files(results, table.folder):
                name = path.relative_to(results).as_posix()
                merge_file(path, merged / name, table)
        if not any(data_files(merged, t.folder) for t in TABLES.values()):
            raise HubError(f"{self.uri}: nothing to push: no pair files in {results} or the repo")
        upgrade_dataset(merged)
        changed: dict[str, tuple[int, int]] = {}
        for table in TABLES.values():
            for path in data_files(merged, table.folder):
                name = path.relative_to(merged).as_posix()
                before = _keyed(remote / name if name in names else None, table)
                after = _keyed(path, table)
                new = sum(key not in before for key in after)
                replaced = sum(key in before and before[key] != row for key, row in after.items())
                same = name in names and (remote / name).read_bytes() == path.read_bytes()
                if new or replaced or (not same and not _equal(remote / name, path, table)):
                    changed[name] = (new, replaced)
        write_card(merged)
        card = (merged / README).read_bytes()
        if README not in names or (remote / README).read_bytes() != card:
            changed[README] = (0, 0)
        return changed

    def write_once(self, name: str, text: str) -> str:
        """Commit ``name`` unless the repo has it; return its text in the repo either way."""
        from huggingface_hub import CommitOperationAdd
        from huggingface_hub.errors import HfHubHTTPError

        self.create()
        for _ in range(30):
            head = self.head()
            with _refusals(self.uri, "listing its files"):
                present = name in self.api.list_repo_files(
                    self.repo_id, repo_type="dataset", revision=head
                )
            if present:
                return self.fetch(name, head).read_text(encoding="utf-8")
            add = CommitOperationAdd(name, text.encode("utf-8"))
            try:
                with _refusals(self.uri, f"writing {name}"):
                    try:
                        self.api.create_commit(
                            self.repo_id,
                            [add],
                            commit_message=f"neuronsupport: {name}",
                            repo_type="dataset",
                            parent_commit=head,
                        )
                    except HfHubHTTPError as exc:
                        if exc.response is not None and exc.response.status_code == _REFUSED:
                            raise _Refused from None
                        raise
            except _Refused:
                continue
            return text
        raise HubError(f"{self.uri}: still changing after 30 attempts to write {name}")


def _equal(a: Path, b: Path, table: Any) -> bool:
    if not a.is_file():
        return False
    left = read_table(a, keep_extra=True, table=table)
    return bool(left.equals(read_table(b, keep_extra=True, table=table), check_metadata=True))


class _Refused(Exception):
    """The Hub refused a commit: its parent is not the head any more."""


SPACE_CARD: Final = """---
title: Model support
emoji: 📊
colorFrom: blue
colorTo: gray
sdk: static
app_file: index.html
pinned: false
---

The results page of `pytest-neuronsupport`{source}, written by `neuronsupport push --space`.
"""


def push_space(space: str, page: Path, source: str | None = None, token: str | None = None) -> str:
    """Publish the page folder ``page`` (``neuronsupport page``'s ``index.html``) as the
    static Space ``ORG/NAME``, made unless it exists; one commit, none when nothing changed.
    Returns what happened, in words.

    Raises:
        HubError: the Space exists with another SDK, or the Hub refused.
    """
    from huggingface_hub import CommitOperationAdd

    uri = f"{SPACES}{space.strip('/')}"
    if len(space.strip("/").split("/")) != 2:
        raise HubError(f"{uri}: expected ORG/NAME")
    api = _api(token)
    from huggingface_hub.errors import RepositoryNotFoundError

    with _refusals(uri, "creating it"):
        try:
            info = api.space_info(space)
        except RepositoryNotFoundError:
            api.create_repo(space, repo_type="space", space_sdk="static", exist_ok=True)
            info = api.space_info(space)
    if info.sdk != "static":
        raise HubError(f"{uri} is a {info.sdk} Space, not a static one: nothing was written")
    named = f": the dataset {source}" if source else ""
    files = {README: SPACE_CARD.format(source=named).encode("utf-8")}
    for path in sorted(p for p in page.rglob("*") if p.is_file()):
        files[path.relative_to(page).as_posix()] = path.read_bytes()
    operations = [CommitOperationAdd(name, io.BytesIO(data)) for name, data in files.items()]
    with _plain_lfs(), _refusals(uri, "committing"):
        before = api.space_info(space).sha
        commit = api.create_commit(
            space,
            operations,
            commit_message="neuronsupport push: the results page",
            repo_type="space",
        )
    if commit.oid == before:
        return f"{uri}: the page is unchanged (at {str(before)[:12]})"
    return f"{uri}: commit {str(commit.oid)[:12]}: the results page ({', '.join(files)})"


def download_file(uri: str) -> Path:
    """The local path of a file in a dataset repo: ``hf://datasets/ORG/NAME/PATH``.

    Raises:
        HubError: no such repo or file, or the Hub cannot be reached.
        ValueError: not a file of a dataset repo.
    """
    from huggingface_hub import hf_hub_download

    if not uri.startswith(DATASETS):
        raise ValueError(f"{uri}: expected hf://datasets/ORG/NAME/PATH")
    parts = uri.removeprefix(DATASETS).split("/")
    if len(parts) < 3 or not all(parts):
        raise ValueError(f"{uri}: expected hf://datasets/ORG/NAME/PATH")
    repo_id, path = "/".join(parts[:2]), "/".join(parts[2:])
    api = _api()
    with _refusals(uri, "downloading it"):
        return Path(hf_hub_download(repo_id, path, repo_type="dataset", endpoint=api.endpoint))
