"""The demo's synthetic image world: scenes of one object (or two) (shape, colour, size, side)
rendered as small RGB images, each with a caption and entailment hypotheses generated from
the same scene description, so that an image premise, its caption and no premise differ in
exactly one thing (as SNLI-VE, its SNLI captions and a hypothesis-only control do).

The words are the demo corpus's (ball, box, cup; red, green; big, small; names and places),
so the demo's tiny encoders know them. Hypotheses are built so that the hypothesis alone
cannot separate entailment from contradiction: each is one template ("there is a red
ball.", "the ball is on the left.", "the ball is big.") filled with a value that is true
of the scene (entailment) or false of it (contradiction), over scenes drawn uniformly, so
every such sentence is entailed in some scenes and contradicted in others. Neutral
hypotheses state what no picture shows (who owns an object, where it was bought), as
SNLI's neutral hypotheses add unobservable detail; a hypothesis-only model can spot those.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

SHAPES = ("ball", "box", "cup")  # drawn as a disc, a square, a triangle
COLOURS = {"red": (205, 40, 40), "green": (40, 165, 70)}
SIZES = ("small", "big")
SIDES = ("left", "right")
OWNERS = ("Anna", "Peter", "Maria", "Juma", "Omar", "Lena")
PLACES = ("market", "school", "station", "garden")
LABELS = ("entailment", "neutral", "contradiction")
BACKGROUND = (235, 235, 225)


@dataclass(frozen=True)
class Thing:
    shape: str
    colour: str
    size: str
    side: str

    def phrase(self) -> str:
        return f"a {self.size} {self.colour} {self.shape}"


@dataclass(frozen=True)
class Scene:
    things: tuple[Thing, ...]

    def caption(self) -> str:
        parts = [f"{t.phrase()} on the {t.side}" for t in sorted(self.things, key=lambda t: t.side)]
        return (" and ".join(parts) + ".").capitalize()


def random_scene(rng: random.Random, max_things: int = 1) -> Scene:
    """Up to ``max_things`` (1 or 2) things on distinct sides, of distinct shapes.

    The demo draws one thing per scene: with two, a hypothesis must be bound to the right
    object ("there is a red ball" beside a green box), and neither the demo's tiny encoder
    reading a caption nor its visual prefix learnt that binding at demo budgets (dev accuracy
    stayed at the hypothesis-only ceiling over 9,000 rows), while with one thing both learn."""
    if max_things not in (1, 2):
        raise ValueError(f"max_things must be 1 or 2, got {max_things}")
    count = rng.choice(tuple(range(1, max_things + 1)))
    shapes = rng.sample(SHAPES, count)
    sides = rng.sample(SIDES, count)
    return Scene(
        tuple(Thing(shape, rng.choice(tuple(COLOURS)), rng.choice(SIZES), side) for shape, side in zip(shapes, sides))
    )


def hypothesis(scene: Scene, label: str, rng: random.Random) -> str:
    """A hypothesis about ``scene`` with the given label (see the module's docstring)."""
    thing = rng.choice(scene.things)
    if label == "neutral":
        if rng.random() < 0.5:
            return f"The {thing.shape} belongs to {rng.choice(OWNERS)}."
        return f"The {thing.shape} was bought at the {rng.choice(PLACES)}."
    true = label == "entailment"
    kind = rng.choice(("colour", "side", "size"))
    if kind == "colour":
        # "there is a <colour> <shape>": false when no thing of that shape has that colour
        colour = thing.colour if true else _other(tuple(COLOURS), thing.colour)
        return f"There is a {colour} {thing.shape}."
    if kind == "side":
        side = thing.side if true else _other(SIDES, thing.side)
        return f"The {thing.shape} is on the {side}."
    size = thing.size if true else _other(SIZES, thing.size)
    return f"The {thing.shape} is {size}."


def _other(values: tuple[str, ...], value: str) -> str:
    return next(v for v in values if v != value)


def render(scene: Scene, rng: random.Random, size: int = 32, noise: float = 0.0) -> np.ndarray:
    """The scene as a (size, size, 3) uint8 image: each thing in its half, its position and
    extent jittered a little, on a light background, with Gaussian pixel noise of standard
    deviation ``noise`` (none by default: a noisy PNG is twelve times the size of a clean one,
    and the jitter already keeps two pictures of one description apart)."""
    image = np.empty((size, size, 3), dtype=np.float32)
    image[:] = BACKGROUND
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    for thing in scene.things:
        half = size / 2
        radius = (0.36 if thing.size == "big" else 0.2) * half * rng.uniform(0.9, 1.1)
        cx = (0.5 if thing.side == "left" else 1.5) * half + rng.uniform(-0.1, 0.1) * half
        cy = size / 2 + rng.uniform(-0.25, 0.25) * half
        if thing.shape == "ball":
            mask = (xx - cx) ** 2 + (yy - cy) ** 2 <= radius**2
        elif thing.shape == "box":
            mask = (np.abs(xx - cx) <= radius * 0.9) & (np.abs(yy - cy) <= radius * 0.9)
        else:  # an upright triangle: the half-width grows from the apex to the base
            top, bottom = cy - radius, cy + radius
            mask = (yy >= top) & (yy <= bottom) & (np.abs(xx - cx) <= (yy - top) / 2 * 1.1)
        image[mask] = COLOURS[thing.colour]
    if noise:
        image += np.asarray([rng.gauss(0, noise) for _ in range(size * size * 3)], dtype=np.float32).reshape(
            image.shape
        )
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def pairs(scene: Scene, rng: random.Random) -> list[tuple[str, str]]:
    """(hypothesis, label) for each label, as SNLI gives each caption three hypotheses."""
    return [(hypothesis(scene, label, rng), label) for label in LABELS]
