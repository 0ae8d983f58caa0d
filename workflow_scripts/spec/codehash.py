"""Content hashes of workflow_scripts modules and everything they import from the package.

Snakemake tracks a rule's code, params and inputs but not the Python modules a shell
command imports. Each rule gets ``params.code = module_digest(<cli module>)``: editing any
module in that import closure changes the param, so exactly the rules using it rerun.
A module is hashed as code: its comments, docstrings and blank lines are left out, so an
edit to prose alone reruns nothing.
Standard library only, because the Snakefile imports this at parse time.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import tokenize
from functools import cache
from pathlib import Path

from workflow_scripts.spec import user_cache

PACKAGE = "workflow_scripts"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# Modules that watch a job without changing what it writes: progress bars and the experiment
# trackers. They are left out of every closure, so editing them reruns nothing (as switching
# tracking on or off reruns nothing: a `resources:` setting).
OBSERVERS = frozenset({f"{PACKAGE}.progress", f"{PACKAGE}.training.tracking"})


def _module_file(name: str) -> Path | None:
    """The source of a package module: ``a/b.py``, or ``a/b/__init__.py`` for a subpackage."""
    rel = name.split(".")[1:]
    if not rel:
        return PACKAGE_DIR / "__init__.py"
    for candidate in (PACKAGE_DIR.joinpath(*rel).with_suffix(".py"), PACKAGE_DIR.joinpath(*rel, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def _is_package(name: str) -> bool:
    path = _module_file(name)
    return path is not None and path.name == "__init__.py"


def _resolve(name: str, level: int, module: str | None) -> str:
    """The absolute name of ``from <level dots><module> import ...`` written in ``name``."""
    parts = name.split(".") if _is_package(name) else name.split(".")[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


@cache
def _imports(name: str) -> frozenset[str]:
    """Package modules imported anywhere in ``name`` (lazy imports in functions included)."""
    path = _module_file(name)
    if path is None:
        return frozenset()
    return _imports_in(path, name)


def _imports_in(path: Path, name: str) -> frozenset[str]:
    """Package modules imported anywhere in the source file ``path`` of module ``name``."""
    source = path.read_bytes()
    key = hashlib.sha256(b"\0".join([name.encode(), str(_is_package(name)).encode(), source])).hexdigest()
    found = _cached_imports(key)
    if found is None:
        found = _parsed_imports(source, path, name)
        _store_imports(key, found)
    return frozenset(m for m in found if _module_file(m) is not None)


def _parsed_imports(source: bytes, path: Path, name: str) -> list[str]:
    """The package names a source imports, read from its syntax tree (statements only: an
    import is always a statement, at any depth of functions, classes and blocks)."""
    found: set[str] = set()
    for node in _statements(ast.parse(source, filename=str(path)).body):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PACKAGE))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import, resolved against the importing module's package
                base = _resolve(name, node.level, node.module)
            elif node.module and node.module.startswith(PACKAGE):
                base = node.module
            else:
                continue
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return sorted(found)


def _statements(body: list[ast.stmt]):
    """Every statement of ``body`` and of the blocks nested in it (expressions skipped: most
    of a tree's nodes, and never an import)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(node, field, None)
            if isinstance(nested, list):
                yield from _statements(nested)
        for block in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
            yield from _statements(block.body)


# Parsing the package's ~160 modules is most of the Snakefile's parse time (each run, each
# dry run). What a source imports depends only on its bytes, its module name and whether it
# is a package, so the answer is kept under that hash in the user's cache folder (shared by
# every checkout, never stale); without a writable one, sources are parsed each time.
def _cached_imports(key: str) -> list[str] | None:
    text = user_cache.read_text(f"imports-v1/{key}.json")
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def _store_imports(key: str, found: list[str]) -> None:
    user_cache.write_text(f"imports-v1/{key}.json", json.dumps(found))


# ----- a module's code, without its prose -------------------------------------------------


def _docstring_spans(tree: ast.Module) -> list[tuple[int, int, int, int]]:
    """(start line, start column, end line, end column) of the module's, each class's and
    each function's docstring: the string that opens its body."""
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                spans.append((first.lineno, first.col_offset, first.end_lineno, first.end_col_offset))
    return spans


def _comment_spans(source: bytes, lines: list[bytes]) -> list[tuple[int, int, int, int]]:
    """The spans of the source's comments, as the tokenizer finds them (a ``#`` inside a
    string is part of the string), in UTF-8 columns as the syntax tree gives them."""

    def column(row: int, col: int) -> int:
        return len(lines[row - 1].decode("utf-8")[:col].encode("utf-8"))

    tokens = tokenize.tokenize(io.BytesIO(source).readline)
    return [(t.start[0], column(*t.start), t.end[0], column(*t.end)) for t in tokens if t.type == tokenize.COMMENT]


def code_text(source: bytes, filename: str = "<source>") -> bytes:
    """``source`` as code: comments and docstrings cut out, trailing spaces and blank lines
    dropped. The spans come from the tokenizer and the syntax tree, so the result is the
    same on every Python that parses the file."""
    lines = source.replace(b"\r\n", b"\n").split(b"\n")
    spans = _docstring_spans(ast.parse(source, filename=filename)) + _comment_spans(source, lines)
    # Cut from the end backwards, so that the offsets of the spans still to cut stay valid.
    for start_line, start_col, end_line, end_col in sorted(spans, reverse=True):
        lines[start_line - 1 : end_line] = [lines[start_line - 1][:start_col] + lines[end_line - 1][end_col:]]
    return b"\n".join(line.rstrip() for line in lines if line.strip())


_CODE_DIGESTS: dict[str, bytes] = {}


def _code_digest(name: str) -> bytes:
    """The hash of module ``name``'s code (``code_text``), kept in this process and in the
    user's cache under the hash of the module's bytes, as its imports are."""
    path = _module_file(name)
    source = path.read_bytes()
    key = hashlib.sha256(source).hexdigest()
    if key not in _CODE_DIGESTS:
        found = user_cache.read_text(f"code-v1/{key}")
        if found is None:
            found = hashlib.sha256(code_text(source, str(path))).hexdigest()
            user_cache.write_text(f"code-v1/{key}", found)
        _CODE_DIGESTS[key] = found.encode()
    return _CODE_DIGESTS[key]


def import_closure(name: str) -> list[str]:
    return _closure([name])


def _closure(names) -> list[str]:
    seen: set[str] = set()
    stack = list(names)
    while stack:
        mod = stack.pop()
        if mod in seen or mod in OBSERVERS:
            continue
        seen.add(mod)
        stack.extend(_imports(mod))
    return sorted(seen)


def module_digest(name: str) -> str:
    """sha256 over the source of ``name`` and its package import closure."""
    if not name.startswith(PACKAGE):
        name = f"{PACKAGE}.{name}"
    if _module_file(name) is None:
        raise ValueError(f"no module {name} in {PACKAGE_DIR}")
    digest = hashlib.sha256()
    for mod in import_closure(name):
        digest.update(mod.encode() + b"\0" + _code_digest(mod) + b"\0")
    return digest.hexdigest()[:16]


def file_digest(path: Path) -> str:
    """sha256 over a source file outside the package (a user's task converter) and the
    package modules it imports."""
    digest = hashlib.sha256(code_text(path.read_bytes(), str(path)) + b"\0")
    for mod in _closure(_imports_in(path, f"{PACKAGE}._external")):
        digest.update(mod.encode() + b"\0" + _code_digest(mod) + b"\0")
    return digest.hexdigest()[:16]


def _plain(value):
    """An entry's value as JSON holds it (sets sorted, records as mappings)."""
    import dataclasses

    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    return value


def task_fingerprint(names) -> dict[str, dict]:
    """What a job reads of the task catalogue: the entries of its own tasks (all but their
    prose and their documented sizes, which only the cost model reads), the code hash of each one's converter and that of its format's module
    (workflow_scripts/spec/formats/, imported by name and so in no import closure). A job's
    params carry it, so adding or editing another task or format leaves the job as it is."""
    from workflow_scripts.spec.formats import module_name
    from workflow_scripts.spec.tasks import get_task

    found = {}
    for name in sorted(set(names)):
        task = get_task(name)
        entry = {k: _plain(v) for k, v in vars(task).items() if k not in ("description", "entry_file", "sizes")}
        if task.converter:  # none: local files mapped by their columns (data/prepare.py's own code)
            entry["converter"] = (
                file_digest(task.converter_file) if task.converter_file else module_digest(task.converter)
            )
        entry["format_code"] = module_digest(module_name(task.format))
        found[name] = entry
    return found
