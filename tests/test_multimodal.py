"""The multimodal comparison end to end (config/multimodal_demo.yaml, docs/protocol.md §9): SNLI-VE
with the image as premise beside its two text-only controls built from the same rows, the
baseline and MNLI, on the demo's synthetic image world."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import copy_repo, job_counts, planned_jobs, snakemake
from workflow_scripts.planning.cost import parse_dry_run
from workflow_scripts.workflow import config_layers

pytestmark = pytest.mark.integration

CONFIG = "config/multimodal_demo.yaml"


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("repo"))


def test_the_multimodal_demo_config_plans_the_image_arm_and_both_controls_from_the_same_rows(repo):
    jobs = planned_jobs(repo, "--configfile", CONFIG)
    trained = {Path(out).parts[3:5] for rule, out in jobs if rule == "train_intermediate"}
    arms = ("snli_ve", "snli_caption", "hypothesis_only")
    # the decoder runs each arm under both recipes, the encoder under the standard one
    assert trained == {("xlmr_tiny", c) for c in ("mnli", *arms)} | {
        ("llama_tiny", c) for a in arms for c in (a, f"{a}@mixed_merged")
    }
    prepared = {out for rule, out in jobs if rule == "prepare_task_data"}
    assert {
        f"results/multimodal_demo/data/{task}/{split}.parquet"
        for task in ("snli_ve", "snli_caption", "hypothesis_only")
        for split in ("train", "dev")
    } <= prepared
    assert ("embed_images", "results/multimodal_demo/data/images/snli_ve") in jobs
    assert ("prepare_vision_encoder", "results/multimodal_demo/models/vision_encoder") in jobs
    assert ("tabulate_modality", "results/multimodal_demo/tables/xlmr_tiny/modality.md") in jobs


def test_an_image_task_trains_on_its_machine_translated_rows(repo):
    """``language: de`` on an image task: the translate step translates SNLI-VE's hypotheses
    into German and the translated config trains on them, with the English rows' image bank."""
    from workflow_scripts.workflow import grid_checks

    layer = {
        "extends": CONFIG,
        "experiment": "snli_ve_de",
        "models": {
            "translators": {"de": {"hub_id": "Helsinki-NLP/opus-mt-en-de", "revision": "main"}},
            # the default demo's translator (config.yaml); the demo layer names none
            "translator_demo": yaml.safe_load((repo / "config.yaml").read_text())["models"]["translator_demo"],
        },
        "intermediate": {"snli_ve_de": {"tasks": ["snli_ve"], "language": "de"}},
    }
    (repo / "snli_ve_de.yaml").write_text(yaml.safe_dump(layer, sort_keys=False))
    config = config_layers.load([repo / "snli_ve_de.yaml"])
    grid_checks.check_config(config)
    proc = snakemake(repo, "-n", "--configfile", "snli_ve_de.yaml", "--printshellcmds", timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    results = "results/snli_ve_de"
    translated = {split: f"{results}/data_mt/snli_ve/de/{split}.parquet" for split in ("train", "dev")}
    shells = [line for line in out.splitlines() if "python -m workflow_scripts." in line]
    for split, path in translated.items():
        assert any(
            "translation.translate data --task snli_ve --lang de" in cmd
            and f"--input {results}/data/snli_ve/{split}.parquet" in cmd
            and f"--output {path}" in cmd
            for cmd in shells
        ), split
    training = [cmd for cmd in shells if "training.train" in cmd and "/snli_ve_de/seed1/" in cmd]
    assert training, "no intermediate training of snli_ve_de"
    assert all(path in training[0] for path in translated.values()) and '"language":"de"' in training[0]
    assert f"{results}/data/images/snli_ve" in training[0]  # the English rows' feature bank
    assert "translate_task_data" in job_counts(out)


def test_the_paper_multimodal_preset_builds_its_grid_offline(repo):
    proc = snakemake(repo, "-n", "--configfile", "config/multimodal.yaml", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    counts = {
        line.split()[0]: int(line.split()[1])
        for line in out.split("Job stats:")[1].splitlines()[3:]
        if len(line.split()) == 2 and line.split()[1].isdigit()
    }
    config = config_layers.load([repo / "config/multimodal.yaml"])
    assert counts["embed_images"] == 4 and counts["prepare_vision_encoder"] == 1 and counts["tabulate_modality"] == 1
    assert counts["train_intermediate"] == (len(config["intermediate"]) - 1) * 3
    assert counts["evaluate_target"] == len(config["intermediate"]) * 10 * 3  # every XTREME-R target
    assert "results/multimodal/intermediate/xlmr_large/snli_ve/seed3/encoder" in out


def test_the_modality_by_size_preset_builds_its_grid_offline(repo):
    """Its grid, with the prompted arm switched on as its comment says (docs/prompted.md), as
    the Slurm profile submits it: each job with the time limit its cost estimate gives."""
    (repo / "bloom_prompted.yaml").write_text("extends: config/modality_scaling.yaml\nprompted: {enabled: true}\n")
    proc = snakemake(repo, "-n", "--profile", "slurm", "--configfile", "bloom_prompted.yaml", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = job_counts(proc.stdout + proc.stderr)
    config = config_layers.load([repo / "config/modality_scaling.yaml"])
    configs = {
        name: (entry.get("grid") or {}).get("intermediate") or list(config["intermediate"])
        for name, entry in config["backbones"].items()
    }
    # every backbone trains each of its configs but the baseline, per seed, and evaluates each on every target
    assert counts["train_intermediate"] == sum(len(c) - 1 for c in configs.values()) * len(config["seeds"])
    assert counts["evaluate_target"] == sum(len(c) for c in configs.values()) * len(config["seeds"]) * 10
    assert counts["prepare_backbone"] == len(config["backbones"]) and counts["embed_images"] == 1
    assert counts["compare_modality"] == 1 and counts["tabulate_modality"] == len(config["backbones"])
    # the retention probe: every backbone before, after each config's intermediate phase and
    # after its first target's zero-shot training, and its table
    assert counts["probe_retention_before"] == counts["tabulate_retention"] == len(config["backbones"])
    assert counts["probe_retention"] == counts["train_intermediate"]
    assert counts["probe_retention_target"] == sum(len(c) for c in configs.values()) * len(config["seeds"])
    # the prompted arm: the BLOOM ladder, each model as it is and after each phase, each
    # asking for the GPUs that hold its weights
    gpus = {}
    for block in proc.stdout.split("rule evaluate_prompted:")[1:]:
        output = re.search(r"output: (\S+?),", block).group(1)
        gpus[output] = int(re.search(r"resources: .*?\bgpu=(\d+)", block).group(1))
    ladder = [b for b, entry in config["backbones"].items() if entry["family"] == "decoder"]
    root = "results/bloom_prompted/prompted"
    assert {out.split("/")[3] for out in gpus} == set(ladder) and len(ladder) == 6
    assert {out.rsplit("/", 1)[1] for out in gpus} == {"xnli.json", "xcopa.json", "mlqa.json", "tydiqa.json"}
    runs = {b: 1 + (len(configs[b]) - 1) * len(config["seeds"]) for b in ladder}  # pretrained + each phase
    assert len(gpus) == 4 * sum(runs.values())
    assert gpus[f"{root}/bloom_176b/none/pretrained/xnli.json"] == 6  # 176B in bf16 over 80 GB GPUs
    assert gpus[f"{root}/bloom_560m/snli_ve/seed1/mlqa.json"] == 1
    assert counts["tabulate_prompted"] == len(ladder) and counts["compare_prompted"] == 1
    # time limits from the estimates (planning/job_estimates.py): a 278M and a 176B backbone,
    # a short and a long target, each asks for its own; the configured 240 minutes cap them
    jobs = parse_dry_run(proc.stdout + proc.stderr)

    def limit(rule, backbone, target):
        found = {j["runtime"] for j in jobs if j["rule"] == rule and j["wildcards"].get("backbone") == backbone
                 and j["wildcards"].get("target") == target}  # fmt: skip
        assert len(found) == 1, (rule, backbone, target, found)
        return found.pop()

    assert limit("train_target", "xlmr_base", "panx") < limit("train_target", "bloom_176b", "panx")
    # where FLOPs set the time, the smaller task is the shorter; where the host does, the one
    # with more micro-steps (XNLI at batch 4: a quarter-million)
    assert limit("train_target", "bloom_7b1", "panx") < limit("train_target", "bloom_7b1", "xquad")
    assert limit("train_target", "xlmr_base", "panx") < limit("train_target", "xlmr_base", "xnli")
    assert limit("evaluate_target", "xlmr_base", "xnli") < limit("evaluate_target", "bloom_7b1", "xnli")
    assert limit("train_target", "bloom_176b", "xnli") == 240


def test_the_iglue_preset_plans_zero_shot_and_translate_test_on_the_releases_translations(repo):
    jobs = planned_jobs(repo, "--configfile", "config/iglue.yaml")
    metrics = {tuple(Path(out).parts[4:7:2]) for rule, out in jobs if rule == "evaluate_target"}
    targets = ("xvnli", "xvnli_caption", "xvnli_hypothesis_only", "marvl", "xflickrco")
    assert metrics == {(setting, t) for setting in ("zero_shot", "translate_test") for t in targets}
    prepared = {Path(out).parts[3] for rule, out in jobs if rule == "prepare_task_data"}
    assert {f"{t}_gmt" for t in targets} <= prepared
    assert not any(rule.startswith("translate_") for rule, _ in jobs)  # no pipeline translation


def test_an_image_task_read_from_the_hub_needs_its_image_folder(repo):
    config = config_layers.load([repo / "config/multimodal.yaml"])
    del config["tasks"]["snli_ve"]["images"]
    (repo / "no_images.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = snakemake(repo, "-n", "--configfile", "no_images.yaml", timeout=300)
    assert proc.returncode != 0 and "config key tasks.snli_ve.images" in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def demo_run(repo) -> Path:
    proc = snakemake(repo, "--cores", "2", "--configfile", CONFIG, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return repo


def _log(repo: Path, config: str) -> dict:
    return json.loads(
        (repo / f"results/multimodal_demo/intermediate/xlmr_tiny/{config}/seed1/encoder/train_log.json").read_text()
    )


def test_the_image_arm_uses_the_image_its_dev_score_beats_hypothesis_only(demo_run):
    """The hypotheses alone cannot tell entailment from contradiction (scene_world.py): a dev
    score above the hypothesis-only arm's needs the premise, here the image."""
    visual, hypothesis_only = _log(demo_run, "snli_ve"), _log(demo_run, "hypothesis_only")
    ve, hyp = (
        visual["best"]["scores"]["snli_ve"]["accuracy"],
        hypothesis_only["best"]["scores"]["hypothesis_only"]["accuracy"],
    )
    assert ve > hyp + 10, (ve, hyp)
    assert visual["visual"]["saved"] is False
    branch = visual["visual"]["tasks"]["snli_ve"]
    assert branch["visual_tokens"] == 17 and branch["kind"] == "patches" and branch["projector_parameters"] > 0


def test_images_are_embedded_once_and_the_target_phase_is_text_only(demo_run):
    report = json.loads((demo_run / "results/multimodal_demo/data/images/snli_ve/report.json").read_text())
    assert report["images_dropped"] == {} and report["embedded"] + report["from_cache"] <= report["images"]
    cache = list((demo_run / "results/cache/image_features").rglob("*.npy"))
    assert len(cache) == report["embedded"]  # one entry per distinct image
    # the intermediate model is a text backbone: no projector weights in it
    from safetensors import safe_open

    with safe_open(
        str(demo_run / "results/multimodal_demo/intermediate/xlmr_tiny/snli_ve/seed1/encoder/model.safetensors"), "pt"
    ) as f:
        assert not any("projector" in k or "heads" in k for k in f.keys())
    metric = json.loads(
        (demo_run / "results/multimodal_demo/metrics/xlmr_tiny/zero_shot/snli_ve/xnli/seed1.json").read_text()
    )
    assert metric["intermediate_visual"]["text_only"] is True and "snli_ve" in metric["intermediate_visual"]["tasks"]
    control = json.loads(
        (demo_run / "results/multimodal_demo/metrics/xlmr_tiny/zero_shot/snli_caption/xnli/seed1.json").read_text()
    )
    assert "intermediate_visual" not in control


def test_the_modality_table_and_figure_pair_the_image_arm_with_each_control(demo_run):
    table = pd.read_csv(demo_run / "results/multimodal_demo/tables/xlmr_tiny/modality.csv")
    assert set(zip(table["visual"], table["control"])) == {("snli_ve", "snli_caption"), ("snli_ve", "hypothesis_only")}
    assert set(table["group"]) == {"en", "zero-shot", "all"}
    runs = pd.read_csv(demo_run / "results/multimodal_demo/tables/xlmr_tiny/runs.csv")
    test = runs[(runs["split"] == "test") & (runs["target"] == "xnli") & (runs["language"] == "de")]
    by_config = test.set_index("intermediate")["value"]
    row = table[(table["control"] == "snli_caption") & (table["group"] == "all")].iloc[0]
    langs = runs[(runs["split"] == "test") & (runs["language"] != "avg")]
    expected = (
        langs[langs["intermediate"] == "snli_ve"].set_index("language")["value"]
        - langs[langs["intermediate"] == "snli_caption"].set_index("language")["value"]
    ).mean()
    assert row["mean_difference"] == pytest.approx(expected, abs=1e-3) and len(by_config) == 5
    assert (demo_run / "results/multimodal_demo/figures/xlmr_tiny/modality.png").stat().st_size > 1000
    assert "caption premise" in (demo_run / "results/multimodal_demo/tables/xlmr_tiny/modality.md").read_text()


def test_the_table_across_backbones_holds_each_backbones_differences_with_intervals(demo_run):
    """Two backbones of two families (the demo encoder, the demo decoder with LoRA): the table
    across sizes repeats each backbone's own modality rows, beside its size."""
    results = demo_run / "results/multimodal_demo"
    scaling = pd.read_csv(results / "tables/modality_scaling.csv")
    assert list(dict.fromkeys(scaling["backbone"])) == ["xlmr_tiny", "llama_tiny"]
    assert dict(zip(scaling["backbone"], scaling["family"])) == {"xlmr_tiny": "encoder", "llama_tiny": "decoder"}
    for backbone in ("xlmr_tiny", "llama_tiny"):
        own = pd.read_csv(results / f"tables/{backbone}/modality.csv")
        mine = scaling[scaling["backbone"] == backbone].reset_index(drop=True)
        recipes = {"xlmr_tiny": {"standard"}, "llama_tiny": {"standard", "mixed_merged"}}[backbone]
        assert set(own["recipe"]) == set(mine["recipe"]) == recipes
        assert len(mine) == len(own) == 6 * len(recipes)  # two controls x three language groups per recipe
        pd.testing.assert_series_equal(mine["mean_difference"], own["mean_difference"], check_exact=False, atol=1e-3)
        assert (mine["parameters"] > 0).all()
        # three other languages: a point with an interval around it
        other = mine[mine["group"] == "zero-shot"]
        assert other["ci_low"].notna().all() and (other["ci_low"] <= other["mean_difference"]).all()
        assert (other["mean_difference"] <= other["ci_high"]).all()
    text = (results / "tables/modality_scaling.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| image config"))
    assert header.index("xlmr_tiny (encoder") < header.index("llama_tiny (decoder")
    assert (results / "figures/modality_scaling.png").stat().st_size > 1000
    assert (results / "figures/modality_scaling.svg").is_file()


def test_a_second_recipe_trains_lora_with_a_text_share_and_merges_back(demo_run):
    """The decoder's arms under mixed_merged (docs/multimodal.md, "Arm recipes"): a quarter of
    the steps MNLI, the LoRA update halved after the phase, the recipe named down to the
    metric file, and each arm paired with its twin under the same recipe."""
    results = demo_run / "results/multimodal_demo"
    log = json.loads(
        (results / "intermediate/llama_tiny/snli_ve@mixed_merged/seed1/encoder/train_log.json").read_text()
    )
    standard = json.loads((results / "intermediate/llama_tiny/snli_ve/seed1/encoder/train_log.json").read_text())
    assert log["task_probabilities"] == {"mnli": 0.25, "snli_ve": 0.75} and "merge_back" not in standard
    assert log["merge_back"]["alpha"] == 0.5 and log["merge_back"]["lora_B_scaled"] > 0
    assert set(log["best"]["scores"]) == {"snli_ve", "mnli"}
    metric = json.loads((results / "metrics/llama_tiny/zero_shot/snli_ve@mixed_merged/xnli/seed1.json").read_text())
    assert metric["arm_recipe"]["name"] == "mixed_merged" and metric["arm_recipe"]["text_task"] == "mnli"
    assert json.loads((results / "metrics/llama_tiny/zero_shot/snli_ve/xnli/seed1.json").read_text())["arm_recipe"] == {
        "name": "standard",
        "trains": "backbone",
        "text_share": 0.0,
        "merge_back": 0.0,
    }
    table = pd.read_csv(results / "tables/llama_tiny/modality.csv")
    assert set(zip(table["visual"], table["control"], table["recipe"])) == {
        (f"snli_ve{s}", f"{c}{s}", r)
        for r, s in (("standard", ""), ("mixed_merged", "@mixed_merged"))
        for c in ("snli_caption", "hypothesis_only")
    }
    assert (
        "- mixed_merged (trains adapters, 0.25 mnli, merge-back 0.5)"
        in (results / "tables/llama_tiny/modality.md").read_text()
    )


def test_a_changed_recipe_reruns_only_its_arms(demo_run):
    layer = {"extends": CONFIG, "experiment": "multimodal_demo", "arm_recipes": {"mixed_merged": {"text_share": 0.3}}}
    (demo_run / "recipe_edit.yaml").write_text(yaml.safe_dump(layer, sort_keys=False))
    jobs = planned_jobs(demo_run, "--configfile", "recipe_edit.yaml")
    trained = {Path(out).parts[3:5] for rule, out in jobs if rule == "train_intermediate"}
    assert trained == {("llama_tiny", f"{a}@mixed_merged") for a in ("snli_ve", "snli_caption", "hypothesis_only")}
    targets = {Path(out).parts[4] for rule, out in jobs if rule == "train_target"}
    assert targets == {f"{a}@mixed_merged" for a in ("snli_ve", "snli_caption", "hypothesis_only")}


def test_the_retention_table_probes_every_stage_of_both_backbones(demo_run):
    """Forgetting at every stage (docs/multimodal.md, "Forgetting"): one pretrained probe per
    backbone that every arm's change is measured from, and real changes where a phase trained."""
    results = demo_run / "results/multimodal_demo"
    from workflow_scripts.workflow import arm_recipes, backbone_grid

    config = config_layers.load([demo_run / CONFIG])
    arm_recipes.expand(config)  # each arm under its recipes, as the config check gives them to the rules
    for backbone, entry in config["backbones"].items():
        configs = backbone_grid.grid_of(config, backbone)["intermediate"]
        table = pd.read_csv(results / f"tables/{backbone}/retention.csv", keep_default_na=False, na_values=[""])
        stages = set(zip(table["config"], table["stage"]))
        assert stages == {(c, "intermediate") for c in configs if c != "none"} | {(c, "target:xnli") for c in configs}
        assert set(table["language"]) == {"en", "de", "ru", "sw", "avg"}
        # one before probe: the same loss and alignment before every arm, per language
        assert (table.groupby("language")["loss_before"].nunique() == 1).all()
        foreign = table[table["language"] != "en"]  # English is what the others align with
        assert (foreign.groupby("language")["alignment_before"].nunique() == 1).all()
        before = json.loads((results / f"retention/{backbone}/before.json").read_text())
        en = table[table["language"] == "en"]
        assert en["loss_before"].to_list() == pytest.approx([before["languages"]["en"]["loss"]] * len(en))
        # a phase that trained the backbone (in full, or an adapter merged) changed its loss
        trained = table[(table["config"] == "snli_ve") & (table["stage"] == "intermediate")]
        assert (trained["loss_after"] != trained["loss_before"]).all() and trained["loss_change"].notna().all()
        probe = json.loads((results / f"retention/{backbone}/snli_ve/seed1/intermediate.json").read_text())
        assert probe["lineage"]["own"] is (entry.get("method") == "lora")
        assert probe["languages"]["de"]["inputs_sha256"] == before["languages"]["de"]["inputs_sha256"]
        pairs = pd.read_csv(results / f"tables/{backbone}/retention_pairs.csv")
        recipes = ("", "@mixed_merged") if backbone == "llama_tiny" else ("",)  # the decoder runs two recipes
        assert set(zip(pairs["visual"], pairs["control"])) == {
            (f"snli_ve{r}", f"{control}{r}") for r in recipes for control in ("snli_caption", "hypothesis_only")
        }
        assert pairs["transfer_difference"].notna().all() and pairs["loss_change_difference_intermediate"].notna().all()
        assert "Image arm minus its text twin" in (results / f"tables/{backbone}/retention.md").read_text()
        assert (results / f"figures/{backbone}/retention.png").stat().st_size > 1000


def test_nothing_reruns_after_the_multimodal_demo(demo_run):
    proc = snakemake(demo_run, "-n", "--configfile", CONFIG, timeout=300)
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-2000:]
