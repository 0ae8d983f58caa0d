"""Loaders: every task's source rows -> canonical rows, one module per family of sources.

- ``source``: the Hub, a local mirror of it, release archives (download cache);
- ``registry``: the converter registry and shared helpers;
- ``english``: English intermediate tasks; ``mlm``: the Wikipedia MLM corpus;
- ``xtreme``: XNLI, PAWS-X, PAN-X, Tatoeba; ``spans``: span tasks with answer repair;
- ``udpos``: UD-POS from the UD v2.5 release (or the Hub); ``bucc``: BUCC 2018 archives;
- ``xcopa``: XTREME-R's XCOPA recipe (SIQA, COPA, XCOPA);
- ``ranking``: XTREME-R's retrieval targets Mewsli-X and LAReQA (queries and a candidate pool).
"""

from . import bucc, english, mlm, ranking, spans, udpos, xcopa, xtreme  # noqa: F401  (each registers its converters)
from .registry import CONVERTERS, Report, Row
from .source import Source, repo_path

__all__ = ["CONVERTERS", "Report", "Row", "Source", "repo_path"]
