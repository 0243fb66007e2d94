"""A results dataset on object storage (``s3://bucket/prefix``), shared by the shards of a sweep.

Object storage has no rename and no lock, so the local dataset's crash-safety rules become
these, on S3's atomic single-object writes and its conditional writes (``If-None-Match: *``
and ``If-Match: <etag>``, which S3 enforces since 2024):

* **Each shard publishes rows as objects of its own**, ``<prefix>/published/<sweep>/<n>.json``
  (the journal's line format), one per row, *before* journaling it locally: a shard killed at
  any moment has published every row it recorded, or the row is lost with its run only.
  Nobody ever rewrites another shard's objects.
* **A merge folds the published rows into the pair files**
  (``<prefix>/data/<compiler>-<version>/<library>-<version>.parquet``): it reads a pair file
  and its ETag, applies the rows with the local merge's rules (the later ``tested_at`` wins,
  so re-applying a row changes nothing), and writes the file back only if its ETag is still
  the one read (``If-Match``; ``If-None-Match: *`` for a new file). Two merges at once: one
  write wins, the other is refused and starts that pair again from the new file. Only then
  are the rows it applied deleted; a merge killed before that leaves them to the next merge,
  which re-applies them harmlessly. A reader sees a whole old or a whole new pair file.
* **The shards' split** is written once with ``If-None-Match: *`` and read by every machine.

A sweep keeps a local copy (``pull``) under its cache: its journal, its local merge, the
skip-unchanged rule and ``--neuron-rerun`` all read it as they read a local dataset. The client
is boto3, which takes its endpoint (``AWS_ENDPOINT_URL``), region and credentials from the
environment like every AWS tool.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pytest_neuronsupport.dataset.durable import atomic_write_bytes
from pytest_neuronsupport.dataset.journal import Journal
from pytest_neuronsupport.dataset.layout import PUBLISHED, SCHEME, check_relpath, is_shared
from pytest_neuronsupport.dataset.merge import merge_journals
from pytest_neuronsupport.dataset.support import SUPPORT
from pytest_neuronsupport.dataset.table import Table, row_from_json, row_to_json
from pytest_neuronsupport.dataset.tables import TABLES, table_named

__all__ = ["SCHEME", "MergeSummary", "SharedResults", "is_shared"]

_PUBLISHED: Final = f"{PUBLISHED}/"
_CONFLICT: Final = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})


@dataclass
class MergeSummary:
    """What :meth:`SharedResults.merge` did."""

    #: ``<folder>/<pair>`` (the table's folder under the dataset) → rows applied
    written: dict[str, int] = field(default_factory=dict)
    retried: int = 0  # conditional writes refused (another merge wrote first)
    problems: list[str] = field(default_factory=list)


class SharedResults:
    """One shared dataset: ``s3://bucket/prefix``."""

    def __init__(self, uri: str, client: Any = None) -> None:
        if not uri.startswith(SCHEME):
            raise ValueError(f"{uri!r} is not an {SCHEME} URI")
        bucket, _, prefix = uri.removeprefix(SCHEME).partition("/")
        if not bucket:
            raise ValueError(f"{uri!r}: no bucket")
        self.uri = uri
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        if client is None:
            import boto3

            client = boto3.client("s3")
        self.s3 = client

    # --- objects -------------------------------------------------------------------------------

    def _keys(self, under: str) -> Iterator[str]:
        pages = self.s3.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix + under):
            for item in page.get("Contents", []):
                yield str(item["Key"])

    def _get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, or None when there is none."""
        try:
            answer = self.s3.get_object(Bucket=self.bucket, Key=key)
        except self.s3.exceptions.NoSuchKey:
            return None
        return answer["Body"].read(), str(answer["ETag"])

    def _put(self, key: str, body: bytes, etag: str | None) -> bool:
        """Write ``key`` if it is still at ``etag`` (None: if it does not exist)."""
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, **condition)
        except self.s3.exceptions.ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _CONFLICT:
                return False
            raise
        return True

    def put_if_absent(self, name: str, text: str) -> str:
        """Write ``<prefix>/<name>`` unless it exists; return the object's text either way."""
        self._put(self.prefix + name, text.encode("utf-8"), None)
        found = self._get(self.prefix + name)
        assert found is not None
        return found[0].decode("utf-8")

    # --- a shard's side ---------------------------------------------------------------------------

    def publish(
        self,
        sweep_id: str,
        number: int,
        pair: str,
        row: dict[str, Any],
        table: Table = SUPPORT,
        *,
        validated: bool = False,
    ) -> None:
        """Publish one recorded row of ``table`` as an object of this sweep's own (a journal
        line: ``table`` named unless it is the support dataset's)."""
        record: dict[str, Any] = {} if table is SUPPORT else {"table": table.name}
        data = dict(row) if validated else row_to_json(row, table)
        record.update(pair=check_relpath(pair), row=data)
        line = json.dumps(record)
        key = f"{self.prefix}{_PUBLISHED}{sweep_id}/{number:08d}.json"
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=line.encode("utf-8"))

    def pull(self, staging: Path) -> int:
        """Copy the shared dataset into ``staging`` (a local results folder): every table's
        pair files, then the rows published but not merged yet, merged locally. Returns the
        files copied."""
        copied = 0
        for table in TABLES.values():
            under = f"{table.folder}/"
            for key in self._keys(under):
                relpath = key.removeprefix(self.prefix + under)
                found = self._get(key)
                if found is None or not relpath.endswith(".parquet"):
                    continue
                atomic_write_bytes(staging / table.folder / check_relpath(relpath), found[0])
                copied += 1
        rows = list(self._published())
        if rows:
            with Journal(staging) as journal:
                for _, table, pair, row in rows:
                    journal.append(pair, row, table, validated=True)
                path = journal.path
            merge_journals(staging, include=[path])
        return copied

    # --- the merge --------------------------------------------------------------------------------

    def _published(self) -> Iterator[tuple[str, Table, str, dict[str, Any]]]:
        """``(key, table, pair, row)`` of every published row still there (the row as JSON)."""
        for key in self._keys(_PUBLISHED):
            found = self._get(key)
            if found is None:
                continue  # merged and deleted since it was listed
            data = json.loads(found[0])
            table = table_named(data.get("table", SUPPORT.name))
            row = row_to_json(row_from_json(data["row"], table), table)
            yield key, table, check_relpath(data["pair"]), row

    def merge(self, attempts: int = 50) -> MergeSummary:
        """Fold every published row into its pair file; delete the rows applied."""
        summary = MergeSummary()
        by_pair: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
        for key, table, pair, row in self._published():
            by_pair.setdefault((table.name, pair), []).append((key, row))
        for (name, pair), entries in sorted(by_pair.items()):
            table = TABLES[name]
            key = f"{self.prefix}{table.folder}/{pair}"
            for _ in range(attempts):
                found = self._get(key)
                current = None if found is None else found[0]
                body = self._applied(table, pair, current, entries)
                if self._put(key, body, None if found is None else found[1]):
                    break
                summary.retried += 1  # another merge wrote this pair first: start again
            else:
                summary.problems.append(f"{key}: still changing after {attempts} attempts")
                continue
            summary.written[f"{table.folder}/{pair}"] = len(entries)
            for start in range(0, len(entries), 1000):
                chunk = [{"Key": k} for k, _ in entries[start : start + 1000]]
                self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk})
        return summary

    @staticmethod
    def _applied(
        table: Table, pair: str, current: bytes | None, entries: list[tuple[str, Any]]
    ) -> bytes:
        """The pair file with ``entries`` applied, by the local merge's own rules."""
        with tempfile.TemporaryDirectory(prefix="neuronsupport-merge-") as folder:
            results = Path(folder)
            target = results / table.folder / pair
            target.parent.mkdir(parents=True)
            if current is not None:
                target.write_bytes(current)
            with Journal(results) as journal:
                for _, row in entries:
                    journal.append(pair, row, table, validated=True)
                path = journal.path
            report = merge_journals(results, include=[path])
            if not report.ok:
                raise RuntimeError(f"merging into {pair} failed: {report}")
            return target.read_bytes()
