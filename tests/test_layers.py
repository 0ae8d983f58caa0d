"""The package's layer rule (docs/architecture.md), checked on every import statement,
those inside functions included:

- ``spec/`` (the facts and typed records both sides share) imports nothing of the package
  outside ``spec/``;
- the parse-time rooms, ``workflow/`` (what Snakemake imports to build the DAG), ``planning/``
  (memory, cost, disk, Slurm) and ``operations/`` (status, logs, Hub answers), import only
  ``spec/``, each other and the two root helpers ``common`` and ``revisions``; so do the
  Snakefile and ``rules/*.smk``;
- job-time modules (every other subpackage) never import a parse-time room; the preflight
  (``preflight.py``), a command run before the workflow, is the one module that composes both;
- in the package picture (``LAYERS``, bottom first), at most two imports run back up: from a
  layer to one above it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow_scripts"
ROOT_HELPERS = {"common", "revisions"}
PARSE_TIME = {"workflow", "planning", "operations"}
# The package picture, bottom first: each layer may import those below it.
LAYERS = (
    ("spec",),
    ("common", "revisions", "precision", "progress"),
    ("data",),
    ("multimodal",),
    ("models",),
    ("translation",),
    ("evaluation",),
    ("training",),
    ("reporting",),
    ("workflow", "planning", "operations", "preflight"),
)
BACK_UP_ALLOWED = 2


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str) -> set[str]:
    """Every ``workflow_scripts...`` module a source imports (``from a import b``: ``a.b``
    where ``b`` is a submodule, else ``a``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("workflow_scripts")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workflow_scripts"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                as_module = PACKAGE.joinpath(*candidate.split(".")[1:])
                is_module = as_module.with_suffix(".py").is_file() or (as_module / "__init__.py").is_file()
                found.add(candidate if is_module else node.module)
    return found


def part(module: str) -> str:
    """The first component below the package: ``spec``, ``workflow``, ``common``, ..."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def package_imports() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def test_spec_imports_only_spec():
    wrong = {
        m: sorted(i for i in found if part(i) != "spec") for m, found in package_imports().items() if part(m) == "spec"
    }
    assert not {m: w for m, w in wrong.items() if w}


def test_the_parse_time_layer_imports_only_spec_and_the_root_helpers():
    allowed = {"spec", *PARSE_TIME, *ROOT_HELPERS}
    wrong = {
        m: sorted(i for i in found if part(i) not in allowed)
        for m, found in package_imports().items()
        if part(m) in PARSE_TIME
    }
    assert not {m: w for m, w in wrong.items() if w}


def test_the_snakefile_and_rules_import_only_the_parse_time_layer():
    allowed = {"spec", *PARSE_TIME, *ROOT_HELPERS}
    sources = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]
    pattern = re.compile(r"^\s*(?:from|import)\s+(workflow_scripts[\w.]*)(?:\s+import\s+([\w, ()]+))?", re.M)
    wrong = []
    for source in sources:
        for module, names in pattern.findall(source.read_text()):
            targets = [f"{module}.{n.strip()}" for n in names.strip("()").split(",")] if names else [module]
            wrong += [f"{source.name}: {t}" for t in targets if part(t) not in allowed and part(module) not in allowed]
    assert not wrong


def test_job_time_modules_never_import_the_parse_time_layer():
    wrong = {
        m: sorted(i for i in found if part(i) in PARSE_TIME)
        for m, found in package_imports().items()
        if part(m) not in ("spec", "preflight", *PARSE_TIME)
    }
    assert not {m: w for m, w in wrong.items() if w}


def test_no_job_time_module_imports_the_config_schema():
    """The schema module imports every record that generates a block of it; a job reading a
    default from it would hold all those records in its code hash, and rerun when any of them
    changes. Jobs take defaults from the records they read (spec/method.py, ...)."""
    wrong = {
        m
        for m, found in package_imports().items()
        if part(m) not in ("spec", "preflight", *PARSE_TIME) and "workflow_scripts.spec.schema" in found
    }
    assert not wrong


def layer_of(module: str) -> int:
    name = part(module)
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def back_up_imports() -> list[str]:
    return sorted(
        f"{m} -> {i}"
        for m, found in package_imports().items()
        for i in found
        if part(m) and part(i) and layer_of(i) > layer_of(m)
    )


def test_every_subpackage_has_a_layer():
    named = {p for layer in LAYERS for p in layer}
    present = {part(module_name(p)) for p in PACKAGE.rglob("*.py")} - {""}
    assert present <= named, f"add {sorted(present - named)} to LAYERS (and to docs/architecture.md)"


def test_at_most_two_imports_run_back_up_the_package():
    found = back_up_imports()
    assert len(found) <= BACK_UP_ALLOWED, "\n".join(found)


def test_the_architecture_page_states_the_rule_and_the_layers():
    page = (REPO / "docs" / "architecture.md").read_text()
    for layer in LAYERS:
        for name in layer:
            assert f"`{name}" in page, f"docs/architecture.md does not name {name}"
    assert "tests/test_layers.py" in page
