"""Where source rows come from: the Hugging Face Hub, a local mirror of it, or an original
release archive (a URL, a local archive file, or its unpacked directory).

Only this package touches the network.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, atomic_path
from workflow_scripts.progress import progress
from workflow_scripts.spec import paths
from workflow_scripts.spec.basics import InputError, is_url, repo_path
from workflow_scripts.spec.data_settings import DataOptions

Row = dict[str, Any]
# Shared by every experiment: an archive is the same whichever config asked for it.
DOWNLOAD_CACHE = Path(paths.shared_cache("downloads"))


# The Hub's Parquet export of a repository: one folder per config, one per split inside it.
PARQUET_EXPORT = "refs/convert/parquet"


def jsonl_records(file: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) of every non-blank line of a JSON Lines file; a line that is not JSON
    stops the read, naming the file and line."""
    with file.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{file}, line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"corrupt data file {where}: not JSON ({err})") from None
            yield where, record


class Source:
    """Where Hub-schema rows come from: the Hub itself or a local mirror directory.

    From the Hub, every read is of one commit: the revision resolved once and kept in the
    experiment's lock (``workflow_scripts.revisions``)."""

    def __init__(self, kind: str, path: str, revision: str = "main", local_root: str | None = None):
        if kind not in ("hub", "local"):
            raise InputError(f"data.source must be 'hub' or 'local', got {kind!r}")
        self.kind, self.path, self.revision = kind, path, revision
        self.local_root = Path(local_root) if local_root else None
        self._commit: str | None = None

    def resolved_sha(self) -> str | None:
        """The commit the Hub revision resolves to (None for a local mirror)."""
        if self.kind != "hub":
            return None
        if self._commit is None:
            from workflow_scripts.revisions import HubRepo, locked_commit

            commit = locked_commit(HubRepo("dataset", self.path, self.revision))
            self._refuse_script_only(commit)
            self._commit = commit
        return self._commit

    def _refuse_script_only(self, commit: str) -> None:
        """A repository whose revision holds a loading script (``<name>.py``) cannot be read by
        datasets >= 4, which refuses it; say so with the fix instead of the library's error."""
        from huggingface_hub import HfApi

        files = [s.rfilename for s in HfApi().dataset_info(self.path, revision=commit).siblings or []]
        script = f"{self.path.rsplit('/', 1)[-1]}.py"
        if script in files:
            raise InputError(
                f"Hub dataset {self.path} at revision {self.revision!r} holds a loading script ({script}), "
                f"which the datasets library no longer runs. Read the Hub's Parquet export of it instead: set "
                f"the task's hub.revision (or options.<source>_revision) to {PARQUET_EXPORT!r}, or point the "
                f"path at a Parquet copy with the same columns"
            )

    def _selection(self, name: str | None) -> dict[str, Any]:
        """How load_dataset names a config: by name, or in the Parquet export by its folder."""
        if self.revision == PARQUET_EXPORT:
            return {"data_dir": name or "default"}
        return {"name": name}

    def _local_file(self, name: str | None, split: str) -> Path:
        file = self.local_root / self.path / (name or "default") / f"{split}.jsonl"
        if not file.is_file():
            raise InputError(f"missing data file {file} (task source {self.path}, config {name}, split {split})")
        return file

    def num_rows(self, name: str | None, split: str) -> int:
        if self.kind == "local":
            with self._local_file(name, split).open(encoding="utf-8") as f:
                return sum(1 for line in f if line.strip())
        import datasets

        builder = datasets.load_dataset_builder(self.path, revision=self.resolved_sha(), **self._selection(name))
        if builder.info.splits is None or split not in builder.info.splits:
            # A repository without recorded split sizes: count them (download and prepare).
            builder.download_and_prepare()
        return builder.info.splits[split].num_examples

    def rows(self, name: str | None, split: str, shuffle_seed: int | None = None) -> Iterator[Row]:
        """Rows in stored order, or (``shuffle_seed``) in a seeded shuffled order; with a
        seed the Hub is streamed, so a corpus is never downloaded whole."""
        if self.kind == "local":
            file = self._local_file(name, split)
            rows = [record for _, record in jsonl_records(file)]
            if shuffle_seed is not None:
                random.Random(shuffle_seed).shuffle(rows)
            yield from rows
            return
        import datasets  # imported here: only download jobs need it

        where = {"revision": self.resolved_sha(), **self._selection(name)}
        if shuffle_seed is None:
            yield from datasets.load_dataset(self.path, split=split, **where)
        else:
            stream = datasets.load_dataset(self.path, split=split, streaming=True, **where)
            yield from stream.shuffle(seed=shuffle_seed, buffer_size=10_000)


def extra_source(src: Source, opts: DataOptions, task: str, name: str) -> Source:
    """The further Hub dataset ``name`` a task's converter reads some languages from
    (``Task.hub_sources``): ``options.<name>_path`` (default: the task entry's Hub id) at
    ``options.<name>_revision``, from the Hub or the same local mirror as the task's own."""
    from workflow_scripts.spec.tasks import get_task

    path, revision = opts.hub_source(name)
    return Source(
        src.kind,
        path or get_task(task).hub_source(name).path,
        revision or "main",
        str(src.local_root) if src.local_root else None,
    )


def fetch_archive(location: str, name: str | None = None, cache_dir: str | Path = DOWNLOAD_CACHE) -> Path:
    """A local path for a release archive or directory: ``location`` itself when local, else
    downloaded once into ``cache_dir`` (atomically: an interrupted download leaves nothing)."""
    if not is_url(location):
        path = repo_path(location)
        if not path.exists():
            raise InputError(f"release archive or directory {path} does not exist")
        return path
    import fcntl

    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / (name or location.rstrip("/").rsplit("/", 1)[-1])
    # One download however many jobs (e.g. the train, dev and test splits) ask at once.
    with (cache / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            import urllib.request

            LOG.info("downloading %s -> %s", location, target)
            with atomic_path(target) as tmp, urllib.request.urlopen(location) as response:
                total = int(response.headers.get("Content-Length") or 0) or None
                with (
                    tmp.open("wb") as out,
                    progress(total=total, desc=f"downloading {target.name}", unit="B", unit_scale=True) as bar,
                ):
                    while chunk := response.read(1 << 20):
                        out.write(chunk)
                        bar.update(len(chunk))
    return target


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
