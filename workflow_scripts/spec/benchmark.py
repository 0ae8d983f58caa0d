"""The benchmarks a grid can be scored as: XTREME (Hu et al. 2020), XTREME-R (Ruder et al.
2021) and IGLUE (Bugliarello et al. 2022), each a registry of its targets, their categories
and official language lists.

``benchmark`` in the config picks one. Its targets are the only ones the config may list;
its categories give the tables their category averages and overall score: the mean of the
task scores, a QA task counting (F1 + EM) / 2 and every other task its primary metric
(docs/protocol.md §3, §8), as the official ``evaluate.py`` averages them. A target run on fewer
languages than the benchmark defines (the demo, a partial grid) is scored on those, and
the tables say its score is not comparable with published ones.

Standard library only: the Snakefile imports this to validate the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workflow_scripts.spec.suggest import did_you_mean

CLASSIFICATION = "classification"
STRUCTURED = "structured prediction"
QA = "question answering"
RETRIEVAL = "retrieval"
CATEGORIES = (CLASSIFICATION, STRUCTURED, QA, RETRIEVAL)


def _langs(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_XNLI = _langs("ar bg de el en es fr hi ru sw th tr ur vi zh")
_UDPOS = _langs("af ar bg de el en es et eu fa fi fr he hi hu id it ja kk ko mr nl pt ru ta te th tl tr ur vi yo zh")
_PANX = _langs(
    "af ar bg bn de el en es et eu fa fi fr he hi hu id it ja jv ka kk ko ml mr ms my nl pt ru "
    "sw ta te th tl tr ur vi yo zh"
)
_TATOEBA = _langs(
    "af ar bg bn de el es et eu fa fi fr he hi hu id it ja jv ka kk ko ml mr nl pt ru sw ta te th tl tr ur vi zh"
)
_XQUAD = _langs("ar de el en es hi ru th tr vi zh")
_MLQA = _langs("ar de en es hi vi zh")
_TYDIQA = _langs("ar bn en fi id ko ru sw te")


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    categories: dict[str, tuple[str, ...]]  # category -> its targets, in the paper's order
    languages: dict[str, tuple[str, ...]]  # target -> the official evaluation languages
    leaderboard_names: dict[str, str] = field(default_factory=dict)  # our target -> its folder in a submission
    # What a reader must know to compare a target's numbers with published ones.
    notes: dict[str, str] = field(default_factory=dict)
    # Retrieval targets embedding with a trained target's encoder instead of the backbone the
    # intermediate phase left (retrieval.encoders overrides it).
    retrieval_encoders: dict[str, str] = field(default_factory=dict)
    # The main table follows Avg with the category averages and the overall score, as the
    # benchmark's paper reports them (XTREME-R's); XTREME's paper reports the tasks and Avg.
    category_layout: bool = False
    # Languages scored and reported but left out of every cross-language average (IGLUE's
    # tables average the languages other than English: metrics.average_without_english).
    average_excludes: tuple[str, ...] = ()

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(t for targets in self.categories.values() for t in targets)

    def describe(self) -> dict[str, object]:
        found: dict[str, object] = {
            "name": self.name,
            "title": self.title,
            "categories": {c: list(t) for c, t in self.categories.items()},
            "languages": {t: list(l) for t, l in self.languages.items()},
            "notes": dict(self.notes),
            "leaderboard_names": dict(self.leaderboard_names),
            "retrieval_encoders": dict(self.retrieval_encoders),
        }
        if self.average_excludes:  # (absent for the others: their tables' settings stay as they were)
            found["average_excludes"] = list(self.average_excludes)
        return found


XTREME = Benchmark(
    name="xtreme",
    title="XTREME",
    categories={
        CLASSIFICATION: ("xnli", "pawsx"),
        STRUCTURED: ("udpos", "panx"),
        QA: ("xquad", "mlqa", "tydiqa"),
        RETRIEVAL: ("bucc", "tatoeba"),
    },
    languages={
        "xnli": _XNLI,
        "pawsx": _langs("de en es fr ja ko zh"),
        "udpos": _UDPOS,
        "panx": _PANX,
        "xquad": _XQUAD,
        "mlqa": _MLQA,
        "tydiqa": _TYDIQA,
        "bucc": _langs("de fr ru zh"),
        "tatoeba": _TATOEBA,
    },
    leaderboard_names={"bucc": "bucc2018"},
)

XTREME_R = Benchmark(
    name="xtreme_r",
    title="XTREME-R",
    categories={
        CLASSIFICATION: ("xnli", "xcopa"),
        STRUCTURED: ("udpos", "panx"),
        QA: ("xquad", "mlqa", "tydiqa"),
        RETRIEVAL: ("tatoeba", "mewslix", "lareqa"),
    },
    languages={
        "xnli": _XNLI,
        "xcopa": _langs("et ht id it qu sw ta th tr vi zh"),
        "udpos": tuple(sorted(_UDPOS + _langs("lt pl uk wo ro"))),
        "panx": tuple(sorted(_PANX + _langs("qu pl uk az lt pa gu ro"))),
        "xquad": tuple(sorted(_XQUAD + ("ro",))),
        "mlqa": _MLQA,
        "tydiqa": _TYDIQA,
        "tatoeba": tuple(sorted(_TATOEBA + _langs("az lt pl uk ro"))),
        "mewslix": _langs("ar de en es fa ja pl ro ta tr uk"),
        "lareqa": _langs("ar de el en es hi ru th tr vi zh"),
    },
    notes={
        "mewslix": "Mewsli-X data version 20220518_6 was re-sampled after the XTREME-R paper: its published "
        "numbers are not comparable with scores on the released data",
        "lareqa": "mAP@20 as XTREME-R's code scores it (the LAReQA paper reports full mAP)",
        "xcopa": "trained on SIQA, then on English COPA (XTREME-R's recipe) unless tasks.xcopa.stages is []",
        "tatoeba": "embedded with the encoder of the run's XQuAD model (fine-tuned on SQuAD), as XTREME-R's code does",
    },
    retrieval_encoders={"tatoeba": "xquad"},
    category_layout=True,
)

_XVNLI = _langs("ar en es fr ru")

# IGLUE's multimodal targets. XVNLI's caption and hypothesis-only arms (the same test rows
# with the translated caption, or nothing, as premise; docs/protocol.md §9) are scored beside
# it. MaRVL is trained from NLVR2 and scored on its own images; xFlickr&CO is trained from
# Flickr30k and scored by retrieval over its own images, both directions (docs/multimodal.md).
IGLUE = Benchmark(
    name="iglue",
    title="IGLUE",
    categories={
        CLASSIFICATION: ("xvnli", "xvnli_caption", "xvnli_hypothesis_only", "marvl"),
        RETRIEVAL: ("xflickrco",),
    },
    languages={
        "xvnli": _XVNLI,
        "xvnli_caption": _XVNLI,
        "xvnli_hypothesis_only": _XVNLI,
        "marvl": _langs("id sw ta tr zh"),
        "xflickrco": _langs("de en es id ja ru tr zh"),
    },
    notes={
        "xvnli": "IGLUE's accuracy: the release's rows without a gold label count as wrong (all three arms)",
        "xvnli_caption": "XVNLI's text control (the translated caption as premise), not an IGLUE task",
        "xvnli_hypothesis_only": "XVNLI's text control without a premise, not an IGLUE task",
    },
    average_excludes=("en",),
)

BENCHMARKS: dict[str, Benchmark] = {}
DEFAULT = XTREME.name


def register(bench: Benchmark) -> Benchmark:
    """Add a benchmark to BENCHMARKS (the config's ``benchmark`` names one), checked: its
    categories are the four the tables know and every target has its language list."""
    if bench.name in BENCHMARKS:
        raise ValueError(f"benchmark {bench.name!r} is declared twice")
    unknown = [c for c in bench.categories if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"benchmark {bench.name}: categories {unknown} are not among {', '.join(CATEGORIES)}")
    if len(set(bench.targets)) != len(bench.targets):
        raise ValueError(f"benchmark {bench.name}: a target is in two categories ({', '.join(bench.targets)})")
    if set(bench.languages) != set(bench.targets):
        raise ValueError(
            f"benchmark {bench.name}: languages must list exactly its targets "
            f"(missing {sorted(set(bench.targets) - set(bench.languages))}, "
            f"extra {sorted(set(bench.languages) - set(bench.targets))})"
        )
    for kind, keys in (
        ("leaderboard_names", bench.leaderboard_names),
        ("notes", bench.notes),
        ("retrieval_encoders", bench.retrieval_encoders),
    ):
        extra = sorted(set(keys) - set(bench.targets))
        if extra:
            raise ValueError(f"benchmark {bench.name}: {kind} names {extra}, which are not its targets")
    BENCHMARKS[bench.name] = bench
    return bench


register(XTREME)
register(XTREME_R)
register(IGLUE)


def get(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise KeyError(
            f"unknown benchmark {name!r}{did_you_mean(name, BENCHMARKS)}; known: {', '.join(BENCHMARKS)}"
        ) from None


def of_config(config: dict) -> Benchmark:
    return get(config.get("benchmark", DEFAULT))


def category_scores(task_scores: dict[str, float], bench: Benchmark) -> dict[str, float | None]:
    """Each category's mean task score and the overall score (the mean over all the
    benchmark's tasks); None where a task of it has no score, as the official scorer leaves
    a category out unless all its tasks were submitted."""
    out: dict[str, float | None] = {}
    for category, targets in bench.categories.items():
        values = [task_scores.get(t) for t in targets]
        out[category] = None if any(v is None for v in values) else sum(values) / len(values)  # type: ignore[arg-type]
    values = [task_scores.get(t) for t in bench.targets]
    out["overall"] = None if any(v is None for v in values) else sum(values) / len(values)  # type: ignore[arg-type]
    return out
