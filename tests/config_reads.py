"""Run Snakemake with the workflow's config wrapped so that every key the workflow looks up
in it is recorded; tests/test_config_keys.py checks each against the config schema.

    python tests/config_reads.py READS.json [snakemake arguments ...]

writes a JSON list of [key path, file, line] for every lookup made by the repository's code
(Snakefile, rules/*.smk, workflow_scripts/), present key or not. Why a wrapper and not a scan
of the source: a key is read through variables (``entry = config["backbones"][name]``,
``lora = entry.get("lora") or {}``, ``lora.get("targets")``), which only running the code
resolves. Snakemake executes the Snakefile with ``config`` as a global of the workflow; the
wrapper replaces that global before each ``include`` (the Snakefile's own included), so every
read after the config file is loaded goes through it. Reads of a copy the code makes (e.g.
JSON it serialises and parses again) are not seen.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LIST_ITEM = "[]"  # a path component: any item of a list


class RecordingDict(dict):
    """A config mapping that notes the key path of every lookup into ``log``."""

    def __init__(self, data: Any = (), path: tuple[str, ...] = (), log: list | None = None) -> None:
        super().__init__()
        self._path = path
        self._log = [] if log is None else log
        for key, value in dict(data).items():
            super().__setitem__(key, self._wrap(key, value))

    def _wrap(self, key: Any, value: Any) -> Any:
        return wrap(value, self._path + (str(key),), self._log)

    def _note(self, key: Any) -> None:
        caller = sys._getframe(2)  # whoever called the mapping method
        self._log.append((self._path + (str(key),), caller.f_code.co_filename, caller.f_lineno))

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key) -> bool:
        self._note(key)
        return super().__contains__(key)

    def setdefault(self, key, default=None):
        self._note(key)
        if not super().__contains__(key):
            super().__setitem__(key, self._wrap(key, default))
        return super().__getitem__(key)

    def pop(self, key, *default):
        self._note(key)
        return super().pop(key, *default)

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, self._wrap(key, value))

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def copy(self) -> RecordingDict:
        return RecordingDict(self, self._path, self._log)

    def __deepcopy__(self, memo) -> RecordingDict:
        return RecordingDict({k: copy.deepcopy(v, memo) for k, v in dict.items(self)}, self._path, self._log)

    def __reduce__(self):  # pickled (e.g. to another process) as the plain mapping it holds
        return dict, (dict(dict.items(self)),)


def wrap(value: Any, path: tuple[str, ...], log: list) -> Any:
    if isinstance(value, RecordingDict):
        return value
    if isinstance(value, dict):
        return RecordingDict(value, path, log)
    if isinstance(value, list):
        return [wrap(item, path + (LIST_ITEM,), log) for item in value]
    return value


def ours(filename: str) -> bool:
    """A lookup by the workflow's own code, not by Snakemake, jsonschema or this test."""
    path = Path(filename).resolve()  # Snakemake may compile a Snakefile under a relative name
    return REPO in path.parents and "tests" not in path.relative_to(REPO).parts


def main(argv: list[str]) -> int:
    import snakemake.api  # noqa: F401  (snakemake.workflow imports it back: import it first)
    from snakemake.cli import main as snakemake_main
    from snakemake.workflow import Workflow

    out, args = Path(argv[0]), argv[1:]
    log: list = []
    include = Workflow.include

    def recording_include(self, *a, **kw):
        if not isinstance(self.globals.get("config"), RecordingDict):
            self.globals["config"] = RecordingDict(self.globals.get("config") or {}, (), log)
        return include(self, *a, **kw)

    Workflow.include = recording_include
    code = 0
    try:
        snakemake_main(args)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    finally:
        files = {f: ours(f) for f in {f for _, f, _ in log}}
        reads = sorted(
            {(path, str(Path(f).resolve().relative_to(REPO)), line) for path, f, line in set(log) if files[f]}
        )
        out.write_text(json.dumps([[list(path), f, line] for path, f, line in reads]))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
