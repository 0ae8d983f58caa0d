"""The paper presets against the project's specification, docs/protocol.md; the repository
carries that specification itself, and nothing in it reads files outside the repository."""

import re

import pytest

from conftest import REPO
from workflow_scripts.data.loaders.udpos import UD_LANGUAGE_NAMES
from workflow_scripts.data.loaders.xtreme import TATOEBA_CODES
from workflow_scripts.spec import benchmark
from workflow_scripts.spec.tasks import get_task
from workflow_scripts.workflow import config_check, config_layers
from workflow_scripts.workflow.grid_settings import intermediate_settings, target_settings

pytestmark = pytest.mark.unit

PROTOCOL = REPO / "docs" / "protocol.md"
TABLE_NAMES = {
    "XNLI": "xnli",
    "PAWS-X": "pawsx",
    "UD-POS": "udpos",
    "PAN-X": "panx",
    "XQuAD": "xquad",
    "MLQA": "mlqa",
    "TyDiQA-GoldP": "tydiqa",
    "BUCC 2018": "bucc",
    "Tatoeba": "tatoeba",
}
XTREME_R_TABLE_NAMES = {
    "XNLI": "xnli",
    "XCOPA": "xcopa",
    "UD-POS": "udpos",
    "WikiANN NER": "panx",
    "XQuAD": "xquad",
    "MLQA": "mlqa",
    "TyDiQA-GoldP": "tydiqa",
    "Tatoeba": "tatoeba",
    "Mewsli-X": "mewslix",
    "LAReQA": "lareqa",
}


def section(number: int) -> str:
    """The text of section ``number`` ("## N. ..."), up to the next numbered section."""
    text = PROTOCOL.read_text(encoding="utf-8")
    m = re.search(rf"^## {number}\. .*?(?=^## {number + 1}\. |^## Sources|\Z)", text, re.M | re.S)
    assert m, f"docs/protocol.md has no section {number}"
    return m.group(0)


def first_table(text: str) -> list[list[str]]:
    """The rows (cells stripped) of the first markdown table in ``text``, header and rule left out."""
    rows, started = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            started = True
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif started:
            break
    assert len(rows) > 2, "no table"
    return rows[2:]


def table_languages(number: int, names: dict[str, str], column: int) -> dict[str, list[str]]:
    out = {}
    for cells in first_table(section(number)):
        name = next((v for k, v in names.items() if cells[0].startswith(k)), None)
        assert name, f"§{number}: unexpected row {cells[0]!r}"
        langs = re.findall(r"\b[a-z]{2}\b", cells[column])
        count = re.search(r"\((\d+)\)\s*$", cells[column])
        assert count and int(count.group(1)) == len(langs), f"§{number} {cells[0]}: the count disagrees with the list"
        out[name] = langs
    return out


def protocol_languages() -> dict[str, list[str]]:
    return table_languages(3, TABLE_NAMES, 3)


def paper():
    from snakemake.utils import validate

    config = config_layers.load([REPO / "config/paper.yaml"])
    validate(config, str(config_check.schema_for_validation()))  # fills in the defaults (the records' blocks too)
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
    batch_epochs = {
        "anli_plus": (24, 2),
        "mnli": (24, 2),
        "qqp": (24, 3),
        "squad": (8, 3),
        "squad_v2": (8, 3),
        "hellaswag": (24, 7),
        "ccg": (24, 15),
        "cosmosqa": (4, 15),
        "commonsenseqa": (4, 10),
        "mlm": (8, 1),
        "xnli": (4, 2),
        "pawsx": (32, 5),
        "udpos": (32, 10),
        "panx": (32, 10),
        "xquad": (16, 2),
        "mlqa": (16, 2),
        "tydiqa": (16, 2),
    }
    for task, (batch, epochs) in batch_epochs.items():
        assert (config["tasks"][task]["batch_size"], config["tasks"][task]["epochs"]) == (batch, epochs), task
    assert intermediate_settings(config, "xlmr_large", "mnli").learning_rate == 1e-5
    assert intermediate_settings(config, "xlmr_large", "mnli_mlm").learning_rate == 5e-6
    assert target_settings(config, "xlmr_large", "xnli").learning_rate == 3e-6
    for phase in ("intermediate", "target"):
        s = (
            intermediate_settings(config, "xlmr_large", "mnli")
            if phase == "intermediate"
            else target_settings(config, "xlmr_large", "xnli")
        )
        assert (s.warmup_ratio, s.patience, s.dev_examples, s.multitask_cap) == (0.1, 30, 500, 2**17)
    assert config["retrieval"]["layer"] == 13 and config["retrieval"]["bucc_k"] == 4
    assert config["backbones"]["xlmr_large"]["hub_id"] == "FacebookAI/xlm-roberta-large"
    assert (config["backbones"]["xlmr_large"]["family"], config["backbones"]["xlmr_large"]["method"]) == (
        "encoder",
        "full",
    )
    qa = config["tasks"]["xquad"]
    assert (qa["max_length"], qa["doc_stride"], qa["max_query_length"], qa["n_best"], qa["max_answer_length"]) == (
        384,
        128,
        64,
        20,
        30,
    )
    assert {get_task(t).train_from for t in ("xquad", "mlqa")} == {"squad"}


def test_xtreme_r_languages_match_the_specification():
    expected = table_languages(8, XTREME_R_TABLE_NAMES, 2)
    assert expected == {t: list(l) for t, l in benchmark.XTREME_R.languages.items()}
    assert len(set().union(*expected.values())) == 50
    config = config_layers.load([REPO / "config/xtreme_r.yaml"])
    for target in config["targets"]:
        assert config["tasks"][target]["languages"] == expected[target], target


def test_every_cited_section_exists():
    """Code, configuration and tests cite the specification as "PROTOCOL.md §N" or
    "protocol.md §N" (§N-M, §N, §M): each section they name exists."""
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", PROTOCOL.read_text(encoding="utf-8"), re.M)}
    assert sections == set(range(1, 11))
    cited = {}
    files = [REPO / "Snakefile", REPO / "README.md", REPO / "config.yaml"]
    for folder in ("workflow_scripts", "tests", "config", "schemas", "rules", "benchmarks", "demo", "report"):
        files += [p for p in (REPO / folder).rglob("*") if p.suffix in (".py", ".yaml", ".smk", ".md", ".tex")]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r"protocol\.md((?:[ ,]*§\d+(?:-\d+)?)+)", text, re.I):
            for first, last in re.findall(r"§(\d+)(?:-(\d+))?", m.group(1)):
                for n in range(int(first), int(last or first) + 1):
                    cited.setdefault(n, path.relative_to(REPO))
    assert cited, "no citation found: the pattern no longer matches the code's"
    missing = {n: str(p) for n, p in cited.items() if n not in sections}
    assert not missing, f"sections cited but absent from docs/protocol.md: {missing}"


# Built from pieces so that this file does not match itself.
OUTSIDE = [
    re.compile(p)
    for p in (
        re.escape("../" + "shared"),
        re.escape("shared/" + "PROTOCOL"),
        re.escape("/work/" + "shared"),
        r"""["']shared["']\s*/\s*["']PROTOCOL""",
        r"REPO\.parent\s*/",
    )
]


def test_tests_and_code_read_nothing_outside_the_repository():
    """The specification lives in docs/protocol.md: no test or workflow script may point back
    at a copy outside the repository, which a user's clone does not have."""
    offenders = []
    for folder in ("tests", "workflow_scripts"):
        for path in sorted((REPO / folder).rglob("*")):
            if not path.is_file() or path.suffix in (".pyc",) or path.stat().st_size > 2_000_000:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for pattern in OUTSIDE:
                for m in pattern.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    offenders.append(f"{path.relative_to(REPO)}:{line}: {m.group(0)}")
    assert not offenders, "references outside the repository:\n" + "\n".join(offenders)
