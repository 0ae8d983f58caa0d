"""Generate the demo's IGLUE releases, XVNLI and MaRVL (run once; the output is committed under
demo/hub/e-bug/iglue/).

IGLUE's XVNLI is SNLI-VE test pairs with the caption and hypothesis translated, one file per
language (e-bug/iglue ``datasets/XVNLI/annotations/<lang>/test.jsonl``: ``gold_label``,
``sentence1`` the caption, ``sentence2`` the hypothesis, ``captionID``, ``pairID``,
``Flikr30kID``), over Flickr30k's JPEGs named ``<Flikr30kID>.jpg``. The demo's version takes
19 scenes of the demo SNLI-VE test split (demo/hub/HuggingFaceM4/SNLI-VE, written by
make_demo_data.py), their caption and three hypotheses, rendered in the demo languages by
the same templates the scene world writes in English (multimodal/scene_world.py), with the
demo lexicon's words (make_demo_data.py) where it has them. As in the release, every
language has the same rows in the same order, and one row per language has no gold label
(``-``; IGLUE scores it as a wrong answer). Each scene's image is re-encoded as a JPEG named
by a made-up Flickr30k-style numeric id, with a ``SHA256SUMS`` file beside the images.
Its translate-test copy (``annotations_machine-translate/<lang>/test.jsonl``, each language
but English) holds the same rows with the scene world's English sentences. Deterministic
(seed "xvnli").

MaRVL (e-bug/iglue ``datasets/marvl/zero_shot/annotations/marvl-<lang>.jsonl``: ``id``,
``language``, ``concept``, ``caption``, ``left_img``, ``right_img``, ``label`` a boolean)
is a statement about a pair of images, true or false, in languages NLVR2 has no data in,
over images of each language's own (MaRVL's image release: ``<lang>/images/<concept>/<file>``).
The demo's version has 12 pairs of new scenes per demo language other than English (de, ru,
sw), two statements each, one true and one false, written with the templates of the demo's
NLVR2 (make_demo_data.py) in the language; the images are JPEGs under
``marvl-images/<lang>/images/<concept>/`` with a ``SHA256SUMS`` file. Deterministic (seed "marvl").

xFlickr&CO (e-bug/iglue ``datasets/xFlickrCO/annotations/<lang>/test.jsonl``: ``sentences`` a
list of one caption, ``id``, ``img_path``) is one caption per image, the same images in the
same order in every language: Flickr30k's first (``id`` a numeric string, ``<id>.jpg``), then
COCO val2014's (``id`` an integer, ``COCO_val2014_<id:012d>.jpg``), under one root holding
``flickr30k-images/`` and ``coco-images/val2014/``. The demo's version has 24 new scenes, each
of the scene world's 24 one-object descriptions once (shuffled; the first 12 filed as
Flickr30k's, the last 12 as COCO's), captioned in en, de, ru and sw with the caption
template XVNLI's rows use; as in the release's German file, one German caption (a COCO
image's) is empty. The images are JPEGs under ``xflickrco-images/`` with a ``SHA256SUMS``
file. Deterministic (seed "xflickrco").

XVNLI's few-shot files (``annotations/<lang>/train_<N>.jsonl``, N the shot counts of XVNLI's
few-shot protocol, tasks/xvnli.yaml; nested: each file holds the smaller ones' rows) and its
translated dev splits (``annotations/en/dev-<lang>_gmt.jsonl``: the English dev split in each
language) take scenes of the demo SNLI-VE train split (one scene a shot, its three
hypotheses) and of its validation split, rendered as the test rows are, their images beside
the test images. Deterministic (seed "xvnli_few_shot").

    python demo/make_iglue_demo.py       # rewrites demo/hub/e-bug/iglue/
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, run as a script

HUB = Path(__file__).resolve().parent / "hub"
SNLI_VE = HUB / "HuggingFaceM4/SNLI-VE"
ROOT = HUB / "e-bug/iglue"
ANNOTATIONS = ROOT / "datasets/XVNLI/annotations"
TRANSLATE_TEST = ROOT / "datasets/XVNLI/annotations_machine-translate"
IMAGES = ROOT / "flickr30k-images"
LANGS = ("en", "de", "ru", "sw")
SCENES = 19  # 57 labelled rows and one without a gold label per language
LABELS = ("entailment", "neutral", "contradiction")

# The scene world's words (multimodal/scene_world.py) in each demo language; shapes, colours
# and sizes as the demo lexicon (make_demo_data.py) writes them where it has them.
SHAPES = {
    "de": {"ball": ("Der", "Ball", "m"), "cup": ("Die", "Tasse", "f"), "box": ("Die", "Kiste", "f")},
    "ru": {"ball": ("мяч", "m"), "cup": ("чашка", "f"), "box": ("коробка", "f")},
    "sw": {"ball": "mpira", "cup": "kikombe", "box": "sanduku"},
}
DE_ADJ = {"red": "rote", "green": "grüne", "big": "große", "small": "kleine"}
DE_PREDICATE = {"big": "groß", "small": "klein", "left": "links", "right": "rechts"}
RU_ADJ = {
    "red": ("красный", "красная"),
    "green": ("зелёный", "зелёная"),
    "big": ("большой", "большая"),
    "small": ("маленький", "маленькая"),
}
RU_SIDE = {"left": "слева", "right": "справа"}
SW_ADJ = {"red": "jekundu", "green": "kijani", "big": "kubwa", "small": "ndogo"}
SW_SIDE = {"left": "kushoto", "right": "kulia"}
NAMES = {
    "de": {},
    "ru": {"Anna": "Анна", "Peter": "Пётр", "Maria": "Мария", "Juma": "Джума", "Omar": "Омар", "Lena": "Лена"},
    "sw": {"Peter": "Petro"},
}
PLACES = {
    "de": {"market": "Markt", "school": "Schule", "station": "Bahnhof", "garden": "Garten"},
    "ru": {"market": "рынке", "school": "школе", "station": "вокзале", "garden": "саду"},
    "sw": {"market": "sokoni", "school": "shuleni", "station": "kituoni", "garden": "bustanini"},
}

CAPTION = re.compile(
    r"A (?P<size>big|small) (?P<colour>red|green) (?P<shape>ball|box|cup) on the (?P<side>left|right)\."
)
HYPOTHESES = (
    ("colour", re.compile(r"There is a (?P<colour>red|green) (?P<shape>ball|box|cup)\.")),
    ("side", re.compile(r"The (?P<shape>ball|box|cup) is on the (?P<side>left|right)\.")),
    ("size", re.compile(r"The (?P<shape>ball|box|cup) is (?P<size>big|small)\.")),
    ("owner", re.compile(r"The (?P<shape>ball|box|cup) belongs to (?P<owner>\w+)\.")),
    ("place", re.compile(r"The (?P<shape>ball|box|cup) was bought at the (?P<place>\w+)\.")),
)


def caption(lang: str, size: str, colour: str, shape: str, side: str) -> str:
    if lang == "de":
        article, noun, _ = SHAPES["de"][shape]
        return f"{article} {DE_ADJ[size]} {DE_ADJ[colour]} {noun} {DE_PREDICATE[side]}."
    if lang == "ru":
        noun, gender = SHAPES["ru"][shape]
        k = gender == "f"
        return f"{RU_ADJ[size][k].capitalize()} {RU_ADJ[colour][k]} {noun} {RU_SIDE[side]}."
    return f"{SHAPES['sw'][shape].capitalize()} {SW_ADJ[size]} {SW_ADJ[colour]} upande wa {SW_SIDE[side]}."


def hypothesis(lang: str, kind: str, v: dict[str, str]) -> str:
    shape = v["shape"]
    if lang == "de":
        article, noun, gender = SHAPES["de"][shape]
        subject = f"{article} {noun}"
        if kind == "colour":
            colour = DE_ADJ[v["colour"]]
            return f"Es gibt einen {colour}n {noun}." if gender == "m" else f"Es gibt eine {colour} {noun}."
        if kind in ("side", "size"):
            return f"{subject} ist {DE_PREDICATE[v[kind]]}."
        if kind == "owner":
            return f"{subject} gehört {NAMES['de'].get(v['owner'], v['owner'])}."
        return f"{subject} wurde bei {PLACES['de'][v['place']]} gekauft."
    if lang == "ru":
        noun, gender = SHAPES["ru"][shape]
        k = gender == "f"
        subject = noun.capitalize()
        if kind == "colour":
            return f"Есть {RU_ADJ[v['colour']][k]} {noun}."
        if kind == "side":
            return f"{subject} {RU_SIDE[v['side']]}."
        if kind == "size":
            return f"{subject} {RU_ADJ[v['size']][k]}."
        if kind == "owner":
            return f"{subject} принадлежит {NAMES['ru'][v['owner']]}."
        return f"{subject} купили в {PLACES['ru'][v['place']]}."
    noun = SHAPES["sw"][shape]
    if kind == "colour":
        return f"Kuna {noun} {SW_ADJ[v['colour']]}."
    if kind == "side":
        return f"{noun.capitalize()} iko upande wa {SW_SIDE[v['side']]}."
    if kind == "size":
        return f"{noun.capitalize()} ni {SW_ADJ[v['size']]}."
    if kind == "owner":
        return f"{noun.capitalize()} ni ya {NAMES['sw'].get(v['owner'], v['owner'])}."
    return f"{noun.capitalize()} ilinunuliwa {PLACES['sw'][v['place']]}."


def translate_caption(text: str, lang: str) -> str:
    if lang == "en":
        return text
    m = CAPTION.fullmatch(text)
    if m is None:
        raise ValueError(f"not a one-object scene caption: {text!r}")
    return caption(lang, **m.groupdict())


def translate_hypothesis(text: str, lang: str) -> str:
    if lang == "en":
        return text
    for kind, pattern in HYPOTHESES:
        m = pattern.fullmatch(text)
        if m is not None:
            return hypothesis(lang, kind, m.groupdict())
    raise ValueError(f"not a scene-world hypothesis: {text!r}")


MARVL_ANNOTATIONS = ROOT / "datasets/marvl/zero_shot/annotations"
MARVL_IMAGES = ROOT / "marvl-images"
MARVL_LANGS = ("de", "ru", "sw")
MARVL_PAIRS = 12
# The concept folder each language's pictures are filed under (MaRVL's concepts are
# culture-specific; the demo's are the scene world's things).
MARVL_CONCEPTS = {"de": "1-Spielzeug", "ru": "1-Игрушки", "sw": "1-Vitu"}
SIDE_IMAGE = {
    "de": {"left": "Das linke Bild", "right": "Das rechte Bild"},
    "ru": {"left": "На левой картинке", "right": "На правой картинке"},
    "sw": {"left": "Picha ya kushoto", "right": "Picha ya kulia"},
}


def marvl_statements(lang: str, left, right, rng: random.Random) -> list[tuple[str, bool]]:
    """NLVR2's demo statements (make_demo_data.py: make_nlvr2) about a pair of scenes, in ``lang``."""
    from workflow_scripts.multimodal import scene_world

    a, b = left.things[0], right.things[0]
    colour, shape = rng.choice(tuple(scene_world.COLOURS)), rng.choice(scene_world.SHAPES)
    size = rng.choice(scene_world.SIZES)

    def shows(side: str, what: str) -> str:
        if lang == "de":
            return f"{SIDE_IMAGE['de'][side]} zeigt {what}."
        if lang == "ru":
            return f"{SIDE_IMAGE['ru'][side]} {what}."
        return f"{SIDE_IMAGE['sw'][side]} inaonyesha {what}."

    def thing(colour_: str, shape_: str) -> str:
        if lang == "de":
            _, noun, gender = SHAPES["de"][shape_]
            return f"einen {DE_ADJ[colour_]}n {noun}" if gender == "m" else f"eine {DE_ADJ[colour_]} {noun}"
        if lang == "ru":
            noun, gender = SHAPES["ru"][shape_]
            return f"{RU_ADJ[colour_][gender == 'f']} {noun}"
        return f"{SHAPES['sw'][shape_]} {SW_ADJ[colour_]}"

    def sized(size_: str) -> str:
        return {"de": f"etwas {DE_PREDICATE[size_].capitalize()}es", "ru": f"{RU_ADJ[size_][0]} предмет"}.get(
            lang, f"kitu {SW_ADJ[size_]}"
        )

    both = {
        "de": f"Beide Bilder zeigen {'einen' if SHAPES['de'][shape][2] == 'm' else 'eine'} {SHAPES['de'][shape][1]}.",
        "ru": f"На обеих картинках {SHAPES['ru'][shape][0]}.",
        "sw": f"Picha zote mbili zinaonyesha {SHAPES['sw'][shape]}.",
    }[lang]
    coloured = {"red": ("rotes", "красный", "chekundu"), "green": ("grünes", "зелёный", "cha kijani")}[colour]
    exactly_one = {
        "de": f"Genau ein Bild zeigt etwas {coloured[0].capitalize()}.",
        "ru": f"Ровно на одной картинке {coloured[1]} предмет.",
        "sw": f"Picha moja tu inaonyesha kitu {coloured[2]}.",
    }[lang]
    return [
        (shows("left", thing(colour, shape)), a.colour == colour and a.shape == shape),
        (shows("right", thing(colour, shape)), b.colour == colour and b.shape == shape),
        (both, a.shape == b.shape == shape),
        (exactly_one, (a.colour == colour) != (b.colour == colour)),
        (shows("left", sized(size)), a.size == size),
        (shows("right", sized(size)), b.size == size),
    ]


def make_marvl() -> None:
    """MaRVL's release layout over new pairs of scenes (see the module's docstring)."""
    from PIL import Image

    from workflow_scripts.multimodal import scene_world

    rng = random.Random("marvl")
    sums = []
    for lang in MARVL_LANGS:
        concept = MARVL_CONCEPTS[lang]
        folder = MARVL_IMAGES / lang / "images" / concept
        folder.mkdir(parents=True)
        rows = []
        for n in range(MARVL_PAIRS):
            left, right = scene_world.random_scene(rng), scene_world.random_scene(rng)
            names = []
            for k, scene in enumerate((left, right)):
                name = f"1-{2 * n + k + 1}.jpg"
                buffer = io.BytesIO()
                Image.fromarray(scene_world.render(scene, rng)).save(buffer, format="JPEG", quality=95)
                (folder / name).write_bytes(buffer.getvalue())
                sums.append(f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {lang}/images/{concept}/{name}")
                names.append(name)
            options = marvl_statements(lang, left, right, rng)
            while all(t for _, t in options) or not any(t for _, t in options):  # redraw the values
                options = marvl_statements(lang, left, right, rng)
            true = rng.choice([c for c, t in options if t])
            false = rng.choice([c for c, t in options if not t])
            for caption_, label in rng.sample([(true, True), (false, False)], 2):
                rows.append(
                    {
                        "concept": concept,
                        "language": lang,
                        "caption": caption_,
                        "left_img": names[0],
                        "right_img": names[1],
                        "chapter": "Demo",
                        "id": f"{lang}-{len(rows)}",
                        "label": label,
                    }
                )
        path = MARVL_ANNOTATIONS / f"marvl-{lang}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (MARVL_IMAGES / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    print(f"wrote MaRVL rows and images in {', '.join(MARVL_LANGS)} under {MARVL_ANNOTATIONS} and {MARVL_IMAGES}")


def make_xvnli() -> None:
    from PIL import Image

    rng = random.Random("xvnli")
    rows = [json.loads(line) for line in (SNLI_VE / "default/test.jsonl").read_text().splitlines()]
    by_image: dict[str, list[dict]] = {}
    for row in rows:
        by_image.setdefault(row["filename"], []).append(row)
    chosen = sorted(rng.sample(sorted(by_image), SCENES))
    shutil.rmtree(ROOT, ignore_errors=True)
    IMAGES.mkdir(parents=True)
    ids = dict(zip(chosen, sorted(rng.sample(range(1_000_000_000, 9_999_999_999), SCENES))))
    sums = []
    for filename in chosen:
        image = Image.open(SNLI_VE / "images" / filename).convert("RGB")
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=95)
        name = f"{ids[filename]}.jpg"
        (IMAGES / name).write_bytes(buffer.getvalue())
        sums.append(f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {name}")
    (IMAGES / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    # One pair repeated without a gold label, as the release's 14 per language.
    unlabelled = rng.choice(chosen)
    for lang in LANGS:
        out, english = [], []
        for filename in chosen:
            flickr = str(ids[filename])
            pairs = [(r, LABELS[r["label"]]) for r in by_image[filename]]
            if filename == unlabelled:
                pairs.append((by_image[filename][1], "-"))
            for k, (r, gold) in enumerate(pairs):
                out.append(
                    {
                        "gold_label": gold,
                        "sentence1": translate_caption(r["premise"], lang),
                        "sentence2": translate_hypothesis(r["hypothesis"], lang),
                        "captionID": f"{flickr}.jpg#0",
                        "pairID": f"{flickr}.jpg#0r{k}{gold[0] if gold != '-' else 'x'}",
                        "Flikr30kID": flickr,
                    }
                )
                english.append((r["premise"], r["hypothesis"]))
        path = ANNOTATIONS / lang / "test.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out), encoding="utf-8")
        if lang != "en":
            write_translate_test(out, english, lang)
    print(f"wrote {len(chosen)} images under {IMAGES} and XVNLI rows in {', '.join(LANGS)} under {ANNOTATIONS}")


FEW_SHOTS = (1, 5, 10, 20, 25, 48)  # tasks/xvnli.yaml: few_shot.shots
DEV_SCENES = 10


def write_scene_images(filenames: list[str], split_dir: Path, taken: set[int], rng: random.Random) -> dict[str, str]:
    """Each scene re-encoded as a JPEG under a new Flickr30k-style id (none of ``taken``);
    appends to the images' SHA256SUMS. Returns scene file -> id."""
    from PIL import Image

    ids: dict[str, str] = {}
    sums = []
    for filename in filenames:
        flickr = rng.randrange(1_000_000_000, 9_999_999_999)
        while flickr in taken:
            flickr = rng.randrange(1_000_000_000, 9_999_999_999)
        taken.add(flickr)
        buffer = io.BytesIO()
        Image.open(split_dir / filename).convert("RGB").save(buffer, format="JPEG", quality=95)
        (IMAGES / f"{flickr}.jpg").write_bytes(buffer.getvalue())
        sums.append(f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {flickr}.jpg")
        ids[filename] = str(flickr)
    with (IMAGES / "SHA256SUMS").open("a") as manifest:
        manifest.write("\n".join(sums) + "\n")
    return ids


def xvnli_scene_rows(scenes: list[str], by_image: dict[str, list[dict]], ids: dict[str, str], lang: str) -> list[dict]:
    return [
        {
            "gold_label": LABELS[r["label"]],
            "sentence1": translate_caption(r["premise"], lang),
            "sentence2": translate_hypothesis(r["hypothesis"], lang),
            "captionID": f"{ids[filename]}.jpg#0",
            "pairID": f"{ids[filename]}.jpg#0r{k}{LABELS[r['label']][0]}",
            "Flikr30kID": ids[filename],
        }
        for filename in scenes
        for k, r in enumerate(by_image[filename])
    ]


def make_xvnli_few_shot() -> None:
    rng = random.Random("xvnli_few_shot")
    taken = {int(p.stem) for p in IMAGES.glob("*.jpg")}
    scenes = {}
    for split, count in (("train", FEW_SHOTS[-1]), ("validation", DEV_SCENES)):
        by_image: dict[str, list[dict]] = {}
        for line in (SNLI_VE / f"default/{split}.jsonl").read_text().splitlines():
            row = json.loads(line)
            by_image.setdefault(row["filename"], []).append(row)
        chosen = rng.sample(sorted(by_image), count)  # in drawn order: the first N are N shots
        scenes[split] = (chosen, by_image, write_scene_images(chosen, SNLI_VE / "images", taken, rng))
    for lang in LANGS[1:]:
        chosen, by_image, ids = scenes["train"]
        for shots in FEW_SHOTS:
            rows = xvnli_scene_rows(chosen[:shots], by_image, ids, lang)
            (ANNOTATIONS / lang / f"train_{shots}.jsonl").write_text(
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
            )
        chosen, by_image, ids = scenes["validation"]
        rows = xvnli_scene_rows(chosen, by_image, ids, lang)
        (ANNOTATIONS / "en" / f"dev-{lang}_gmt.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
        )
    print(f"wrote XVNLI's few-shot files ({', '.join(map(str, FEW_SHOTS))} shots) and translated dev splits")


def write_translate_test(rows: list[dict], english: list[tuple[str, str]], lang: str) -> None:
    """The release's translate-test layout (``annotations_machine-translate/<lang>/test.jsonl``):
    the same rows with their caption and hypothesis in English. The demo's English is the scene
    world's own sentences, a perfect translation: the demo shows the protocol, not MT quality."""
    out = [
        {**row, "sentence1": caption_en, "sentence2": hypothesis_en}
        for row, (caption_en, hypothesis_en) in zip(rows, english)
    ]
    path = TRANSLATE_TEST / lang / "test.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out), encoding="utf-8")


XFLICKRCO_ANNOTATIONS = ROOT / "datasets/xFlickrCO/annotations"
XFLICKRCO_IMAGES = ROOT / "xflickrco-images"
XFLICKRCO_PER_SOURCE = 12  # Flickr30k's images, then as many of COCO's
# The release's German file has one empty caption (line 1,960, a COCO image); the demo's too.
XFLICKRCO_EMPTY = ("de", 2 * XFLICKRCO_PER_SOURCE - 3)


def xflickrco_scenes(rng: random.Random) -> list:
    """Each one-object description of the scene world once, in a seeded order."""
    from itertools import product

    from workflow_scripts.multimodal import scene_world

    things = product(scene_world.SHAPES, tuple(scene_world.COLOURS), scene_world.SIZES, scene_world.SIDES)
    scenes = [scene_world.Scene((scene_world.Thing(*thing),)) for thing in things]
    rng.shuffle(scenes)
    return scenes[: 2 * XFLICKRCO_PER_SOURCE]


def write_xflickrco_image(scene, path: str, rng: random.Random) -> str:
    """The scene rendered as a JPEG at ``path`` under the image root; its SHA256SUMS line."""
    from PIL import Image

    from workflow_scripts.multimodal import scene_world

    buffer = io.BytesIO()
    Image.fromarray(scene_world.render(scene, rng)).save(buffer, format="JPEG", quality=95)
    (XFLICKRCO_IMAGES / path).parent.mkdir(parents=True, exist_ok=True)
    (XFLICKRCO_IMAGES / path).write_bytes(buffer.getvalue())
    return f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {path}"


def make_xflickrco() -> None:
    """xFlickr&CO's release layout over new scenes (see the module's docstring)."""
    rng = random.Random("xflickrco")
    scenes = xflickrco_scenes(rng)
    flickr_ids = sorted(rng.sample(range(1_000_000_000, 9_999_999_999), XFLICKRCO_PER_SOURCE))
    coco_ids = sorted(rng.sample(range(1, 581_929), XFLICKRCO_PER_SOURCE))
    records, sums = [], []
    for k, scene in enumerate(scenes):
        if k < XFLICKRCO_PER_SOURCE:
            image_id, img_path = str(flickr_ids[k]), f"{flickr_ids[k]}.jpg"
            sums.append(write_xflickrco_image(scene, f"flickr30k-images/{img_path}", rng))
        else:
            image_id = coco_ids[k - XFLICKRCO_PER_SOURCE]
            img_path = f"COCO_val2014_{image_id:012d}.jpg"
            sums.append(write_xflickrco_image(scene, f"coco-images/val2014/{img_path}", rng))
        records.append((scene.caption(), image_id, img_path))
    (XFLICKRCO_IMAGES / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    for lang in LANGS:
        lines = []
        for k, (english, image_id, img_path) in enumerate(records):
            text = "" if (lang, k) == XFLICKRCO_EMPTY else translate_caption(english, lang)
            lines.append(json.dumps({"sentences": [text], "id": image_id, "img_path": img_path}, ensure_ascii=False))
        path = XFLICKRCO_ANNOTATIONS / lang / "test.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} images under {XFLICKRCO_IMAGES} and xFlickr&CO rows in {', '.join(LANGS)}")


def main() -> None:
    make_xvnli()
    make_xvnli_few_shot()
    make_marvl()
    make_xflickrco()


if __name__ == "__main__":
    main()
