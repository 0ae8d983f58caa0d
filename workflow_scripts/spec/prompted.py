"""The prompted arm (config ``prompted``; docs/prompted.md): what lm-evaluation-harness
prompts of xstilts' tasks, and the settings its jobs and table receive.

A decoder backbone is prompted through lm-evaluation-harness's Python API with lm-eval's own
task configs (prompts, answer choices, generation settings, metrics), pointed at the rows the
fine-tuned arm scores: the pipeline's prepared test split, written out in the fields lm-eval's
task reads. Each task here names lm-eval's per-language task file and how a prepared row
becomes one of its documents; a task of the grid that is not here is one lm-eval cannot
score, and ``LM_EVAL_LACKS`` says why where it has a task that does not run.

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from workflow_scripts.spec.method import MethodSettings
from workflow_scripts.spec.record import Record
from workflow_scripts.spec.schema_block import key

# The version the task files below were read from and the jobs run (requirements.txt pins it).
LM_EVAL_VERSION = "0.4.13"

# How a prepared row becomes a document of lm-eval's task: NLI's premise, hypothesis and label
# (facebook/xnli's label order, which the catalogue's XNLI shares), a sentence pair's two
# sentences and label (PAWS-X: 0 different, 1 paraphrase, as the catalogue), or extractive
# QA's context, question and answers (SQuAD's nested ``answers``), or COPA's premise, question
# and two choices (the prepared context is ``"<premise> What was the <cause|effect>?"``,
# data/loaders/xcopa.copa_context, so both are read back from it exactly).
DocumentKind = Literal["nli", "pair", "qa", "copa"]


@dataclass(frozen=True)
class LmEvalTask:
    """One task of xstilts as lm-evaluation-harness prompts it."""

    task_file: str  # lm-eval's task file of a language, under lm_eval/tasks; {lang} is filled in
    document: DocumentKind
    metric: str  # lm-eval's metric the tables show beside the fine-tuned arm's
    languages: tuple[str, ...]  # the languages lm-eval has a task file for
    # TyDiQA's files hold every language; lm-eval keeps a language's rows by an id prefix
    id_prefixes: tuple[tuple[str, str], ...] = ()

    def file_of(self, lang: str) -> str:
        return self.task_file.format(lang=lang)

    def id_prefix(self, lang: str) -> str:
        return dict(self.id_prefixes).get(lang, "")


LM_EVAL_TASKS: dict[str, LmEvalTask] = {
    # lm_eval/tasks/xnli/xnli_<lang>.yaml: multiple choice over "premise, right? Yes|Also|No,
    # hypothesis" in the language's words; accuracy
    "xnli": LmEvalTask(
        "xnli/xnli_{lang}.yaml",
        "nli",
        "acc",
        ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh"),
    ),
    # lm_eval/tasks/paws-x/paws_<lang>.yaml (XTREME's, not XTREME-R's): multiple choice over
    # "sentence1, right? No|Yes, sentence2" in the language's words; accuracy
    "pawsx": LmEvalTask("paws-x/paws_{lang}.yaml", "pair", "acc", ("de", "en", "es", "fr", "ja", "ko", "zh")),
    # lm_eval/tasks/mlqa/mlqa_<lang>_<lang>.yaml: "Context: ... Question: ... Answer:", greedy
    # generation to the first newline; MLQA's official exact match and F1 per language
    "mlqa": LmEvalTask("mlqa/mlqa_{lang}_{lang}.yaml", "qa", "f1", ("ar", "de", "en", "es", "hi", "vi", "zh")),
    # lm_eval/tasks/xcopa/default_<lang>.yaml: the premise without its final period and the
    # language's connective for its question ("because"/"therefore" in its words), scored
    # against each choice with a lower-case first letter; accuracy
    "xcopa": LmEvalTask(
        "xcopa/default_{lang}.yaml",
        "copa",
        "acc",
        ("et", "ht", "id", "it", "qu", "sw", "ta", "th", "tr", "vi", "zh"),
    ),
    # lm_eval/tasks/tydiqa/tydiqa_goldp_<lang>.yaml: the prompt in the language's words, exact
    # match and F1 with per-language normalisation
    "tydiqa": LmEvalTask(
        "tydiqa/tydiqa_goldp_{lang}.yaml",
        "qa",
        "f1",
        ("ar", "bn", "en", "fi", "id", "ko", "ru", "sw", "te"),
        id_prefixes=(
            ("ar", "arabic-"),
            ("bn", "bengali-"),
            ("en", "english-"),
            ("fi", "finnish-"),
            ("id", "indonesian-"),
            ("ko", "korean-"),
            ("ru", "russian-"),
            ("sw", "swahili-"),
            ("te", "telugu-"),
        ),
    ),
}

# XTREME-R's tasks lm-eval has a task for that does not run here, and why (docs/prompted.md).
LM_EVAL_LACKS: dict[str, str] = {
    "xquad": (
        "lm-eval 0.4.13's xquad task imports transformers.data.metrics.squad_metrics, "
        "which transformers 5 no longer has"
    ),
}
NO_TASK = "lm-eval has no task for it"

ShotSource = Literal["english", "own"]


@dataclass(frozen=True, kw_only=True)
class PromptRun(Record):
    """How every prompted job runs: the keys the config's ``prompted`` block and a job's
    settings share."""

    shots: tuple[int, ...] = key(
        fill=(0, 5),
        minItems=1,
        items={"minimum": 0},
        description="The shot counts, one run each (0 is zero-shot prompting)",
    )
    shots_from: ShotSource = key(
        fill="english",
        description="""Where the k shots are drawn from: `english`, the English dev rows the
        fine-tuned arm selects on (the task's, COPA's for XCOPA, SQuAD's for TyDiQA-GoldP:
        English-only supervision, as the fine-tuned arm's); `own`, the prompted language's own
        dev rows""",
    )
    seed: int = key(minimum=0, fill=1234, description="lm-eval's few-shot sampler seed (and its other seeds)")
    batch_size: int = key(minimum=1, fill=8, description="Requests per forward pass (lm-eval's batch size)")


@dataclass(frozen=True, kw_only=True)
class PromptedEntry(PromptRun):
    """The config's ``prompted`` block (the schema's ``$defs.prompted`` is generated from it)."""

    key_noun = "config key"

    enabled: bool = key(
        fill=False, description="Prompt every decoder backbone and write its table (off by default, it adds jobs)"
    )
    backbones: tuple[str, ...] | None = key(
        None, nullable=True, description="The decoder backbones prompted; null, every decoder backbone of the config"
    )
    tasks: tuple[str, ...] | None = key(
        None,
        nullable=True,
        description="""The targets prompted, among those lm-eval prompts (xnli, pawsx, xcopa, mlqa,
        tydiqa); null, every such target of each backbone""",
    )


@dataclass(frozen=True, kw_only=True)
class PromptedSettings(PromptRun):
    """One backbone's prompted evaluation of one task, the same at every phase it is run at."""

    step: ClassVar[str] = "evaluation.prompted"

    task: str
    languages: tuple[str, ...]  # the task's configured languages lm-eval prompts
    family: str
    # the backbone's method and precision: every phase loads its weights in the same dtype
    method: MethodSettings


@dataclass(frozen=True)
class PromptedTableSettings(Record):
    """A backbone's fine-tuned-versus-prompted table."""

    step: ClassVar[str] = "reporting.prompted"

    backbone: str
    baseline: str  # the config whose model is the pretrained backbone (prompted "as it is")
    intermediate: tuple[str, ...]  # the backbone's configs, in the config's order
    seeds: tuple[int, ...]
    shots: tuple[int, ...]
    targets: tuple[str, ...]  # every target of the backbone: lm-eval's and the rest
    prompted: tuple[str, ...]  # the targets prompted
    why_not: dict[str, str]  # target -> why it is not prompted
    decimals: int = 1
