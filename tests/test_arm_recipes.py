"""The image arms' recipes (spec/arm_recipe.py, workflow/arm_recipes.py, training/arm_phase.py):
a grid axis expanded at config check, compared at equal recipe, and what each choice does to
an intermediate phase: the backbone frozen, LoRA on a fully fine-tuned backbone, a text-only
share of the steps, and the merge-back toward the starting weights."""

from __future__ import annotations

import copy
import math
from collections import Counter

import pytest

from conftest import REPO, phase_settings
from workflow_scripts.training.arm_phase import freeze_backbone, interpolate_weights, scale_adapter_updates
from workflow_scripts.training.sampling import TaskSampler
from workflow_scripts.workflow import arm_recipes, config_check, config_layers, grid, grid_settings

pytestmark = pytest.mark.unit

RECIPES = {
    "standard": {},
    "frozen": {"trains": "projector"},
    "mixed": {"trains": "adapters", "text_task": "mnli", "text_share": 0.25, "merge_back": 0.5},
}


@pytest.fixture(scope="module")
def demo_layers() -> dict:
    return config_layers.load([REPO / "config/multimodal_demo.yaml"])


def checked(layers: dict, recipes: dict | None = None, **changes) -> dict:
    config = copy.deepcopy(layers)
    config["arm_recipes"] = copy.deepcopy(recipes if recipes is not None else RECIPES)
    config.update(copy.deepcopy(changes))
    config_check.check(config, [], [])
    return config


def refusal(layers: dict, recipes: dict, **changes) -> str:
    with pytest.raises(config_check.CONFIG_ERRORS) as err:
        checked(layers, recipes, **changes)
    return str(err.value)


def test_every_arm_runs_under_every_recipe_and_the_rest_of_the_grid_does_not(demo_layers):
    config = checked(demo_layers)
    arms = ("snli_ve", "snli_caption", "hypothesis_only")
    expected = {"none", "mnli"} | set(arms) | {f"{a}@{r}" for a in arms for r in ("frozen", "mixed")}
    assert set(config["intermediate"]) == expected
    assert config["intermediate"]["snli_ve@frozen"] == {"tasks": ["snli_ve"], "mlm": False, "recipe": "frozen"}
    assert "recipe" not in config["intermediate"]["mnli"] and "recipe" not in config["intermediate"]["none"]
    # the demo encoder runs the standard recipe only (its grid.arm_recipes); the decoder's list
    # of configs names each arm once, and runs it under every recipe
    assert grid.backbone_grid.grid_of(config, "xlmr_tiny")["intermediate"] == ["none", "mnli", *arms]
    assert config["backbones"]["llama_tiny"]["grid"]["intermediate"] == [
        "none",
        *(f"{a}{s}" for a in arms for s in ("", "@frozen", "@mixed")),
    ]
    before = copy.deepcopy(config)
    arm_recipes.expand(config)  # expanding twice changes nothing
    assert config == before


def test_an_arm_is_compared_with_its_twin_at_equal_recipe(demo_layers):
    config = checked(demo_layers)
    pairs = grid_settings.modality_settings(config, "llama_tiny").pairs
    assert {(p.visual, p.control, p.recipe) for p in pairs} == {
        (f"snli_ve{s}", f"{c}{s}", r)
        for r, s in (("standard", ""), ("frozen", "@frozen"), ("mixed", "@mixed"))
        for c in ("snli_caption", "hypothesis_only")
    }
    described = grid_settings.modality_settings(config, "llama_tiny").recipes
    assert described["mixed"] == "mixed (trains adapters, 0.25 mnli, merge-back 0.5)"


def test_a_recipe_reaches_the_phase_settings_and_its_data(demo_layers):
    config = checked(demo_layers)
    mixed = grid_settings.intermediate_settings(config, "xlmr_tiny", "snli_ve@mixed")
    assert mixed.arm_recipe.text_task == "mnli" and mixed.fixed_shares == {"mnli": 0.25}
    assert set(mixed.tasks) == {"snli_ve", "mnli"} and mixed.tasks["mnli"].select_language == "en"
    assert mixed.method.name == "lora" and mixed.method.rank  # LoRA on the fully fine-tuned encoder
    assert grid.intermediate_data(config, "snli_ve@mixed")["mnli"].train.endswith("data/mnli/train.parquet")
    standard = grid_settings.intermediate_settings(config, "xlmr_tiny", "snli_ve")
    assert standard.method.name == "full" and standard.arm_recipe.name == "standard" and not standard.fixed_shares
    assert grid_settings.intermediate_settings(config, "xlmr_tiny", "mnli").arm_recipe is None
    # the decoder already trains LoRA adapters: trains: adapters keeps its method
    assert grid_settings.intermediate_settings(config, "llama_tiny", "snli_ve").method.name == "lora"


def test_changing_one_recipe_changes_only_its_arms_settings(demo_layers):
    """Snakemake reruns a job whose params change: only the edited recipe's configs do."""
    first = checked(demo_layers)
    edited = copy.deepcopy(RECIPES)
    edited["mixed"]["text_share"] = 0.5
    second = checked(demo_layers, edited)

    def planned(config) -> dict[str, str]:
        return {
            n: grid_settings.intermediate_settings(config, "xlmr_tiny", n).to_json() for n in config["intermediate"]
        }

    before, after = planned(first), planned(second)
    assert {n for n in before if before[n] != after[n]} == {
        f"{a}@mixed" for a in ("snli_ve", "snli_caption", "hypothesis_only")
    }


@pytest.mark.parametrize(
    "recipes,changes,expected",
    [
        ({"r": {"text_task": "mnli"}}, {}, "config key arm_recipes.r: text_task and text_share go together"),
        ({"r": {"text_share": 0.3}}, {}, "config key arm_recipes.r: text_task and text_share go together"),
        (
            {"r": {"text_task": "mnlj", "text_share": 0.3}},
            {},
            "arm_recipes.r.text_task: 'mnlj' is not in tasks (did you mean 'mnli'",
        ),
        ({"r": {"text_task": "snli_caption", "text_share": 0.3}}, {}, "is not a text-only intermediate task"),
        ({"r": {"trains": "projector", "merge_back": 0.5}}, {}, "arm_recipes.r.merge_back: with trains: projector"),
        (
            RECIPES,
            {"intermediate": {"none": {"tasks": []}, "ve": {"tasks": ["snli_ve"], "recipe": "frozn"}}},
            "config key intermediate.ve.recipe: 'frozn' is not in arm_recipes (did you mean 'frozen'",
        ),
        (
            RECIPES,
            {"intermediate": {"none": {"tasks": []}, "m": {"tasks": ["mnli"], "recipe": "frozen"}}},
            "a recipe applies to image arms only",
        ),
    ],
)
def test_a_recipe_that_cannot_run_stops_at_config_check_naming_its_key(demo_layers, recipes, changes, expected):
    assert expected in refusal(demo_layers, recipes, **changes)


def test_a_backbone_narrows_the_recipes_it_runs(demo_layers):
    config = copy.deepcopy(demo_layers)
    config["backbones"]["xlmr_tiny"]["grid"] = {"arm_recipes": ["frozen"]}
    config = checked(config)
    assert grid.backbone_grid.grid_of(config, "xlmr_tiny")["intermediate"] == [
        "none",
        "mnli",
        "snli_ve@frozen",
        "snli_caption@frozen",
        "hypothesis_only@frozen",
    ]
    bad = copy.deepcopy(demo_layers)
    bad["backbones"]["xlmr_tiny"]["grid"] = {"arm_recipes": ["frozen", "mixd"]}
    assert "backbones.xlmr_tiny.grid.arm_recipes: 'mixd' is not in arm_recipes (did you mean 'mixed'" in refusal(
        bad, RECIPES
    )


# ----- the phase ------------------------------------------------------------------------


def test_a_fixed_share_is_drawn_at_its_rate_and_the_rest_is_shared_as_before():
    sizes = {"snli_ve": 3000, "vqa": 1000, "mnli": 50_000}
    sampler = TaskSampler(sizes, 2**17, seed=5, shares={"mnli": 0.25})
    assert sampler.probabilities == pytest.approx({"mnli": 0.25, "snli_ve": 0.75 * 0.75, "vqa": 0.75 * 0.25})
    draws = 20_000
    counts = Counter(sampler.next() for _ in range(draws))
    for name, p in sampler.probabilities.items():
        assert abs(counts[name] - draws * p) < 4 * math.sqrt(draws * p * (1 - p)), name
    with pytest.raises(ValueError, match="fixed task shares"):
        TaskSampler({"a": 1}, 10, 1, shares={"a": 0.5})


def test_the_arm_keeps_its_own_steps_and_the_text_share_comes_on_top():
    from workflow_scripts.training.sampling import total_steps

    class Rows:
        def __init__(self, n):
            self.features = [None] * n

    alone = phase_settings({"snli_ve": {"batch_size": 10, "epochs": 2, "max_length": 8}})
    recipe = {"name": "mixed", "trains": "backbone", "text_task": "mnli", "text_share": 0.2, "merge_back": 0.0}
    mixed = phase_settings(
        {
            "snli_ve": {"batch_size": 10, "epochs": 2, "max_length": 8},
            "mnli": {"batch_size": 10, "epochs": 1, "max_length": 8},
        },
        arm_recipe=recipe,
    )
    assert total_steps(alone, {"snli_ve": Rows(95)}) == 20
    assert total_steps(mixed, {"snli_ve": Rows(95), "mnli": Rows(10_000)}) == 25  # 20 / (1 - 0.2)


def test_trains_projector_leaves_only_the_heads_trainable():
    import torch

    from workflow_scripts.models.heads import MultiHeadModel

    encoder = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    model = MultiHeadModel(encoder, {"snli_ve": torch.nn.Linear(4, 3)})
    frozen = freeze_backbone(model)
    assert frozen == 2 * (16 + 4)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["heads.snli_ve.weight", "heads.snli_ve.bias"]


def test_merge_back_under_lora_is_the_interpolation_of_the_merged_weights():
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(6, 6))
    start = base[0].weight.detach().clone()
    model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["0"], init_lora_weights=False))
    with torch.no_grad():
        delta = (
            model.base_model.model[0].lora_B["default"].weight @ model.base_model.model[0].lora_A["default"].weight
        ) * 2.0
    assert scale_adapter_updates(model, 0.3) == 1
    merged = model.merge_and_unload()[0].weight
    assert torch.allclose(merged, start + 0.7 * delta, atol=1e-6)
    assert torch.allclose(merged, 0.7 * (start + delta) + 0.3 * start, atol=1e-6)


def test_merge_back_after_full_fine_tuning_moves_each_weight_once():
    import torch

    shared = torch.ones(2, 2)
    weights = {"embed": shared, "lm_head": shared, "bias": torch.full((2,), 4.0), "ids": torch.arange(3)}
    start = {"embed": torch.zeros(2, 2), "lm_head": torch.zeros(2, 2), "bias": torch.zeros(2), "ids": torch.arange(3)}
    assert interpolate_weights(weights, start, 0.25) == 2  # the tied pair moved once
    assert torch.allclose(weights["lm_head"], torch.full((2, 2), 0.75)) and torch.allclose(
        weights["bias"], torch.full((2,), 3.0)
    )
    with pytest.raises(ValueError, match="no tensor 'extra'"):
        interpolate_weights({"extra": torch.ones(1)}, start, 0.5)


# ----- short real phases on the demo encoder ------------------------------------------------

SHORT = {"dev_examples": 40, "eval_batch_size": 32, "eval_every": 4, "learning_rate": 1e-3, "max_micro_batch": 8}
MNLI = {"mnli": {"batch_size": 8, "epochs": 1, "max_length": 48, "select_language": "en"}}


def encoder_weights(directory) -> dict:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def start_weights(encoder_dir, saved: dict) -> dict:
    """The demo encoder's weights under the names a phase saves them with (its file is a
    masked-LM checkpoint: the backbone under ``roberta.``, beside its MLM head)."""
    found = {k.removeprefix("roberta."): v for k, v in encoder_weights(encoder_dir).items()}
    return {k: found[k] for k in saved}


def short_phase(tmp_path, demo_data, encoder_dir, name: str, recipe: dict) -> tuple[dict, dict]:
    from workflow_scripts.training.recipe import train_phase

    settings = phase_settings(MNLI, **SHORT, max_steps=6, language="en", arm_recipe={"name": name, **recipe})
    data = {"mnli": {"train": str(demo_data["mnli.train"]), "dev": str(demo_data["mnli.train"])}}
    log = train_phase("intermediate", encoder_dir, data, settings, seed=4, threads=1, output=tmp_path / name)
    return log, encoder_weights(tmp_path / name)


def test_a_frozen_backbone_leaves_the_phase_s_weights_as_they_started(tmp_path, demo_data, demo_encoder_dir):
    import torch

    log, after = short_phase(tmp_path, demo_data, demo_encoder_dir, "frozen", {"trains": "projector"})
    start = start_weights(demo_encoder_dir, after)
    # every backbone parameter frozen: only MNLI's head trained
    backbone = log["backbone"]
    assert log["frozen_parameters"] + backbone["trainable_parameters"] == backbone["parameters"]
    assert 0 < backbone["trainable_parameters"] < log["frozen_parameters"] / 10
    assert all(torch.equal(after[k], start[k]) for k in after)
    assert log["settings"]["arm_recipe"]["trains"] == "projector"


def test_merge_back_after_full_fine_tuning_is_the_interpolation_of_the_two_ends(tmp_path, demo_data, demo_encoder_dir):
    """The same seeded phase without and with a merge-back of 0.25: the merged weights are
    0.75 of the trained ones plus 0.25 of the starting ones."""
    import torch

    _, trained = short_phase(tmp_path, demo_data, demo_encoder_dir, "plain", {})
    start = start_weights(demo_encoder_dir, trained)
    log, merged = short_phase(tmp_path, demo_data, demo_encoder_dir, "merged", {"merge_back": 0.25})
    assert log["merge_back"] == {
        "alpha": 0.25,
        "tensors_moved": len([k for k in start if start[k].is_floating_point()]),
    }
    moved = [k for k in start if not torch.equal(trained[k], start[k])]
    assert moved  # the phase trained the backbone
    for k in start:
        assert torch.allclose(merged[k], 0.75 * trained[k] + 0.25 * start[k], atol=1e-6), k


def test_every_trains_choice_is_declared_once_and_frozen_by_training():
    """A choice of ``trains`` is an entry of TRAINS with its words (spec/arm_recipe.py), which
    the schema's block is generated from, and training freezes what it leaves untrained (or
    says the method does): one without the other is caught here
    (docs/guides/new_arm_recipe_choice.md)."""
    from workflow_scripts.spec import arm_recipe
    from workflow_scripts.spec.schema import config_schema
    from workflow_scripts.training.arm_phase import FREEZE, NOT_FROZEN_HERE

    assert set(arm_recipe.TRAINS) == set(FREEZE) | NOT_FROZEN_HERE and not set(FREEZE) & NOT_FROZEN_HERE
    schema = config_schema()["$defs"]["arm_recipe"]["properties"]["trains"]
    assert schema["enum"] == list(arm_recipe.TRAINS)
    assert all(what in schema["description"] for what in arm_recipe.TRAINS.values())
