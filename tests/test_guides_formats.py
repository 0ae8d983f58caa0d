"""The extension guides, followed: docs/guides/new_task_format.md, new_backbone_family.md and
new_arm_recipe_choice.md.

Each test writes the guide's titled code blocks into a copy of the tree and runs there (in
a subprocess, since the copy's package is a different ``workflow_scripts``) what the guide
promises."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEMO_HUB, REPO

BLOCK = re.compile(r'^```\w+ title="([^"]+)"\n(.*?)^```$', re.M | re.S)


def guide_blocks(name: str) -> dict[str, str]:
    """The guide's code blocks that carry a file path, by path."""
    return dict(BLOCK.findall((REPO / "docs" / "guides" / name).read_text()))


def tree_copy(dest: Path) -> Path:
    """The package, the built-in task entries and the config schema, which is what the guides edit."""
    for part in ("workflow_scripts", "tasks", "schemas"):
        shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def run_in(tree: Path, script: str, env: dict[str, str] | None = None) -> dict:
    """``script`` run with the copy's package; it prints one JSON object last."""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tree), **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_new_task_format_guide(tmp_path, demo_encoder_dir):
    from workflow_scripts.spec import codehash

    blocks = guide_blocks("new_task_format.md")
    assert set(blocks) == {
        "workflow_scripts/spec/formats/sentence_label.py",
        "my_tasks/snli_hypothesis.yaml",
        "my_tasks/snli_hypothesis.py",
    }
    tree = tree_copy(tmp_path / "tree")
    for path, body in blocks.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(body)
    script = f"""
import json
from pathlib import Path
from workflow_scripts.data.prepare import SCHEMAS, prepare, read_table
from workflow_scripts.spec.tasks import FORMATS, get_task
from workflow_scripts.training.recipe import train_phase
from workflow_scripts.spec import codehash
from workflow_scripts.spec.data_settings import DataSettings
from workflow_scripts.spec.phase_settings import PhaseSettings

local = DataSettings.parse({{"source": "local", "local_root": {str(DEMO_HUB)!r}, "hub": {{"path": "stanfordnlp/snli"}}}})
data = {{}}
for split in ("train", "dev"):
    data[split] = str(Path({str(tmp_path)!r}) / f"{{split}}.parquet")
    prepare("snli_hypothesis", split, local, data[split])
settings = PhaseSettings.parse({{
    "dropout": 0.1, "dev_examples": 16, "eval_batch_size": 16, "eval_every": 1, "learning_rate": 1e-3,
    "max_grad_norm": 1.0, "max_micro_batch": 4, "multitask_cap": 131072, "multitask_epochs": 1,
    "patience": 30, "warmup_ratio": 0.1, "weight_decay": 0.0, "max_steps": 1, "language": "en", "method": {{}},
    "tasks": {{"snli_hypothesis": {{"batch_size": 4, "epochs": 1, "max_length": 32, "select_language": "en"}}}},
}})
log = train_phase("intermediate", Path({str(demo_encoder_dir)!r}), {{"snli_hypothesis": data}}, settings, seed=1,
                  threads=1, output=Path({str(tmp_path)!r}) / "encoder")
print(json.dumps({{
    "formats": list(FORMATS), "columns": read_table(data["train"], "sentence_label").column_names,
    "rows": read_table(data["train"]).num_rows, "steps": log["total_steps"], "best": log["best"]["scores"],
    "fingerprints": codehash.task_fingerprint(["snli_hypothesis", "xnli"]),
    "format_module": codehash.module_digest("spec.formats.sentence_label"),
    "train_code": codehash.module_digest("training.train"), "evaluate_code": codehash.module_digest("evaluation.evaluate"),
}}))
"""
    got = run_in(tree, script, {"XSTILTS_TASK_CATALOGUES": str(tree / "my_tasks")})
    # the catalogue knows the format; prepare writes its columns; one step trains, and dev is scored
    assert got["formats"][-1] == "sentence_label"
    assert got["columns"] == ["id", "lang", "text", "label"] and got["rows"] > 0
    assert got["steps"] == 1 and 0 <= got["best"]["snli_hypothesis"]["accuracy"] <= 100
    # What reruns (guide §3): the new task's fingerprint holds its format's module; the jobs
    # of existing tasks and the code hashes of training and evaluation are those of the tree
    # without the format.
    assert got["fingerprints"]["snli_hypothesis"]["format_code"] == got["format_module"]
    assert got["fingerprints"]["xnli"] == codehash.task_fingerprint(["xnli"])["xnli"]
    assert got["train_code"] == codehash.module_digest("training.train")
    assert got["evaluate_code"] == codehash.module_digest("evaluation.evaluate")


@pytest.mark.unit
def test_format_modules_are_hashed_into_the_jobs_of_their_tasks_only(tmp_path, monkeypatch):
    """new_task_format.md §3: no module imports a format module by statement, so a format's
    module enters the fingerprint of its own tasks' jobs and no other code hash."""
    from workflow_scripts.spec import codehash
    from workflow_scripts.spec.formats import module_name
    from workflow_scripts.spec.tasks import FORMATS, TASKS

    package = codehash.PACKAGE_DIR
    importers = {
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        for m in codehash._imports_in(p, "workflow_scripts._any")
        if m in {module_name(f) for f in FORMATS}
    }
    assert importers <= {f"spec/formats/{f}.py" for f in FORMATS}, importers
    dest = tmp_path / "workflow_scripts"
    shutil.copytree(package, dest, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codehash, "PACKAGE_DIR", dest)
    codehash._imports.cache_clear()
    names = sorted(TASKS)
    before = codehash.task_fingerprint(names)
    codes = {m: codehash.module_digest(m) for m in ("training.train", "evaluation.evaluate", "data.prepare")}
    with (dest / "spec" / "formats" / "span.py").open("a") as f:
        f.write("\nAN_EDIT = 1\n")
    codehash._imports.cache_clear()
    after = codehash.task_fingerprint(names)
    assert {n for n in names if after[n] != before[n]} == {n for n in names if TASKS[n].format == "span"}
    assert {m: codehash.module_digest(m) for m in codes} == codes
    codehash._imports.cache_clear()


def apply_edits(path: Path, block: str) -> None:
    """Each line of a guide block that edits a file replaces the file's one line most like it;
    a line like none of them is new, and goes above the line the next one replaces."""
    import difflib

    lines = path.read_text().splitlines(keepends=True)
    new_lines: list[str] = []
    for new in block.splitlines():
        if not new.strip():
            continue
        close = difflib.get_close_matches(new, [line.rstrip("\n") for line in lines], n=2, cutoff=0.8)
        if not close:
            new_lines.append(new + "\n")
            continue
        at = [line.rstrip("\n") for line in lines].index(close[0])
        lines[at : at + 1] = [*new_lines, new + "\n"]
        new_lines = []
    assert not new_lines, f"{path}: no line like {new_lines[-1]!r}"
    path.write_text("".join(lines))


@pytest.mark.integration
def test_new_backbone_family_guide(tmp_path, demo_encoder_dir, demo_data):
    blocks = guide_blocks("new_backbone_family.md")
    module = "workflow_scripts/models/backbones/mean_encoder.py"
    assert set(blocks) == {
        module,
        "workflow_scripts/spec/families.py",
        "workflow_scripts/models/backbones/__init__.py",
    }
    tree = tree_copy(tmp_path / "tree")
    (tree / module).write_text(blocks.pop(module))
    for path, body in blocks.items():
        apply_edits(tree / path, body)
    model = tmp_path / "model"
    shutil.copytree(demo_encoder_dir, model)
    (model / "xstilts_backbone.json").write_text(json.dumps({"family": "mean_encoder"}))
    script = f"""
import json
from pathlib import Path
from workflow_scripts.models.backbones import FAMILIES, family_of
from workflow_scripts.spec.phase_settings import PhaseSettings
from workflow_scripts.training.recipe import train_phase
from workflow_scripts.planning import memory_model as mm
from workflow_scripts.workflow.config_check import schema_for_validation

entry = {{"family": "mean_encoder", "method": "lora", "precision": "bf16", "parameters": 4.7e8,
         "architecture": {{"hidden_size": 768, "num_layers": 12, "num_attention_heads": 12, "vocab_size": 501153}}}}
bb = mm.parse_backbone("labse", entry)
est = mm.estimate(bb, 128, 8, 1)
data = {{"xnli": {{"train": {str(demo_data["mnli.train"])!r}, "dev": {str(demo_data["xnli.dev"])!r}}}}}
settings = PhaseSettings.parse({{
    "dropout": 0.1, "dev_examples": 16, "eval_batch_size": 16, "eval_every": 1, "learning_rate": 1e-3,
    "max_grad_norm": 1.0, "max_micro_batch": 4, "multitask_cap": 131072, "multitask_epochs": 1,
    "patience": 30, "warmup_ratio": 0.1, "weight_decay": 0.0, "max_steps": 1, "method": {{}},
    "tasks": {{"xnli": {{"batch_size": 4, "epochs": 1, "max_length": 32, "select_language": "en"}}}},
}})
log = train_phase("target", Path({str(model)!r}), data, settings, seed=1, threads=1,
                  output=Path({str(tmp_path)!r}) / "trained")
rendered = json.loads(schema_for_validation().read_text())
print(json.dumps({{"families": list(FAMILIES), "schema": rendered["$defs"]["backbone"]["properties"]["family"]["enum"],
                  "family": family_of({str(model)!r}).name,
                  "pooling": family_of({str(model)!r}).pooling, "targets": list(bb.target_modules),
                  "adapter": mm.lora_adapter_parameters(bb), "total": est.total, "steps": log["total_steps"],
                  "best": log["best"]["scores"]}}))
"""
    got = run_in(tree, script)
    assert got["families"][-1] == "mean_encoder" and got["family"] == "mean_encoder" and got["pooling"] == "mean"
    assert got["schema"] == got["families"]  # the config check accepts the new family, no schema edit
    # planned with the encoder's attention projections, sized by the planner
    assert got["targets"] == ["query", "key", "value", "attention.output.dense"]
    assert got["adapter"] == 12 * 4 * 16 * 2 * 768 and got["total"] > 0
    assert got["steps"] == 1 and 0 <= got["best"]["xnli"]["accuracy"] <= 100


END_OF_FILE = " (end of file)"


@pytest.mark.integration
def test_new_arm_recipe_choice_guide(tmp_path, demo_encoder_dir, demo_data):
    blocks = guide_blocks("new_arm_recipe_choice.md")
    freezer = "workflow_scripts/training/arm_phase.py" + END_OF_FILE
    assert set(blocks) == {"workflow_scripts/spec/arm_recipe.py", freezer, "docs/multimodal.md"}
    tree = tree_copy(tmp_path / "tree")
    (tree / "docs").mkdir()
    shutil.copy(REPO / "docs" / "multimodal.md", tree / "docs" / "multimodal.md")
    with (tree / freezer.removesuffix(END_OF_FILE)).open("a") as f:
        f.write("\n\n" + blocks.pop(freezer))
    for path, body in blocks.items():
        apply_edits(tree / path, body)
    assert "| | `upper_blocks` |" in (tree / "docs" / "multimodal.md").read_text()
    script = f"""
import json
from pathlib import Path
from safetensors.torch import load_file
from workflow_scripts.spec.phase_settings import PhaseSettings
from workflow_scripts.training.recipe import train_phase
from workflow_scripts.workflow.config_check import schema_for_validation

rendered = json.loads(schema_for_validation().read_text())
enum = rendered["$defs"]["arm_recipe"]["properties"]["trains"]["enum"]
data = {{"xnli": {{"train": {str(demo_data["mnli.train"])!r}, "dev": {str(demo_data["xnli.dev"])!r}}}}}
settings = PhaseSettings.parse({{
    "dropout": 0.1, "dev_examples": 16, "eval_batch_size": 16, "eval_every": 2, "learning_rate": 1e-2,
    "max_grad_norm": 1.0, "max_micro_batch": 4, "multitask_cap": 131072, "multitask_epochs": 1,
    "patience": 30, "warmup_ratio": 0.0, "weight_decay": 0.0, "max_steps": 2, "method": {{}},
    "arm_recipe": {{"name": "upper", "trains": "upper_blocks"}},
    "tasks": {{"xnli": {{"batch_size": 4, "epochs": 1, "max_length": 32, "select_language": "en"}}}},
}})
out = Path({str(tmp_path)!r}) / "trained"
log = train_phase("intermediate", Path({str(demo_encoder_dir)!r}), data, settings, seed=1, threads=1, output=out)
# the demo encoder is saved with its masked-LM head, its encoder's weights under "roberta."
start = {{k.removeprefix("roberta."): v for k, v in load_file(str(Path({str(demo_encoder_dir)!r}) / "model.safetensors")).items()}}
trained = load_file(str(out / "model.safetensors"))
changed = sorted(k for k in trained if k in start and not start[k].equal(trained[k]))
print(json.dumps({{"enum": enum, "frozen": log["frozen_parameters"], "changed": changed,
                  "names": sorted(trained)}}))
"""
    got = run_in(tree, script)
    assert "upper_blocks" in got["enum"] and got["frozen"] > 0
    layers = sorted({int(n.split("layer.")[1].split(".")[0]) for n in got["names"] if "layer." in n})
    upper = layers[len(layers) // 2 :]
    # the upper blocks trained; the embeddings and the lower blocks kept their weights
    assert got["changed"] and all(any(f"layer.{i}." in n for i in upper) for n in got["changed"]), got["changed"]
    assert any(f"layer.{upper[-1]}." in n for n in got["changed"])


@pytest.mark.unit
def test_every_format_declares_its_facts_and_a_misnamed_kind_is_refused():
    from workflow_scripts.data.prepare import SCHEMAS
    from workflow_scripts.spec.formats import BUILTIN, TaskFormat, get_format
    from workflow_scripts.spec.tasks import FORMATS, TRANSLATABLE_FORMATS, VISUAL_FORMATS

    assert FORMATS == BUILTIN and set(SCHEMAS) == set(FORMATS)
    assert TRANSLATABLE_FORMATS == (
        "classification",
        "multiple_choice",
        "span",
        "visual_classification",
        "visual_answer",
        "visual_retrieval",
    )
    assert VISUAL_FORMATS == ("visual_classification", "visual_answer", "visual_retrieval")
    assert [f for f in FORMATS if get_format(f).retrieval] == ["retrieval", "mining"]
    assert [f for f in FORMATS if get_format(f).translate_test] == ["classification", "span"]
    with pytest.raises(ValueError, match="head 'clasification' is none of"):
        TaskFormat(name="x", columns={"text": "string"}, head="clasification", scorer=None)
    with pytest.raises(ValueError, match="column types"):
        TaskFormat(name="x", columns={"text": "str"}, head=None, scorer=None)


@pytest.mark.unit
def test_the_families_the_schema_accepts_are_the_registered_ones():
    """new_backbone_family.md §1 and §3: a family's facts are registered in spec/families.py
    and its code in backbones/__init__.py; the config schema's enum is filled in from the
    facts. One registered without the other is caught here."""
    from workflow_scripts.models.backbones import FAMILIES
    from workflow_scripts.spec import families, schema

    accepted = schema.setting("family", definition="backbone")["enum"]
    assert accepted == list(FAMILIES) == list(families.FAMILIES)
    assert all(FAMILIES[name].facts is facts for name, facts in families.FAMILIES.items())
