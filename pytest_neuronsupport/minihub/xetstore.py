"""The mini-hub's Xet content store: where the files of its buckets are, on disk, read and written
by ``hf_xet`` itself through ``local://<folder>`` addresses (hf_xet 1.8's ``LocalClient``, the
store its own tests use), so that the hub needs no Xet server.

hf_xet's local store keeps an index (a redb database beside the xorbs and shards) that one
process at a time may open, and a client holds it for as long as its upload commit or download
group lives. Several clients at once (shards publishing together) therefore never share a
folder: each token the hub hands out names a folder of its own, a *view*.

- A reader's view is a copy of the hub's store, made when its token is asked for: it holds
  every file added before then.
- A writer's view starts empty; the client uploads into it. When its batch names a file, the
  hub reads the bytes back from a copy of that view (the client may hold its index open still,
  but its upload commit has ended, its content committed, before it sends the batch), stores
  them in its own store with its own hf_xet session, and keeps them only if the Xet hash it
  gets is the one the batch claims.

So only the hub writes its store, under its lock; what a batch adds is whole in it before the
batch answers; and a file a client never finished uploading is never in a bucket.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any


class XetStore:
    """The content store under *folder* (``main/``) and the views of it (``views/N``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.main = folder / "main"
        self.main.mkdir(parents=True)
        self._lock = threading.Lock()  # the hub's own use of main/, one at a time
        self._views = 0
        self._writers: list[Path] = []
        self._sizes: dict[str, int] = {}  # Xet hash -> size, of every file in main/
        self._session: Any = None

    def session(self) -> Any:
        """hf_xet's session of the hub's own reads and writes (made on first use)."""
        if self._session is None:
            import hf_xet

            self._session = hf_xet.XetSession()
        return self._session

    def view(self, write: bool) -> Path:
        """A new folder for one client's ``local://`` address: empty for a writer, a copy of
        the store for a reader."""
        with self._lock:
            self._views += 1
            view = self.folder / "views" / str(self._views)
            if write:
                view.mkdir(parents=True)
                self._writers.append(view)
            else:
                shutil.copytree(self.main, view)
        return view

    def sizes(self, hashes: list[str]) -> dict[str, int]:
        """The sizes of the files *hashes* in the store, fetched first from the writers' views
        where clients uploaded them (newest first); those no view holds are left out."""
        with self._lock:
            found = {h: self._sizes[h] for h in hashes if h in self._sizes}
            writers = list(reversed(self._writers))
        for view in writers:
            wanted = [h for h in dict.fromkeys(hashes) if h not in found]
            if not wanted:
                break
            for xet_hash, data in self._read(view, wanted).items():
                if self._store(xet_hash, data):
                    found[xet_hash] = len(data)
        return found

    def _read(self, view: Path, hashes: list[str]) -> dict[str, bytes]:
        """The files *hashes* that *view* holds. Read from a copy of it: its client may hold
        its index open still (a lock of the file, not of its committed content)."""
        import hf_xet

        with self._lock:
            self._views += 1
            copy = self.folder / "reads" / str(self._views)
        shutil.copytree(view, copy)
        found: dict[str, bytes] = {}
        try:
            group = self.session().new_download_stream_group(endpoint=f"local://{copy}")
            for xet_hash in hashes:
                try:
                    data = b"".join(group.download_stream(hf_xet.XetFileInfo(xet_hash)))
                except hf_xet.XetObjectNotFoundError:
                    continue
                if data:  # a file the view does not index reads as nothing
                    found[xet_hash] = data
            group.finish()
        except RuntimeError:  # a view copied while its client wrote it: not this one
            pass
        finally:
            shutil.rmtree(copy, ignore_errors=True)
        return found

    def _store(self, xet_hash: str, data: bytes) -> bool:
        """Put *data* in the store, if its Xet hash is *xet_hash*."""
        import hf_xet

        with self._lock:
            commit = self.session().new_upload_commit(endpoint=f"local://{self.main}")
            with commit:
                handle = commit.start_upload_bytes(data, sha256=hf_xet.SKIP_SHA256)
            if handle.result().xet_info.hash != xet_hash:
                return False
            self._sizes[xet_hash] = len(data)
            return True
