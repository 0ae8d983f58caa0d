"""'Did you mean': the shared helper (workflow_scripts/spec/suggest.py), the config checks that use
it for unknown names and keys, and the Hub failures the preflight tells apart
(workflow_scripts/operations/hub_answers.py). The preflight's rows against a live and an
unreachable Hub are in tests/test_hub.py."""

from __future__ import annotations

import copy

import pytest
import yaml

from conftest import REPO
from workflow_scripts.operations import hub_answers
from workflow_scripts.revisions import RevisionError
from workflow_scripts.spec import benchmark
from workflow_scripts.spec.suggest import close_matches, did_you_mean
from workflow_scripts.spec.tasks import TASKS, get_task
from workflow_scripts.workflow import config_check

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def demo_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def test_close_names_are_suggested_and_far_ones_are_not():
    assert did_you_mean("xnil", TASKS).startswith(" (did you mean 'xnli'")
    assert did_you_mean("XNLI", ["xnli", "squad"]) == " (did you mean 'xnli'?)"  # case aside
    assert close_matches("hellaswg", TASKS) == ["hellaswag"]
    assert did_you_mean("ge", ["de", "en", "ru"]) == "", "two-letter codes: no guess among equals"
    assert did_you_mean("zzzz", TASKS) == ""


def checked(config: dict) -> str:
    with pytest.raises(config_check.CONFIG_ERRORS + (KeyError,)) as err:
        config_check.check(config, [], [])
    return str(err.value)


@pytest.mark.parametrize(
    "path,value,expected",
    [
        ("targets", ["xnil"], "config key targets[0]: unknown task 'xnil' (did you mean 'xnli'"),
        ("benchmark", "xtreme_rr", "unknown benchmark 'xtreme_rr' (did you mean 'xtreme_r'"),
        ("training.target.learning_rat", 1e-4, "('learning_rat' was unexpected) (did you mean 'learning_rate'"),
        (
            "trgets",
            ["xnli"],
            "config key (top level): Additional properties are not allowed ('trgets' was unexpected)"
            " (did you mean 'targets'?)",
        ),
        (
            "backbones.xlmr_tiny.family",
            "encodr",
            "is not one of ['encoder', 'seq2seq_encoder', 'decoder'] (did you mean 'encoder'",
        ),
        ("backbones.llama_tiny.grid", {"targets": ["xnil"]}, "['xnil'] (did you mean 'xnli'?) not in the config's"),
    ],
)
def test_config_errors_name_the_closest_known_name(demo_config, path, value, expected):
    config = copy.deepcopy(demo_config)
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node[key]
    node[last] = value
    assert expected in checked(config)


def test_lookups_by_name_suggest_too():
    with pytest.raises(KeyError, match=r"unknown task 'udpso' \(did you mean 'udpos'\?\)"):
        get_task("udpso")
    with pytest.raises(KeyError, match=r"unknown benchmark 'xtrem' \(did you mean 'xtreme'"):
        benchmark.get("xtrem")


def _wrapped(cause: BaseException) -> RevisionError:
    """How revisions.resolve hands a Hub client error on: its own error, raised from None."""
    try:
        try:
            raise cause
        except BaseException:
            raise RevisionError("wrapped") from None
    except RevisionError as err:
        return err


def test_hub_failures_are_told_apart_by_the_clients_exception_types():
    import httpx2
    from huggingface_hub import errors

    response = httpx2.Response(404, request=httpx2.Request("GET", "http://127.0.0.1/api/models/x"))
    kinds = {
        errors.GatedRepoError: hub_answers.GATED,  # a RepositoryNotFoundError too: checked first
        errors.RepositoryNotFoundError: hub_answers.NOT_FOUND,
        errors.RevisionNotFoundError: hub_answers.NO_REVISION,
        errors.RemoteEntryNotFoundError: hub_answers.NOT_FOUND,
        errors.HfHubHTTPError: hub_answers.ERROR,
    }
    for cls, kind in kinds.items():
        assert hub_answers.classify(_wrapped(cls("x", response=response))) == kind, cls
    assert hub_answers.classify(_wrapped(errors.LocalEntryNotFoundError("x"))) == hub_answers.UNREACHABLE
    assert hub_answers.classify(_wrapped(errors.OfflineModeIsEnabled("x"))) == hub_answers.UNREACHABLE
    assert hub_answers.classify(_wrapped(TimeoutError("timed out"))) == hub_answers.UNREACHABLE
    assert set(hub_answers.FIXES) == {
        hub_answers.NOT_FOUND,
        hub_answers.NO_REVISION,
        hub_answers.GATED,
        hub_answers.UNREACHABLE,
        hub_answers.ERROR,
    }
