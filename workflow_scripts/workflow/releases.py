"""A task's original releases (UD v2.5, XTREME-R's UD v2.7 languages, XQuAD-R): the options
that name them, which of them are local paths, and whether the task also reads Hub data.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workflow_scripts.spec.basics import REPO_ROOT, is_url


def _release_options(options: Mapping[str, Any]) -> dict[str, str | None]:
    """A task's options (``tasks.<name>.options``) that name an original release (a URL,
    archive or directory), as written: UD v2.5 (``ud_release``), XTREME-R's UD v2.7 languages
    (``ud_release_extra.release``), XQuAD-R (``xquad_r_path``)."""
    extra = options.get("ud_release_extra")
    return {
        "ud_release": options.get("ud_release"),
        "ud_release_extra.release": extra.get("release") if isinstance(extra, dict) else None,
        "xquad_r_path": options.get("xquad_r_path"),
    }


def local_releases(options: Mapping[str, Any]) -> dict[str, Path]:
    """The local paths of a task's releases by option; URLs are not local."""
    return {
        key: REPO_ROOT / release
        for key, release in _release_options(options).items()  # absolute stays absolute
        if release and not is_url(release)
    }


def reads_hub_data(options: Mapping[str, Any]) -> bool:
    """Whether a task reads its Hub data (or its local mirror) besides its releases: all but
    UD-POS read from the UD v2.5 release."""
    return not options.get("ud_release")


def release_option(options: Mapping[str, Any], option: str) -> str:
    """The configured value of a local release option, as the user wrote it."""
    return str(_release_options(options)[option])
