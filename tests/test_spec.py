"""spec/: the typed records every step's CLI parses its --settings with, and the facts the
records and the config schema share (one validation per fact).

The records are checked against the jobs the workflow really plans: every ``--settings``
(and ``--backbone-settings``) JSON of every job of the demo presets parses through a record
whose ``step`` is the job's CLI module, and is written back byte for byte; so do a training
job's data map and every job's run identity.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
import shlex
import sys

import pytest

from conftest import REPO
from workflow_scripts import spec
from workflow_scripts.spec import families, formats, schema
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_map import data_map_json, parse_data_map
from workflow_scripts.spec.record import Record
from workflow_scripts.spec.run_identity import EvaluationIdentity, ProbeIdentity, PromptedIdentity, TrainingIdentity
from workflow_scripts.spec.task_options import FormatOptions, TaskOptions

sys.path.insert(0, str(REPO / "benchmarks"))
from job_listing import job_blocks

DEMO_PRESETS = (
    "config.yaml",
    "config/multimodal_demo.yaml",
    "config/xtreme_r_demo.yaml",
    "tests/configs/sweep_demo.yaml",
    "tests/configs/xvnli_demo.yaml",
    "tests/configs/xflickrco_demo.yaml",
    "tests/configs/marvl_demo.yaml",
    "config/iglue.yaml",
)
SETTINGS_FLAGS = ("--settings", "--backbone-settings")
# The other JSON hand-offs, by (CLI module, flag): how each is read back and written again.
HAND_OFFS = {
    ("training.train", "--data"): lambda text: data_map_json(parse_data_map(text)),
    ("training.train", "--run-identity"): lambda text: TrainingIdentity.parse(text).to_json(),
    ("evaluation.metric_file", "--run"): lambda text: EvaluationIdentity.parse(text).to_json(),
    ("evaluation.prompted", "--run"): lambda text: PromptedIdentity.parse(text).to_json(),
    ("evaluation.retention", "--probe"): lambda text: ProbeIdentity.parse(text).to_json(),
}
CLI = re.compile(r"python -m workflow_scripts\.([\w.]+)")


def records() -> list[type[Record]]:
    """Every record class declared in spec/."""
    for info in pkgutil.iter_modules(spec.__path__):
        importlib.import_module(f"workflow_scripts.spec.{info.name}")
    found, todo = [], [Record]
    while todo:
        cls = todo.pop()
        found += cls.__subclasses__()
        todo += cls.__subclasses__()
    return found


def records_of(step: str) -> list[type[Record]]:
    return [r for r in records() if r.step == step]


def planned_json(preset: str) -> list[tuple[str, str, str]]:
    """(CLI module, flag, JSON) of every settings and hand-off flag of every job the preset
    plans, read from the shell command as the shell would split it."""
    found = []
    for block in job_blocks(preset):
        for line in block.splitlines():
            cli = CLI.search(line)
            if line.startswith("Shell command:") and cli:
                words = shlex.split(line.removeprefix("Shell command:"))
                flags = {*SETTINGS_FLAGS, *(flag for step, flag in HAND_OFFS if step == cli.group(1))}
                found += [(cli.group(1), w, words[i + 1]) for i, w in enumerate(words) if w in flags]
    return found


@pytest.mark.integration
@pytest.mark.parametrize("preset", [p for p in DEMO_PRESETS if (REPO / p).is_file()])
def test_every_planned_settings_and_hand_off_json_parses_through_its_record_and_is_written_back_unchanged(preset):
    planned = planned_json(preset)
    assert planned
    for step, flag, text in planned:
        if flag not in SETTINGS_FLAGS:
            assert HAND_OFFS[step, flag](text) == text, f"{step} {flag}: not read back as given: {text[:300]}"
            continue
        candidates = records_of(step)
        assert candidates, f"{step} takes --settings but no record in spec/ declares step = {step!r}"
        written = []
        for record in candidates:
            try:
                written.append(record.parse(text).to_json())
            except InputError:
                continue
        assert text in written, f"{step}: no record of {[r.__name__ for r in candidates]} reads back {text[:300]}"


@pytest.mark.unit
def test_a_record_names_an_unknown_missing_or_mistyped_key():
    good = {"batch_size": 32, "epochs": 2, "max_length": 128}
    assert TaskOptions.parse(good).to_dict() == good
    with pytest.raises(InputError, match=r"tasks\.xnli: unknown settings key 'max_lenght' \(did you mean 'max_length'"):
        TaskOptions.parse({**good, "max_lenght": 64}, "tasks.xnli")
    with pytest.raises(InputError, match=r"settings key 'epochs' is missing \(TaskOptions needs it\)"):
        TaskOptions.parse({"batch_size": 32, "max_length": 128})
    with pytest.raises(InputError, match=r"tasks\.xnli\.batch_size: expected int, got '32'"):
        TaskOptions.parse({**good, "batch_size": "32"}, "tasks.xnli")
    with pytest.raises(InputError, match="not valid JSON"):
        TaskOptions.parse("{batch_size: 32}")


@pytest.mark.unit
def test_an_integer_stays_an_integer_where_a_float_is_allowed():
    # epochs is a float field: 3 stays 3, so the JSON the rule passed is written back as it came
    assert TaskOptions.parse('{"batch_size":8,"epochs":3,"max_length":64}').to_json() == (
        '{"batch_size":8,"epochs":3,"max_length":64}'
    )
    assert TaskOptions.parse('{"batch_size":8,"epochs":0.5,"max_length":64}').epochs == 0.5


@pytest.mark.unit
def test_records_are_frozen():
    options = FormatOptions(max_length=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_length = 128  # type: ignore[misc]
    assert options.replace(max_length=128).max_length == 128


@pytest.mark.unit
def test_every_option_a_format_declares_is_a_field_of_the_format_options():
    for name in formats.names():
        declared = set(formats.get_format(name).options)
        assert declared <= set(FormatOptions.keys()), (
            f"formats/{name}.py declares {declared - set(FormatOptions.keys())}"
        )


@pytest.mark.unit
def test_the_registered_backbone_families_are_the_schemas():
    assert schema.setting("family", definition="backbone")["enum"] == list(families.FAMILIES)


@pytest.mark.unit
def test_a_step_names_a_module_with_a_command_line():
    for record in records():
        if record.step is not None:
            module = REPO / "workflow_scripts" / (record.step.replace(".", "/") + ".py")
            assert module.is_file(), f"{record.__name__}.step = {record.step!r}"
            assert "--settings" in module.read_text() or "--backbone-settings" in module.read_text()


@pytest.mark.unit
def test_a_result_file_names_its_missing_or_unknown_key_as_a_key_of_the_file(tmp_path):
    """A train log is no settings: its errors name the file and the key, not a settings key."""
    import json

    from conftest import train_log_record
    from workflow_scripts.spec.result_files import TrainLog

    log = train_log_record()
    del log["seed"]
    path = tmp_path / "train_log.json"
    path.write_text(json.dumps(log))
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: key 'seed' is missing \(TrainLog needs it\)$"):
        TrainLog.read(path)
    path.write_text(json.dumps({**train_log_record(), "sead": 1}))
    with pytest.raises(InputError, match=r"unknown key 'sead' \(did you mean 'seed'"):
        TrainLog.read(path)
