"""The image arms' recipes as a grid axis (spec/arm_recipe.py): checked, then expanded into
intermediate configs at config check, before anything else reads ``intermediate``.

Every arm config (one that trains an image task or a text-only control of one) without a
``recipe`` of its own becomes one config per recipe of ``arm_recipes``, named
``<config>@<recipe>`` (``standard`` keeps the name), each with its ``recipe`` set; a
backbone's ``grid.intermediate`` follows (its ``grid.arm_recipes`` narrows the recipes).
A transfer setting's ``intermediate`` list names each arm's configs under every recipe.
Configs that already name their recipe are left as they are, so expanding twice changes
nothing.
"""

from __future__ import annotations

from typing import Any

from workflow_scripts.spec import intermediate_entry
from workflow_scripts.spec.arm_recipe import ArmRecipe, config_name, is_arm
from workflow_scripts.spec.suggest import did_you_mean
from workflow_scripts.spec.tasks import get_task


class RecipeError(ValueError):
    """An arm recipe that cannot run, named by its config key."""


def recipes(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(config.get("arm_recipes") or {})


def recipe_of(config: dict[str, Any], name: str) -> ArmRecipe | None:
    """The recipe an intermediate config runs under (None: not an arm)."""
    chosen = intermediate_entry.entry_of(config, name).recipe
    if chosen is None:
        return None
    return _parse(chosen, recipes(config)[chosen])


def _parse(name: str, entry: dict[str, Any]) -> ArmRecipe:
    return ArmRecipe.parse({"name": name, **{k: v for k, v in entry.items() if v is not None}}, f"arm_recipes.{name}")


def check_recipe(config: dict[str, Any], name: str, entry: dict[str, Any]) -> None:
    key = f"arm_recipes.{name}"
    recipe = _parse(name, entry)
    text_task, share = recipe.text_task, recipe.text_share
    if (text_task is None) != (not share):
        raise RecipeError(
            f"config key {key}: text_task and text_share go together "
            f"(a text-only task mixed in at a share above 0), got text_task={text_task!r}, text_share={share!r}"
        )
    if text_task is not None:
        if text_task not in config["tasks"]:
            raise RecipeError(
                f"config key {key}.text_task: {text_task!r} is not in tasks{did_you_mean(text_task, config['tasks'])}"
            )
        task = get_task(text_task)
        if task.visual or task.is_target or text_task == "mlm" or is_arm([text_task]):
            raise RecipeError(
                f"config key {key}.text_task: {text_task!r} is not a text-only intermediate task "
                "(an image task, a control of one, a target or MLM)"
            )
    if recipe.merge_back and recipe.trains == "projector":
        raise RecipeError(
            f"config key {key}.merge_back: with trains: projector the backbone does not change; nothing to merge back"
        )


def expand(config: dict[str, Any]) -> None:
    """Check the recipes, then give every arm config one config per recipe (in place)."""
    defined = recipes(config)
    for name, entry in defined.items():
        check_recipe(config, name, entry)
    original = list(config["intermediate"])
    expanded: dict[str, dict[str, Any]] = {}
    made: dict[str, list[tuple[str, str]]] = {}  # arm config -> [(recipe, its config name)]
    for name, inter in config["intermediate"].items():
        if "recipe" in inter:
            _check_own_recipe(defined, name, inter)
        elif is_arm(inter["tasks"]):
            if not defined:
                raise RecipeError(f"config key arm_recipes: empty, and intermediate.{name} is an image arm")
            made[name] = [(recipe, config_name(name, recipe)) for recipe in defined]
            for recipe, new_name in made[name]:
                if new_name != name and new_name in config["intermediate"]:
                    raise RecipeError(
                        f"config key intermediate.{new_name}: also the name of {name!r} under recipe {recipe!r}"
                    )
                expanded[new_name] = {**inter, "recipe": recipe}
            continue
        expanded[name] = inter
    config["intermediate"] = expanded
    for backbone, entry in (config.get("backbones") or {}).items():
        _expand_backbone_grid(config, backbone, entry.get("grid") or {}, made, original)
    for setting in ((config.get("transfer") or {}).get("settings") or {}).values():
        if setting and "intermediate" in setting:  # a transfer setting's configs: each arm under every recipe
            setting["intermediate"] = [new for name in setting["intermediate"] for new in _names(name, made)]


def _names(name: str, made: dict[str, list[tuple[str, str]]]) -> list[str]:
    return [new for _, new in made[name]] if name in made else [name]


def _check_own_recipe(defined: dict[str, Any], name: str, inter: dict[str, Any]) -> None:
    recipe = inter["recipe"]
    if recipe not in defined:
        raise RecipeError(
            f"config key intermediate.{name}.recipe: {recipe!r} is not in arm_recipes{did_you_mean(recipe, defined)}"
        )
    if not is_arm(inter["tasks"]):
        raise RecipeError(
            f"config key intermediate.{name}.recipe: {name!r} trains no image task or control of one; "
            "a recipe applies to image arms only"
        )


def _expand_backbone_grid(
    config: dict[str, Any],
    backbone: str,
    grid: dict[str, Any],
    made: dict[str, list[tuple[str, str]]],
    original: list[str],
) -> None:
    """The backbone's ``grid.intermediate`` with each arm replaced by its recipes' configs
    (those of ``grid.arm_recipes``, default all). A name that is no config is left for the
    backbone check to name."""
    chosen = grid.get("arm_recipes")
    if chosen is None and "intermediate" not in grid:
        return
    for recipe in chosen or ():
        if recipe not in recipes(config):
            raise RecipeError(
                f"config key backbones.{backbone}.grid.arm_recipes: {recipe!r} is not in arm_recipes"
                f"{did_you_mean(recipe, recipes(config))}"
            )
    listed = list(grid.get("intermediate", original))
    out: list[str] = []
    for name in listed:
        if name in made:
            out += [new for recipe, new in made[name] if chosen is None or recipe in chosen]
        elif chosen is not None and config["intermediate"].get(name, {}).get("recipe") not in (None, *chosen):
            continue  # a config already under a recipe this backbone leaves out
        else:
            out.append(name)
    grid["intermediate"] = list(dict.fromkeys(out))


def arm_recipes_of(config: dict[str, Any]) -> dict[str, ArmRecipe]:
    """Every recipe, by name (the tables' notes)."""
    return {name: _parse(name, entry) for name, entry in recipes(config).items()}
