"""``results/README.md``, written from the workflow itself: every rule's outputs, log and
benchmark record as the rules declare them, so the description of the layout cannot go stale
(``tests/test_results_layout.py`` compares the committed file with a fresh one).

CLI: ``python -m workflow_scripts.workflow.layout [--output results/README.md]``
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from workflow_scripts.spec import paths
from workflow_scripts.spec.basics import REPO_ROOT

# A wildcard with its constraint ({task,mnli|xnli}) -> the bare wildcard ({task}).
_CONSTRAINED = re.compile(r"\{(\w+),[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")


def _pattern(path: str, experiment: str) -> str:
    path = _CONSTRAINED.sub(r"{\1}", str(path))
    path = path.replace(f"{paths.RESULTS}/{experiment}/", f"{paths.RESULTS}/<experiment>/")
    path = path.replace(f"{paths.LOGS}/{experiment}/", f"{paths.LOGS}/<experiment>/")
    # outputs listed once per target or transfer setting of the demo config stand for all of them
    path = re.sub(r"/per_language/[^/]+\.(png|svg|tex)$", r"/per_language/{target}.\1", path)
    return re.sub(r"/settings/[^/]+\.(png|svg)$", r"/settings/{setting}.\1", path)


def rule_layout(repo: Path = REPO_ROOT) -> list[dict]:
    """Each rule of the workflow (parsed with the default config): its docstring and the
    path patterns of its outputs, log and benchmark record."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(),
            storage_settings=StorageSettings(),
            snakefile=repo / "Snakefile",
            workdir=repo,
        )._workflow
        experiment = paths.experiment()
        found = []
        for rule in workflow.rules:
            if rule.name == "all":
                continue
            outputs = list(dict.fromkeys(_pattern(o, experiment) for o in rule.output))
            found.append(
                {
                    "rule": rule.name,
                    "doc": " ".join((rule.docstring or "").split()),
                    "outputs": outputs,
                    "log": [_pattern(x, experiment) for x in rule.log],
                    "benchmark": _pattern(rule.benchmark, experiment) if rule.benchmark else None,
                }
            )
    return found


def render(rules: list[dict]) -> str:
    lines = [
        "# results/",
        "",
        "Written by `python -m workflow_scripts.workflow.layout` from the rules themselves; do not edit.",
        "",
        f"Every experiment has its own folder, `{paths.RESULTS}/<experiment>/`, and its logs are under",
        f"`{paths.LOGS}/<experiment>/`. The experiment is the config's `experiment` key, else the name of the",
        f"last `--configfile` (`config/paper.yaml` -> `paper`), else `{paths.DEFAULT_EXPERIMENT}` for the",
        "repository's `config.yaml`. Two configs never overwrite each other's outputs.",
        "",
        f"Shared by every experiment, because their contents are keyed by what they hold: `{paths.SHARED_CACHE}/`",
        "(downloaded release archives under `downloads/`; image features under `image_features/`, keyed by the",
        "vision tower's weights and each image's bytes).",
        "",
        "Inside an experiment's folder, besides the outputs below: `benchmarks/<rule>/` (Snakemake's",
        "benchmark record of every job: wall time, memory; the cost table sums them), `checkpoints/`",
        "(resumable state of interrupted training jobs, removed when a job finishes),",
        "`cache/translation/` (the translation cache of the experiment's translators) and, with the config's",
        "`tracking` on, `tracking/` (the experiment trackers' records of its training and evaluation jobs:",
        "`tensorboard/`, `mlflow.db`, `wandb/`; docs/tracking.md).",
        "",
        "| rule | what | outputs | log |",
        "|---|---|---|---|",
    ]
    for r in rules:
        outputs = "<br>".join(f"`{o}`" for o in r["outputs"])
        log = "<br>".join(f"`{x}`" for x in r["log"])
        lines.append(f"| `{r['rule']}` | {r['doc']} | {outputs} | {log} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, help="write here instead of standard output")
    args = ap.parse_args(argv)
    text = render(rule_layout())
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
