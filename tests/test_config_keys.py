"""The workflow reads only config keys the schema defines. A key the schema does not define
can never be set (validation rejects it), so code that reads one silently runs on its
fallback: a memory planner reading ``lora.targets`` where the schema says ``target_modules``
plans a config that adapts the MLP layers as one that adapts the attention projections only.

Each preset's dry run (which builds every job, its inputs and params, and runs the config
checks, the memory planner included) goes through tests/config_reads.py, which records every
key path looked up; each path must be one the schema defines."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from conftest import copy_repo, paper_with_larger_backbones
from workflow_scripts.spec.schema import config_schema

SCHEMA = config_schema()  # the file with the blocks records generate
LIST_ITEM = "[]"  # tests/config_reads.py's path component for a list's items
# Each preset's dry run: the configs whose code paths differ (demo models, Hub models with the
# planner's LoRA backbones, XTREME-R's targets and stages, image tasks).
PRESETS = {
    "demo": None,
    "paper with its larger backbones": "paper_backbones.yaml",
    "xtreme_r": "config/xtreme_r.yaml",
    "multimodal": "config/multimodal.yaml",
    "multimodal demo": "config/multimodal_demo.yaml",
}


def _resolve(node: dict[str, Any]) -> list[dict[str, Any]]:
    """A schema node and every node it stands for: $ref targets, allOf / anyOf / oneOf
    branches and if/then/else branches (a key declared in any of them is defined)."""
    found, stack = [], [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, dict):
            continue
        found.append(n)
        if "$ref" in n:
            target: Any = SCHEMA
            for part in n["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            stack.append(target)
        for combinator in ("allOf", "anyOf", "oneOf"):
            stack.extend(n.get(combinator, []))
        stack.extend(n[branch] for branch in ("then", "else") if branch in n)
    return found


def _children(node: dict[str, Any], key: str) -> list[dict[str, Any]] | None:
    """The schema nodes of ``key`` under ``node``: None if the schema does not define it.
    A mapping with no declared keys at all (a loader's free-form ``options``) takes any key;
    one that declares some does not define others, whether or not it forbids them."""
    nodes = _resolve(node)
    if key == LIST_ITEM:
        return [n["items"] for n in nodes if isinstance(n.get("items"), dict)] or [{}]
    children, declares_keys = [], False
    for n in nodes:
        if key in n.get("properties", {}):
            children.append(n["properties"][key])
        children += [sub for pattern, sub in n.get("patternProperties", {}).items() if re.search(pattern, key)]
        if isinstance(n.get("additionalProperties"), dict):
            children.append(n["additionalProperties"])
        declares_keys |= any(k in n for k in ("properties", "patternProperties", "additionalProperties"))
    if children:
        return children
    return None if declares_keys else [{}]


def defined(path: list[str]) -> bool:
    nodes = [SCHEMA]
    for key in path:
        found = [child for node in nodes for child in (_children(node, key) or [])]
        if not found:
            return False
        nodes = found
    return True


@pytest.mark.unit
def test_the_checker_tells_a_defined_key_from_one_the_schema_rejects():
    assert defined(["backbones", "xlmr_large", "lora", "target_modules"])
    assert defined(["backbones", "xlmr_large", "lora", "rank"])
    assert not defined(["backbones", "xlmr_large", "lora", "targets"])
    assert not defined(["backbones", "xlmr_large", "lora", "adapter_parameters"])
    assert defined(["transfer", "settings", "source:de", "targets"])  # a patternProperties key
    assert defined(["backbones", "llama_tiny", "demo", "num_key_value_heads"])  # the decoder's demo branch
    assert defined(["tasks", "udpos", "options", "ud_release"])  # free-form loader options
    assert not defined(["training", "target", "learning_rat"])


@pytest.fixture(scope="module")
def reads(tmp_path_factory) -> dict[str, list]:
    """Every preset's recorded reads, the dry runs side by side (each takes seconds)."""
    repo = copy_repo(tmp_path_factory.mktemp("repo"))
    paper_with_larger_backbones(repo)
    runs = {}
    for name, configfile in PRESETS.items():
        out = repo / f"reads-{len(runs)}.json"
        args = ["-n", "--quiet"] + (["--configfile", configfile] if configfile else [])
        runs[name] = (
            out,
            subprocess.Popen(
                [sys.executable, "tests/config_reads.py", str(out), *args],
                cwd=repo,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            ),
        )
    found = {}
    for name, (out, proc) in runs.items():
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}: {output[-3000:]}"
        found[name] = json.loads(out.read_text())
    return found


@pytest.mark.integration
@pytest.mark.parametrize("preset", PRESETS)
def test_every_config_key_the_workflow_reads_is_defined_by_the_schema(reads, preset):
    recorded = reads[preset]
    assert any(path[:1] == ["backbones"] for path, _, _ in recorded), "the recording saw no read"
    undefined = sorted({(".".join(path), f"{file}:{line}") for path, file, line in recorded if not defined(path)})
    assert not undefined, "config keys read but not defined by schemas/config.schema.yaml:\n" + "\n".join(
        f"  {key} (read at {where})" for key, where in undefined
    )
