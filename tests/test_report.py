"""What `snakemake --report` shows: tables as HTML pages (html_page.py), only figures drawn from
data (spec/availability.py, with the others named on one page: unavailable.py and
rules/report.smk), and the across-backbones figure's lines within one family ladder."""

from __future__ import annotations

import json
import re
import shlex

import pandas as pd
import pytest
import yaml

from conftest import REPO, copy_repo, snakemake
from workflow_scripts.reporting import compare_backbones, html_page, plots, unavailable
from workflow_scripts.spec import availability
from workflow_scripts.spec.report_settings import ArmPair, ComparisonSettings
from workflow_scripts.workflow import backbone_grid, grid_settings, transfer

MAIN_MD = """# Intermediate-task results: backbone xlmr_tiny

| intermediate | xnli | udpos | Avg |
|---|---:|---:|---:|
| none | 70.1 | 60.2 | 65.2 |
| mnli | +1.2 † | −0.4 | +0.4 |

Row `none` is absolute; the other rows are differences to it. <not a tag>
"""


def _cells(text: str, tag: str = "td") -> list[str]:
    return re.findall(rf"<{tag}(?: [^>]*)?>(.*?)</{tag}>", text)


@pytest.mark.unit
def test_a_markdown_table_becomes_an_html_table_with_its_notes(tmp_path):
    source = tmp_path / "main.md"
    source.write_text(MAIN_MD)
    html = html_page.render(source, decimals=2)
    assert "<h1>Intermediate-task results: backbone xlmr_tiny</h1>" in html
    assert _cells(html, "th") == ["intermediate", "xnli", "udpos", "Avg"]
    assert _cells(html) == ["none", "70.1", "60.2", "65.2", "mnli", "+1.2 †", "−0.4", "+0.4"]
    assert '<td class="num">+1.2 †</td>' in html and "<td>mnli</td>" in html  # numbers right-aligned
    assert "<code>none</code>" in html and "&lt;not a tag&gt;" in html
    assert "---" not in html, "the alignment row is not a table row"


@pytest.mark.unit
def test_a_csv_table_becomes_every_row_with_its_decimals(tmp_path):
    csv, page = tmp_path / "best.csv", tmp_path / "best.html"
    pd.DataFrame({"target": ["xnli", "udpos"], "seed": [1, 2], "value": [71.23456, float("nan")]}).to_csv(
        csv, index=False
    )
    html_page.main(["--decimals", "1", f"{page}={csv}"])
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in html
    assert _cells(html) == ["xnli", "1", "71.2", "udpos", "2", ""]
    assert str(csv) in html, "the page names the file it shows"


@pytest.mark.unit
def test_an_unknown_source_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="rendered from a .md or .csv"):
        html_page.main([f"{tmp_path / 'x.html'}={tmp_path / 'x.tex'}"])


@pytest.mark.unit
def test_the_unavailable_page_lists_each_missing_figure_with_its_reason(tmp_path):
    missing = [
        {"figure": "results/demo/figures/b/settings/x.png", "reason": "backbone b does not run setting x"},
        {"figure": "results/demo/figures/modality.png", "reason": "no pair"},
    ]
    page = tmp_path / "not_available.html"
    unavailable.main(["--missing", json.dumps(missing), "--html", str(page)])
    assert _cells(page.read_text()) == [
        "<code>results/demo/figures/b/settings/x.png</code>",
        "backbone b does not run setting x",
        "<code>results/demo/figures/modality.png</code>",
        "no pair",
    ]
    unavailable.main(["--missing", "[]", "--html", str(page)])
    assert "<td>" not in page.read_text() and "Every figure" in page.read_text()


def _demo_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


@pytest.mark.unit
def test_a_backbone_s_left_out_targets_settings_and_configs_have_no_figure():
    config = _demo_config()
    settings = grid_settings.table_settings(config, "llama_tiny")  # the demo's narrowed grid
    part = backbone_grid.grid_of(config, "llama_tiny")
    for target in config["targets"]:
        assert (availability.per_language(settings, target) is None) == (target in part["targets"])
    for setting in transfer.configured(config):
        assert (availability.setting_deltas(settings, setting) is None) == (setting in part["settings"])
    for name in config["intermediate"]:
        assert (availability.training_curves(settings, name) is None) == (name in part["intermediate"])
    assert availability.main_deltas(settings) is None
    only_baseline = settings.replace(intermediate=[settings.baseline])
    assert "besides the baseline" in availability.main_deltas(only_baseline)
    assert "besides the baseline" in availability.per_language(only_baseline, "xnli")
    pair = ArmPair(visual="a", control="b", task="snli_ve", control_task="snli_caption")
    assert availability.modality([]) and availability.modality([pair]) is None


@pytest.mark.unit
def test_plots_draw_a_placeholder_exactly_where_availability_has_a_reason(monkeypatch, tmp_path):
    config = _demo_config()
    settings = grid_settings.table_settings(config, "llama_tiny")
    drawn, placeholders = [], []
    monkeypatch.setattr(plots, "read_result_table", lambda path: None)
    for name in ("main_deltas", "seed_spread"):
        monkeypatch.setattr(plots, name, lambda *args: None)
    monkeypatch.setattr(plots, "per_language_deltas", lambda data, s, target, out: drawn.append(target))
    monkeypatch.setattr(plots, "setting_deltas", lambda data, s, setting, out: drawn.append(setting))
    monkeypatch.setattr(plots, "placeholder", lambda title, reason, stem: placeholders.append((stem.name, reason)))
    plots.plot_results(tmp_path, settings, tmp_path)
    part = backbone_grid.grid_of(config, "llama_tiny")
    others = [s for s in transfer.configured(config) if s != transfer.baseline_setting(config)]
    assert drawn == [t for t in config["targets"] if t in part["targets"]] + [
        s for s in others if s in part["settings"]
    ]
    assert {name for name, _ in placeholders} == {t for t in config["targets"] if t not in part["targets"]} | {
        transfer.path_token(s) for s in others if s not in part["settings"]
    }
    assert all("llama_tiny does not run" in reason for _, reason in placeholders)
    placeholders.clear()
    plots.plot_results(tmp_path, settings.replace(intermediate=[settings.baseline]), tmp_path)
    assert {"main_deltas", *part["targets"]} <= {name for name, _ in placeholders}, "no difference to draw"


def _comparison_settings() -> ComparisonSettings:
    """Configs none (the baseline) and mnli on xnli; the figure reads no backbone's description."""
    return ComparisonSettings(
        baseline="none", baseline_setting="zero_shot", targets=("xnli",), intermediate=("none", "mnli"), backbones={}
    )


def _comparison_frame() -> pd.DataFrame:
    """Avg differences of one config on two encoders, two decoders and one seq2seq backbone."""
    backbones = [
        ("enc_base", "encoder", 278_000_000, 1.0),
        ("dec_small", "decoder", 560_000_000, -0.5),
        ("enc_large", "encoder", 560_000_000, 2.0),
        ("dec_large", "decoder", 1_100_000_000, 0.5),
        ("s2s", "seq2seq", 580_000_000, 3.0),
    ]
    rows = []
    for name, family, params, value in backbones:
        rows.append((name, family, "full", params, "avg", "none", 60.0, "absolute", False))
        rows.append((name, family, "full", params, "avg", "mnli", value, "difference", False))
    frame = pd.DataFrame.from_records(rows, columns=compare_backbones.COLUMNS)
    return frame.sort_values(["parameters", "backbone"], kind="stable").reset_index(drop=True)


@pytest.mark.unit
def test_across_backbones_lines_join_only_one_family_smallest_first():
    settings = _comparison_settings()
    lines = compare_backbones.ladders(_comparison_frame(), settings)
    assert [(line.family, line.backbones) for line in lines] == [
        ("encoder", ("enc_base", "enc_large")),
        ("decoder", ("dec_small", "dec_large")),
        ("seq2seq", ("s2s",)),
    ]
    assert all(line.config == "mnli" for line in lines)
    assert lines[0].parameters == (278_000_000, 560_000_000) and lines[0].values == (1.0, 2.0)


@pytest.mark.unit
def test_the_across_backbones_figure_draws_those_lines_labelled_by_family(monkeypatch, tmp_path):
    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, stem: figures.append(fig))
    settings = _comparison_settings()
    compare_backbones.delta_figure(_comparison_frame(), settings, ["xnli"], tmp_path / "backbones_delta")
    (ax,) = figures[0].axes
    drawn = {
        line.get_label(): list(line.get_xdata()) for line in ax.get_lines() if not line.get_label().startswith("_")
    }
    assert drawn == {
        "encoder: mnli": [278_000_000, 560_000_000],
        "decoder: mnli": [560_000_000, 1_100_000_000],
        "seq2seq: mnli": [580_000_000],
    }
    assert ax.get_legend().get_title().get_text() == "family: config"


@pytest.mark.integration
def test_the_report_registers_figures_with_data_and_lists_the_others(tmp_path):
    """The demo's plan: list_unavailable_figures registers (as its inputs) every figure drawn
    from data, and names the placeholders (the decoder's narrowed grid, no image task) on its page."""
    repo = copy_repo(tmp_path)
    proc = snakemake(repo, "-n", "-p", "results/demo/figures/not_available.html", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    job = out[out.index("rule list_unavailable_figures:") :]
    registered = set(re.search(r"input: (.*)", job).group(1).split(", "))
    missing = json.loads(shlex.split(re.search(r"--missing (.*?) --html", job, re.S).group(1))[0])
    config = _demo_config()
    part = backbone_grid.grid_of(config, "llama_tiny")
    figures = "results/demo/figures"
    expected = {f"{figures}/{b}/modality.png" for b in config["backbones"]} | {f"{figures}/modality_scaling.png"}
    expected |= {f"{figures}/llama_tiny/per_language/{t}.png" for t in config["targets"] if t not in part["targets"]}
    expected |= {
        f"{figures}/llama_tiny/settings/{transfer.path_token(s)}.png"
        for s in transfer.configured(config)
        if s not in part["settings"]
    }
    expected |= {
        f"{figures}/llama_tiny/training/{c}.png" for c in config["intermediate"] if c not in part["intermediate"]
    }
    assert {m["figure"] for m in missing} == expected
    assert not registered & expected, "a placeholder is registered in the report"
    assert (
        f"{figures}/backbones_delta.png" in registered and f"{figures}/xlmr_tiny/per_language/xquad.png" in registered
    )
