"""Hub revisions resolved to commits, and the lock that keeps them.

A config names a revision (``main``, a tag, ``refs/convert/parquet`` or a commit); the first
job that reads a Hub repository resolves it to the commit it names today and records that
commit in the experiment's lock file (``results/<experiment>/hub.lock.json``). Every later
read of the same repository and revision reads the locked commit, so a rerun a month later
trains on the same data and weights:

- a revision that now names another commit (a changed upstream) stops the job, naming the
  repository, the revision and both commits;
- a config that reads a locked repository at a revision the lock does not hold stops at
  config check (:func:`lock_disagreements`), before any job runs;
- without the Hub (an offline node) the locked commit is read from the local cache.

The lock is JSON, ``{"<type>s/<repo id>": {"<revision>": "<commit>"}}``, small enough to
read and edit: deleting an entry re-locks it on the next run. Jobs find it through
:data:`LOCK_ENV`, which the Snakefile exports. Only :func:`resolve` touches the network.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from workflow_scripts.spec.basics import InputError

LOCK_ENV = "XSTILTS_HUB_LOCK"
LOCK_FILE = "hub.lock.json"
# The Hub names a commit by its full 40-character hash.
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class RevisionError(InputError):
    """A Hub repository or revision that cannot be read as the config asks."""


class HubUnreachable(RevisionError):
    """No answer from the Hub endpoint (offline, or HF_ENDPOINT wrong)."""


@dataclass(frozen=True)
class HubRepo:
    """One Hub repository a config reads, at one revision; ``key`` names the config key."""

    repo_type: str
    repo_id: str
    revision: str
    key: str = ""

    @property
    def lock_key(self) -> str:
        return f"{self.repo_type}s/{self.repo_id}"

    def __str__(self) -> str:
        return f"{self.repo_type} {self.repo_id}@{self.revision}"


def is_commit(revision: str) -> bool:
    return bool(_COMMIT.match(revision))


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def resolve(repo: HubRepo) -> str:
    """The commit ``repo.revision`` names on the Hub now.

    A ref outside branches and tags (``refs/convert/parquet``, ``refs/pr/N``) is looked up in
    the repository's list of refs: it is one path segment with slashes, which some
    Hub-compatible servers cannot route as a revision, while every server lists refs."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    api = HfApi()
    try:
        if repo.revision.startswith("refs/") and not repo.revision.startswith("refs/heads/"):
            refs = api.list_repo_refs(repo.repo_id, repo_type=repo.repo_type, include_pull_requests=True)
            known = [*refs.branches, *refs.converts, *refs.tags, *(refs.pull_requests or [])]
            for ref in known:
                if ref.ref == repo.revision:
                    return ref.target_commit
            raise RevisionError(
                f"Hub {repo.repo_type} {repo.repo_id} has no ref {repo.revision!r} "
                f"(it has {', '.join(sorted(r.ref for r in known)) or 'none'}){_where(repo)}"
            )
        return api.repo_info(repo.repo_id, repo_type=repo.repo_type, revision=repo.revision).sha
    except RevisionNotFoundError:
        raise RevisionError(
            f"Hub {repo.repo_type} {repo.repo_id} has no revision {repo.revision!r}{_where(repo)}"
        ) from None
    except RepositoryNotFoundError:
        raise RevisionError(
            f"Hub {repo.repo_type} {repo.repo_id} not found at {endpoint()} (private, gated "
            f"without a token, or misspelt){_where(repo)}"
        ) from None
    except _connection_errors() as err:
        raise HubUnreachable(f"cannot reach the Hub at {endpoint()} for {repo}: {err}") from None
    except HfHubHTTPError as err:
        raise RevisionError(f"Hub {repo.repo_type} {repo.repo_id}@{repo.revision}: {err}{_where(repo)}") from None


def _connection_errors() -> tuple[type[BaseException], ...]:
    """What the Hub client raises when no server answers: its HTTP library's errors (httpx2
    for huggingface_hub 2, httpx before), and the offline mode's refusal."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    found: list[type[BaseException]] = [OfflineModeIsEnabled]
    for name in ("httpx2", "httpx"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        found += [module.ConnectError, module.TimeoutException]
    return tuple(found)


def _where(repo: HubRepo) -> str:
    return f" (config key {repo.key})" if repo.key else ""


def lock_path() -> Path | None:
    """The lock file jobs of this run share (None outside a workflow run: no lock)."""
    value = os.environ.get(LOCK_ENV)
    return Path(value) if value else None


def read_lock(path: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise RevisionError(f"lock file {path} is not valid JSON ({err}); fix it or delete it to re-lock") from None
    if not isinstance(entries, dict) or not all(
        isinstance(v, dict) and all(isinstance(c, str) and is_commit(c) for c in v.values()) for v in entries.values()
    ):
        raise RevisionError(f'lock file {path}: expected {{"<type>s/<repo>": {{"<revision>": "<commit>"}}}}')
    return entries


@contextmanager
def _held(path: Path) -> Iterator[dict[str, dict[str, str]]]:
    """The lock's entries, held against other jobs; written back (atomically) if changed."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / f".{path.name}.flock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        entries = read_lock(path)
        before = json.dumps(entries, sort_keys=True)
        yield entries
        entries = {key: pinned for key, pinned in entries.items() if pinned}
        if json.dumps(entries, sort_keys=True) != before:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps(entries, sort_keys=True, indent=1) + "\n", encoding="utf-8")
            os.replace(tmp, path)


def locked_commit(repo: HubRepo, lock: str | os.PathLike[str] | None = None) -> str:
    """The commit to read ``repo`` at: the lock's, checked against the Hub; else the Hub's,
    recorded in the lock."""
    path = Path(lock) if lock is not None else lock_path()
    try:
        current: str | None = resolve(repo)
    except HubUnreachable:
        current = None
    if path is None:
        if current is None:
            raise HubUnreachable(f"cannot reach the Hub at {endpoint()} for {repo}, and no lock file names its commit")
        return current
    with _held(path) as entries:
        pinned = entries.setdefault(repo.lock_key, {})
        if repo.revision in pinned:
            if current is not None and current != pinned[repo.revision]:
                raise RevisionError(
                    f"Hub {repo.repo_type} {repo.repo_id} changed upstream: revision {repo.revision!r} is commit "
                    f"{current} now, {path} locked it at {pinned[repo.revision]} when this experiment first read it. "
                    f"To keep the results comparable, pin the locked commit in the config "
                    f"(revision: {pinned[repo.revision]}); to move on, delete the entry {repo.lock_key!r} from "
                    f"{path} and rerun what reads it"
                )
            return pinned[repo.revision]
        if current is None:
            raise HubUnreachable(f"cannot reach the Hub at {endpoint()} for {repo}, and {path} holds no commit for it")
        pinned[repo.revision] = current
        return current


def lock_disagreements(repos: Iterable[HubRepo], lock: str | os.PathLike[str]) -> list[str]:
    """Where the config and the lock disagree: a repository the lock holds at revisions the
    config no longer reads, while the config reads it at one the lock lacks."""
    entries = read_lock(lock)
    wanted: dict[str, list[HubRepo]] = {}
    for repo in repos:
        wanted.setdefault(repo.lock_key, []).append(repo)
    problems = []
    for key, asked in sorted(wanted.items()):
        pinned = entries.get(key) or {}
        revisions = {r.revision for r in asked}
        stale = sorted(set(pinned) - revisions)
        for repo in asked:
            if repo.revision not in pinned and stale:
                locked = ", ".join(f"{rev!r} = {pinned[rev]}" for rev in stale)
                problems.append(
                    f"config key {repo.key}: reads {repo.repo_type} {repo.repo_id} at revision {repo.revision!r}, "
                    f"but {lock} locks it at {locked}, which this experiment's results were computed on. "
                    f"Put the revision back, or delete the entry {key!r} from {lock} (and rerun what reads it)"
                )
    return problems
