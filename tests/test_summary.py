"""The summary printed at the end of a run."""

import pytest

from workflow_scripts.operations.summary import run_summary

pytestmark = pytest.mark.unit


def test_summary_names_the_outputs_and_shows_each_backbones_baseline_setting_table(tmp_path):
    results = tmp_path / "results" / "demo"
    assert run_summary(results, ["xlmr", "llama"], "demo") == "", "nothing to summarise before the tables exist"
    for backbone, cell in (("xlmr", "a"), ("llama", "c"), ("other", "z")):
        tables = results / "tables" / backbone
        tables.mkdir(parents=True)
        (tables / "main.md").write_text(
            f"# Intermediate-task results\n\n## zero_shot (baseline setting)\n\n| {cell} |\n"
            "\n## translate_train\n\n| b |\n"
        )
    (results / "tables/backbones.md").write_text("# Across backbones\n")
    (results / "figures/xlmr/per_language").mkdir(parents=True)
    (results / "figures/xlmr/per_language/xnli.png").write_bytes(b"")
    summary = run_summary(results, ["xlmr", "llama"], "demo")
    assert "experiment demo" in summary
    assert "main.md" in summary and "1 PNG" in summary and "snakemake --report" in summary
    assert "backbones.md" in summary
    assert "# backbone xlmr\n## zero_shot (baseline setting)\n\n| a |" in summary
    assert "# backbone llama\n## zero_shot (baseline setting)\n\n| c |" in summary
    assert "translate_train" not in summary
    assert "# backbone other" not in summary and "| z |" not in summary, "a backbone of another config's run"
