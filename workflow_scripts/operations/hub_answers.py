"""What the Hub answered for one repository the preflight checks: a commit, or why not.

A typo'd Hub id passes the dry run (nothing is downloaded at parse time), so the preflight
is where it is found; offline it must not read as a missing repository, nor a missing
repository as a network problem. :func:`classify` sorts the Hub client's exceptions
(``huggingface_hub.errors``) into:

- ``not found``: the repository or a file in it does not exist at the endpoint (or is
  private: the Hub answers both with the same 404), named with the closest ids it knows;
- ``no revision``: the repository exists, the branch, tag or commit does not;
- ``gated``: it exists, and this token may not read it;
- ``unreachable``: no answer (connection refused, timeout, offline mode, a file only the
  unreachable Hub could give);
- ``error``: the Hub answered with another HTTP error.

``revisions.resolve`` turns these into its own errors; the client's exception stays their
context (``raise ... from None`` keeps ``__context__``), which is what is classified here.
"""

from __future__ import annotations

from collections.abc import Iterable

from workflow_scripts.revisions import HubRepo, HubUnreachable, RevisionError, endpoint
from workflow_scripts.spec.suggest import close_matches

NOT_FOUND, NO_REVISION, GATED, UNREACHABLE, ERROR = "not found", "no revision", "gated", "unreachable", "error"
# Repositories of one author listed to find a close id: a typo is most often in the name.
LISTED = 1000


def _client_error(err: BaseException) -> BaseException:
    """The Hub client's exception behind one of revisions.py's errors (itself if none)."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, (HfHubHTTPError, OfflineModeIsEnabled, OSError)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return err


def classify(err: BaseException) -> str:
    """One of NOT_FOUND, NO_REVISION, GATED, UNREACHABLE, ERROR for a failed Hub call."""
    from huggingface_hub import errors

    cause = _client_error(err)
    # GatedRepoError subclasses RepositoryNotFoundError, and LocalEntryNotFoundError
    # EntryNotFoundError: the narrower types first.
    if isinstance(cause, errors.GatedRepoError):
        return GATED
    if isinstance(cause, errors.RevisionNotFoundError):
        return NO_REVISION
    if isinstance(cause, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled)):
        return UNREACHABLE
    if isinstance(cause, (errors.RepositoryNotFoundError, errors.EntryNotFoundError)):
        return NOT_FOUND
    if isinstance(err, HubUnreachable) or isinstance(cause, (ConnectionError, TimeoutError)):
        return UNREACHABLE
    if isinstance(err, RevisionError) and not isinstance(cause, errors.HfHubHTTPError):
        return NO_REVISION  # a ref the repository's list of refs lacks (revisions.resolve)
    return ERROR


def similar_ids(repo: HubRepo, known: Iterable[str] = ()) -> list[str]:
    """Ids close to ``repo``'s: among ``known`` (the config's other ids) and the repositories
    the Hub lists for its author; the listing is best effort (an endpoint that lists nothing,
    or fails, leaves only ``known``)."""
    candidates = set(known) - {repo.repo_id}
    author = repo.repo_id.split("/")[0] if "/" in repo.repo_id else None
    if author:
        from huggingface_hub import HfApi

        lister = HfApi().list_datasets if repo.repo_type == "dataset" else HfApi().list_models
        try:
            candidates |= {info.id for _, info in zip(range(LISTED), lister(author=author))}
        except Exception:  # noqa: BLE001 - any failure only loses the suggestion
            pass
    return close_matches(repo.repo_id, sorted(candidates))


# What to do about each kind of failure.
FIXES = {
    NOT_FOUND: "correct the id (or revision) in the config",
    NO_REVISION: "name a branch, tag or commit the repository has",
    GATED: "request access on the Hub, then set HF_TOKEN",
    UNREACHABLE: "run the preflight where the Hub answers, or set HF_ENDPOINT to your Hub mirror",
    ERROR: "check the id and revision in the config, and HF_TOKEN",
}


def explain(repo: HubRepo, err: BaseException, known: Iterable[str] = ()) -> str:
    """The finding's text for a repository that did not resolve."""
    kind = classify(err)
    where = f"{repo.repo_type} {repo.repo_id}"
    if kind == NOT_FOUND:
        close = similar_ids(repo, known)
        hint = f": did you mean {' or '.join(map(repr, close))}?" if close else ""
        return f"not found on the Hub at {endpoint()} (check the id{hint}; a private repository needs HF_TOKEN)"
    if kind == NO_REVISION:
        return f"{where} exists; its revision {repo.revision!r} does not ({err})"
    if kind == GATED:
        return f"{where} is gated: accept its terms on the Hub and set HF_TOKEN to a token with access"
    if kind == UNREACHABLE:
        return f"could not reach {endpoint()}: {_reason(err)}"
    return f"the Hub answered with an error: {_client_error(err)}"


def _reason(err: BaseException) -> str:
    cause = _client_error(err)
    return f"{type(cause).__name__}: {cause}" if cause is not err else str(err)
