"""The paper preset against the specification in ../shared/PROTOCOL.md."""

import re

import yaml

from conftest import REPO
from workflow_scripts.data.loaders.udpos import UD_LANGUAGE_NAMES
from workflow_scripts.data.loaders.xtreme import TATOEBA_CODES
from workflow_scripts.data.tasks import get_task
from workflow_scripts.workflow.grid import intermediate_settings, target_settings

PROTOCOL = REPO.parent / "shared" / "PROTOCOL.md"
TABLE_NAMES = {"XNLI": "xnli", "PAWS-X": "pawsx", "UD-POS": "udpos", "PAN-X": "panx", "XQuAD": "xquad",
               "MLQA": "mlqa", "TyDiQA-GoldP": "tydiqa", "BUCC 2018": "bucc", "Tatoeba": "tatoeba"}


def protocol_languages() -> dict[str, list[str]]:
    text = PROTOCOL.read_text()
    section = text.split("## 3. Target tasks")[1].split("Target-phase settings")[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4:
            name = next((v for k, v in TABLE_NAMES.items() if cells[0].startswith(k)), None)
            if name:
                out[name] = re.findall(r"\b[a-z]{2}\b", cells[3])
    return out


def paper():
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    validate(config, str(REPO / "schemas/config.schema.yaml"))  # fills in the defaults
    return config


def test_paper_preset_has_every_language_of_every_target():
    expected = protocol_languages()
    assert set(expected) == set(TABLE_NAMES.values())
    config = paper()
    for target, langs in expected.items():
        assert config["tasks"][target]["languages"] == langs, target
    assert all(lang in UD_LANGUAGE_NAMES for lang in expected["udpos"])
    assert all(lang in TATOEBA_CODES for lang in expected["tatoeba"])
    assert len(expected["panx"]) == 40 and len(expected["tatoeba"]) == 36


def test_paper_hyperparameters():
    config = paper()
    batch_epochs = {"anli_plus": (24, 2), "mnli": (24, 2), "qqp": (24, 3), "squad": (8, 3), "squad_v2": (8, 3),
                    "hellaswag": (24, 7), "ccg": (24, 15), "cosmosqa": (4, 15), "commonsenseqa": (4, 10),
                    "mlm": (8, 1), "xnli": (4, 2), "pawsx": (32, 5), "udpos": (32, 10), "panx": (32, 10),
                    "xquad": (16, 2), "mlqa": (16, 2), "tydiqa": (16, 2)}
    for task, (batch, epochs) in batch_epochs.items():
        assert (config["tasks"][task]["batch_size"], config["tasks"][task]["epochs"]) == (batch, epochs), task
    assert intermediate_settings(config, "xlmr_large", "mnli")["learning_rate"] == 1e-5
    assert intermediate_settings(config, "xlmr_large", "mnli_mlm")["learning_rate"] == 5e-6
    assert target_settings(config, "xlmr_large", "xnli")["learning_rate"] == 3e-6
    for phase in ("intermediate", "target"):
        s = (intermediate_settings(config, "xlmr_large", "mnli") if phase == "intermediate"
             else target_settings(config, "xlmr_large", "xnli"))
        assert (s["warmup_ratio"], s["patience"], s["dev_examples"], s["multitask_cap"]) == (0.1, 30, 500, 2 ** 17)
    assert config["retrieval"]["layer"] == 13 and config["retrieval"]["bucc_k"] == 4
    assert config["backbones"]["xlmr_large"]["hub_id"] == "FacebookAI/xlm-roberta-large"
    assert (config["backbones"]["xlmr_large"]["family"], config["backbones"]["xlmr_large"]["method"]) == ("encoder", "full")
    qa = config["tasks"]["xquad"]
    assert (qa["max_length"], qa["doc_stride"], qa["max_query_length"], qa["n_best"], qa["max_answer_length"]) == (
        384, 128, 64, 20, 30)
    assert {get_task(t).train_from for t in ("xquad", "mlqa")} == {"squad"}
