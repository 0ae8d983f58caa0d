"""One ``tasks.<name>`` entry of the config: where the task's rows come from (the Hub or local
files of its own), its evaluation languages, and how it trains and is read (the schema's
``$defs.task`` is generated from it, spec/schema_block.py). What a task *is* (format, splits,
metric) is its catalogue entry's (spec/tasks.py); this is what a grid sets for it.

Standard library only: the Snakefile imports this at parse time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from workflow_scripts.spec.local_data import LocalData, LocalDataEntry
from workflow_scripts.spec.record import Record, parsed_once
from workflow_scripts.spec.schema_block import LANGUAGE_CODE, key

Pooling = Literal["family", "first", "mean", "last"]


@dataclass(frozen=True, kw_only=True)
class HubEntry(Record):
    """``tasks.<name>.hub``: a Hub dataset and its revision."""

    key_noun = "config key"

    path: str = key(description="Hub dataset id (or its directory under data.local_root)", minLength=1)
    revision: str = key("main", description="Pin a commit sha for reproducible data", minLength=1)


@dataclass(frozen=True, kw_only=True)
class TaskEntry(Record):
    """A task of the grid as the config sets it up."""

    key_noun = "config key"

    hub: HubEntry | None = key(
        None,
        description="""Where the task's rows are on the Hub (or under data.local_root, with data.source local).
        A task gives hub or data, not both.""",
    )
    data: LocalDataEntry | None = key(
        None,
        description="""The task's rows from local files of its own instead of the Hub, whatever data.source says
        for the other tasks of the grid (docs/guides/own_data.md). The config check stops on a
        missing file, an unknown file type or a column the mapping needs that a file lacks.""",
    )
    languages: tuple[str, ...] | None = key(
        None,
        description="Evaluation languages of a target task (intermediate tasks are English).",
        items={"pattern": LANGUAGE_CODE},
        minItems=1,
        uniqueItems=True,
    )
    batch_size: int = key(32, minimum=1)
    epochs: float = key(3, exclusiveMinimum=0)
    max_length: int = key(128, minimum=8)
    doc_stride: int = key(128, minimum=1)
    max_query_length: int = key(64, minimum=1)
    n_best: int = key(20, minimum=1)
    max_answer_length: int = key(30, minimum=1)
    learning_rate: float | None = key(
        None,
        description="""This task's own learning rate when it trains as a target or a target's stage (XTREME-R
        trains XCOPA at 3e-5, Mewsli-X at 1e-5, LAReQA at 2e-5); default training.target.learning_rate.""",
        exclusiveMinimum=0,
    )
    pooling: Pooling = key(
        "family",
        description="""Ranking targets - how the dual encoder reads a sequence as one vector: family (the
        backbone family's: an encoder's first token, as XTREME-R's reference), first, mean or
        last. The demo's tiny encoders use mean (their first token is untrained).""",
    )
    lowercase: bool = key(
        False,
        description="Ranking targets - lower-case queries and candidates (XTREME-R runs XLM-R with --do_lower_case).",
    )
    stages: tuple[str, ...] | None = key(
        None,
        description="""Tasks trained (each selected on its own English dev split) before this target's own
        training, the model and its multiple-choice head carried from one to the next
        (XCOPA: [siqa], XTREME-R's recipe). [] switches them off. Default: the task
        catalogue's stages.""",
        uniqueItems=True,
    )
    min_answer_count: int = key(
        9,
        description="""VQA v2 - the answers given at least this many times in the training split form the
        answer vocabulary (9: the usual ~3,000 answers).""",
        minimum=1,
    )
    images: str | None = key(
        None,
        description="""Image tasks (snli_ve, and the image targets xvnli, marvl and xflickrco, whose test images
        are embedded for their evaluation) - the directory holding the images the rows name
        (SNLI-VE and XVNLI: Flickr30k's flickr30k-images; MaRVL: its image release;
        xFlickr&CO: one root holding flickr30k-images/ and coco-images/val2014/),
        optionally with a sha256sum-format SHA256SUMS manifest that each image is checked
        against. Default with data.source local:
        <local_root>/<hub path>/images; with hub it must be given (Flickr30k's images are
        distributed on request, not on the Hub).""",
        minLength=1,
    )
    options: dict[str, Any] = key(
        factory=dict,
        description="""Loader-specific options: mlm {snapshot, sentences, alpha, seed}; udpos {ud_release: URL,
        .tgz or directory of the UD v2.5 release, else the Hub's udpos configs; ud_release_extra:
        {release, languages, name}, a second release for some languages (XTREME-R: UD v2.7 for
        lt pl uk wo ro)}; panx {wikiann_path, wikiann_revision: languages google/xtreme lacks};
        tatoeba {tatoeba_path, tatoeba_revision: likewise, mteb/tatoeba-bitext-mining}; xquad
        {xquad_path, xquad_revision: likewise, google/xquad}; pawsx {pawsx_path, pawsx_revision:
        every language from this dataset (google-research-datasets/paws-x), whose rows are the
        release's, instead of google/xtreme's PAWS-X configs}; xcopa {question_repair: majority
        fixes the release's wrong cause/effect fields, a departure from the reference}; lareqa
        {xquad_r_path: URL or directory of XQuAD-R's released xquad-r/<lang>.json files, the test
        pool (default google-research-datasets/lareqa at a fixed commit; hub.path is the SQuAD
        its training pairs come from)}; mewslix {version}; bucc {archives};
        ccg {path}; xvnli, xvnli_caption, xvnli_hypothesis_only, marvl, xflickrco {path: the
        folder of e-bug/iglue's release files: datasets/XVNLI/annotations,
        datasets/marvl/zero_shot/annotations, datasets/xFlickrCO/annotations}; their few-shot
        pools (*_few_shot) {path: the shot files' folder, dev_path: the translated dev split's
        folder where it is another (marvl: datasets/nlvr2/annotations, xflickrco:
        datasets/flickr30k/annotations_machine-translate)}; span tasks, siqa,
        copa {hub_name}.""",
    )

    def languages_or(self, default: tuple[str, ...]) -> tuple[str, ...]:
        """Its evaluation languages, ``default`` where the entry names none."""
        return self.languages if self.languages is not None else default

    def local_data(self, task: str) -> LocalData | None:
        """Its local files (None: it reads the Hub or its local mirror)."""
        return LocalData.of(task, self.data.to_dict()) if self.data else None


def entry_of(config: dict[str, Any], name: str) -> TaskEntry:
    """The record of ``tasks.<name>``, parsed once per entry (InputError naming the key)."""
    return parsed_once(TaskEntry, config["tasks"][name], f"tasks.{name}")


def find(config: dict[str, Any], name: str) -> TaskEntry | None:
    """The record of ``tasks.<name>``, None where the config has no such entry."""
    return entry_of(config, name) if name in config["tasks"] else None


def entries(config: dict[str, Any]) -> dict[str, TaskEntry]:
    """Every task entry's record, in the config's order."""
    return {name: entry_of(config, name) for name in config["tasks"]}
