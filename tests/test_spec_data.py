"""The data steps' settings records (spec/data_settings.py, spec/local_data.py): what they
refuse by key, and that the JSON they write back is the JSON they read."""

from __future__ import annotations

import dataclasses
import json

import pytest

from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import (
    DataOptions,
    DataSettings,
    LeakageSettings,
    UdReleaseExtra,
    unread_options,
)
from workflow_scripts.spec.local_data import LocalFiles
from workflow_scripts.spec.tasks import get_task

pytestmark = pytest.mark.unit

HUB = {"source": "hub", "hub": {"path": "google/xtreme", "revision": "main"}, "languages": ["en", "de"], "options": {}}


def test_an_unknown_or_missing_key_is_named():
    with pytest.raises(InputError, match=r"unknown settings key 'langauges' \(did you mean 'languages'\?\)"):
        DataSettings.parse({**HUB, "langauges": ["de"]}, "--settings")
    with pytest.raises(InputError, match="settings key 'source' is missing"):
        DataSettings.parse({k: v for k, v in HUB.items() if k != "source"}, "--settings")
    with pytest.raises(InputError, match=r"--settings\.hub: settings key 'path' is missing"):
        DataSettings.parse({**HUB, "hub": {"revision": "main"}}, "--settings")
    with pytest.raises(InputError, match="unknown settings key 'extra'"):
        LeakageSettings.parse({"on_overlap": "flag", "extra": 1})
    with pytest.raises(InputError, match="settings key 'file_type' is missing"):
        LocalFiles.parse({"files": {"train": "a.jsonl"}})


def test_each_source_needs_its_block_and_values_are_typed():
    with pytest.raises(InputError, match="source 'files' need the key 'data'"):
        DataSettings.parse({"source": "files"})
    with pytest.raises(InputError, match="source 'local' need the key 'hub'"):
        DataSettings.parse({"source": "local", "local_root": "demo/hub"})
    with pytest.raises(InputError, match=r"options\.sentences: expected int, got '60'"):
        DataSettings.parse({**HUB, "options": {"sentences": "60"}})
    with pytest.raises(InputError, match=r"options\.question_repair: 'all' is not one of"):
        DataSettings.parse({**HUB, "options": {"question_repair": "all"}})
    with pytest.raises(InputError, match=r"on_overlap: 'stop' is not one of 'flag', 'refuse'"):
        LeakageSettings.parse({"on_overlap": "stop"})
    assert LeakageSettings.parse("{}") == LeakageSettings(on_overlap="flag", min_words=6)


def test_options_keep_a_user_converters_keys_and_write_back_the_same_json():
    given = {
        "alpha": 0.3,
        "my_corpus": {"size": 10},
        "my_source_path": "me/corpus",
        "ud_release_extra": {"languages": ["ro"], "release": "ud-2.7"},
        "wikiann_path": "unimelb-nlp/wikiann",
    }
    settings = DataSettings.parse({**HUB, "options": given})
    options = settings.options
    assert options.own == {"my_corpus": {"size": 10}, "my_source_path": "me/corpus"}
    assert options.ud_release_extra == UdReleaseExtra(release="ud-2.7", languages=("ro",))
    assert options.hub_source("wikiann") == ("unimelb-nlp/wikiann", None)
    assert options.hub_source("my_source") == ("me/corpus", None)
    assert settings.to_json() == json.dumps({**HUB, "options": given}, sort_keys=True, separators=(",", ":"))
    assert DataSettings.parse(settings.to_json()) == settings
    assert settings.replace(languages=["de"]).options == options


def test_a_built_in_converter_refuses_an_option_it_does_not_read():
    xnli = get_task("xnli")
    with pytest.raises(InputError, match=r"tasks\.xnli\.options\.hubname: .* \(did you mean 'hub_name'\?\)"):
        unread_options(xnli, DataOptions.parse({"hubname": "x"}), "tasks.xnli.options")
    with pytest.raises(InputError, match="squad_path: LAReQA's training SQuAD is the task's hub.path"):
        unread_options(get_task("lareqa"), DataOptions.parse({"squad_path": "x"}), "tasks.lareqa.options")
    unread_options(xnli, DataOptions.parse({"hub_name": "x"}), "tasks.xnli.options")
    users = dataclasses.replace(xnli, converter="my_xnli.py")
    unread_options(users, DataOptions.parse({"hubname": "x"}), "tasks.xnli.options")


def test_local_files_read_a_column_by_its_mapped_name():
    files = LocalFiles.parse({"files": {"dev": "d.csv"}, "file_type": "csv", "columns": {"label": "gold"}})
    assert files.source_column("label") == "gold" and files.source_column("text_a") == "text_a"
    assert (files.converter, files.language) == ("columns", "en")
