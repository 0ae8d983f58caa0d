"""Loaders: every task's source rows -> canonical rows, one module per family of sources.

- ``source``: the Hub, a local mirror of it, release archives (download cache);
- ``registry``: the converter registry and shared helpers;
- ``english``: English intermediate tasks; ``mlm``: the Wikipedia MLM corpus;
- ``xtreme``: XNLI, PAWS-X, PAN-X, Tatoeba; ``spans``: span tasks with answer repair;
- ``udpos``: UD-POS from the UD v2.5 release (or the Hub); ``bucc``: BUCC 2018 archives;
- ``xcopa``: XTREME-R's XCOPA recipe (SIQA, COPA, XCOPA);
- ``ranking``: XTREME-R's retrieval targets Mewsli-X and LAReQA (queries and a candidate pool);
- ``multimodal``: SNLI-VE's rows and its text-only controls.
"""

# Converter modules are imported on demand, by the task entry that names them
# (registry.load_converter): a job's code hash covers its own task's converter only.
from workflow_scripts.data.loaders.registry import CONVERTERS, Report, Row, load_converter
from workflow_scripts.data.loaders.source import Source, repo_path

__all__ = ["CONVERTERS", "Report", "Row", "Source", "load_converter", "repo_path"]
