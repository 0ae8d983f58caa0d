"""Generate the embedded demo data (run once; the output is committed under demo/hub/).

The demo mirrors the layout of the Hugging Face Hub datasets the paper preset reads
(`demo/hub/<owner>/<repo>/<config>/<split>.jsonl`) with the same column names, nesting and
label encodings, so the real loaders run unchanged on it. The text is synthetic: sentences
built from a small parallel lexicon in English, German, Russian (Cyrillic) and Swahili, so
labels are learnable and parallel sentences exist for retrieval. Deterministic (seed 0).

    python demo/make_demo_data.py            # rewrites demo/hub/
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, run as a script
from workflow_scripts.workflow.grid import DEMO_LANGUAGES as LANGS

NAMES = {
    "en": ["Anna", "Peter", "Maria", "Juma", "Ivan", "Sara", "Omar", "Lena", "David", "Amina"],
    "de": ["Anna", "Peter", "Maria", "Juma", "Ivan", "Sara", "Omar", "Lena", "David", "Amina"],
    "ru": ["Анна", "Пётр", "Мария", "Джума", "Иван", "Сара", "Омар", "Лена", "Давид", "Амина"],
    "sw": ["Anna", "Petro", "Maria", "Juma", "Ivan", "Sara", "Omar", "Lena", "Daudi", "Amina"],
}
VERBS = {
    "en": ["bought", "found", "sold", "carried", "washed", "painted", "opened", "lost"],
    "de": ["kaufte", "fand", "verkaufte", "trug", "wusch", "malte", "öffnete", "verlor"],
    "ru": ["купил", "нашёл", "продал", "нёс", "мыл", "покрасил", "открыл", "потерял"],
    "sw": ["alinunua", "alipata", "aliuza", "alibeba", "aliosha", "alipaka", "alifungua", "alipoteza"],
}
OBJECTS = {
    "en": ["book", "ball", "letter", "bread", "car", "phone", "cup", "bag", "chair", "box"],
    "de": ["Buch", "Ball", "Brief", "Brot", "Auto", "Telefon", "Tasse", "Tasche", "Stuhl", "Kiste"],
    "ru": ["книгу", "мяч", "письмо", "хлеб", "машину", "телефон", "чашку", "сумку", "стул", "коробку"],
    "sw": ["kitabu", "mpira", "barua", "mkate", "gari", "simu", "kikombe", "mfuko", "kiti", "sanduku"],
}
ADJECTIVES = {
    "en": ["red", "big", "old", "new", "small", "green"],
    "de": ["rote", "große", "alte", "neue", "kleine", "grüne"],
    "ru": ["красный", "большой", "старый", "новый", "маленький", "зелёный"],
    "sw": ["jekundu", "kubwa", "zamani", "mpya", "ndogo", "kijani"],
}
PLACES = {
    "en": ["market", "school", "river", "house", "garden", "station", "city"],
    "de": ["Markt", "Schule", "Fluss", "Haus", "Garten", "Bahnhof", "Stadt"],
    "ru": ["рынке", "школе", "реке", "доме", "саду", "вокзале", "городе"],
    "sw": ["sokoni", "shuleni", "mtoni", "nyumbani", "bustanini", "kituoni", "mjini"],
}
# Function words, each with its UPOS tag.
ARTICLE = {"en": ("the", "DET"), "de": ("das", "DET"), "ru": None, "sw": None}
PREPOSITION = {"en": ("at", "ADP"), "de": ("bei", "ADP"), "ru": ("в", "ADP"), "sw": None}
NEVER = {"en": "never", "de": "nie", "ru": "никогда не", "sw": "kamwe"}
FOR = {"en": "for", "de": "für", "ru": "для", "sw": "kwa"}
SOMEONE = {"en": "Someone", "de": "Jemand", "ru": "Кто-то", "sw": "Mtu"}
THEN = {"en": "Then", "de": "Dann", "ru": "Потом", "sw": "Kisha"}
WHO = {"en": "Who", "de": "Wer", "ru": "Кто", "sw": "Nani"}
UPOS = [
    "ADJ",
    "ADP",
    "ADV",
    "AUX",
    "CCONJ",
    "DET",
    "INTJ",
    "NOUN",
    "NUM",
    "PART",
    "PRON",
    "PROPN",
    "PUNCT",
    "SCONJ",
    "SYM",
    "VERB",
    "X",
]
UD_LANGUAGE_NAMES = {"en": "English", "de": "German", "ru": "Russian"}
TATOEBA_CODES = {"de": "deu", "ru": "rus", "sw": "swh"}
XNLI_LABELS = ["entailment", "neutral", "contradiction"]

ROOT = Path(__file__).resolve().parent / "hub"
XQUAD_R_ROOT = Path(__file__).resolve().parent / "xquad-r"  # a release read as released, not a Hub mirror


class Event:
    """One underlying fact, rendered in any language; parallel across languages by index."""

    def __init__(self, rng: random.Random) -> None:
        self.name = rng.randrange(len(NAMES["en"]))
        self.other = (self.name + rng.randrange(1, len(NAMES["en"]))) % len(NAMES["en"])
        self.verb = rng.randrange(len(VERBS["en"]))
        self.obj = rng.randrange(len(OBJECTS["en"]))
        self.adj = rng.randrange(len(ADJECTIVES["en"]))
        self.place = rng.randrange(len(PLACES["en"]))

    def tagged(self, lang: str) -> list[tuple[str, str]]:
        """Tokens of the full sentence with their UPOS tags (word order per language)."""
        toks = [(NAMES[lang][self.name], "PROPN"), (VERBS[lang][self.verb], "VERB")]
        noun_phrase = [(ADJECTIVES[lang][self.adj], "ADJ"), (OBJECTS[lang][self.obj], "NOUN")]
        if lang == "sw":  # Swahili adjectives follow the noun
            noun_phrase.reverse()
        if ARTICLE[lang]:
            toks.append(ARTICLE[lang])
        toks += noun_phrase
        if PREPOSITION[lang]:
            toks.append(PREPOSITION[lang])
        if lang == "en":
            toks.append(ARTICLE["en"])
        toks.append((PLACES[lang][self.place], "NOUN"))
        toks.append((".", "PUNCT"))
        return toks

    def sentence(self, lang: str) -> str:
        return " ".join(t for t, _ in self.tagged(lang)[:-1]) + "."

    def obj_phrase(self, lang: str, with_article: bool = True) -> str:
        art = ARTICLE[lang][0] + " " if ARTICLE[lang] and with_article else ""
        return art + OBJECTS[lang][self.obj]

    def hypothesis(self, lang: str, label: int, rng: random.Random) -> str:
        name, verb, other = NAMES[lang][self.name], VERBS[lang][self.verb], NAMES[lang][self.other]
        if label == 0:
            subject = SOMEONE[lang] if rng.random() < 0.3 else name
            return f"{subject} {verb} {self.obj_phrase(lang)}."
        if label == 1:
            return f"{name} {verb} {self.obj_phrase(lang)} {FOR[lang]} {other}."
        if lang == "de":
            return f"{name} {verb} {NEVER[lang]} {self.obj_phrase(lang)}."
        return f"{name} {NEVER[lang]} {verb} {self.obj_phrase(lang)}."


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def nli_rows(rng: random.Random, lang: str, n: int) -> list[tuple[str, str, int]]:
    rows = []
    for _ in range(n):
        ev, label = Event(rng), rng.randrange(3)
        rows.append((ev.sentence(lang), ev.hypothesis(lang, label, rng), label))
    return rows


def make_mnli(rng: random.Random) -> None:
    for split, n in (("train", 300), ("validation_matched", 100)):
        rows = [
            {"premise": p, "hypothesis": h, "label": y, "idx": i} for i, (p, h, y) in enumerate(nli_rows(rng, "en", n))
        ]
        write_jsonl(ROOT / "nyu-mll/glue/mnli" / f"{split}.jsonl", rows)


def make_xnli(rng: random.Random) -> None:
    # google/xtreme "XNLI" mixes all languages in one split, string gold labels.
    # Like the real XNLI, every language holds translations of the same English pairs, which
    # also makes the English side a source whose human translations score MT quality.
    for split in ("validation", "test"):
        seed, rows = rng.random(), []
        for lang in LANGS:
            rows += [
                {"language": lang, "sentence1": p, "sentence2": h, "gold_label": XNLI_LABELS[y]}
                for p, h, y in nli_rows(random.Random(seed), lang, 60)
            ]
        write_jsonl(ROOT / "google/xtreme/XNLI" / f"{split}.jsonl", rows)


def qa_example(rng: random.Random, lang: str, uid: str, multi_answers: bool) -> dict:
    events = [Event(rng) for _ in range(3)]
    context = " ".join(ev.sentence(lang) for ev in events)
    ev = rng.choice(events)
    offset = context.index(ev.sentence(lang))
    if rng.random() < 0.5:
        question = f"{WHO[lang]} {VERBS[lang][ev.verb]} {ev.obj_phrase(lang)}?"
        answers = [NAMES[lang][ev.name]]
    else:
        question = {
            "en": f"Where was the {OBJECTS[lang][ev.obj]}?",
            "de": f"Wo war das {OBJECTS[lang][ev.obj]}?",
            "ru": f"Где был {OBJECTS[lang][ev.obj]}?",
            "sw": f"{OBJECTS[lang][ev.obj]} kilikuwa wapi?",
        }[lang]
        place = PLACES[lang][ev.place]
        answers = [f"the {place}", place] if lang == "en" and multi_answers else [place]
    starts = [context.index(a, offset) for a in answers]
    return {
        "id": uid,
        "title": f"demo-{uid[:6]}",
        "context": context,
        "question": question,
        "answers": {"text": answers, "answer_start": starts},
    }


def make_squad(rng: random.Random) -> None:
    for split, n in (("train", 300), ("validation", 100)):
        rows = [
            qa_example(rng, "en", f"{split[:2]}{i:05d}{rng.getrandbits(24):06x}", split != "train") for i in range(n)
        ]
        write_jsonl(ROOT / "rajpurkar/squad/plain_text" / f"{split}.jsonl", rows)


def make_xquad(rng: random.Random) -> None:
    seed = rng.random()
    for lang in ("en", "de", "ru"):
        # XQuAD is parallel: the same questions in every language, with the same ids.
        local = random.Random(seed)
        rows = [qa_example(local, lang, f"xq{i:05d}", False) for i in range(60)]
        write_jsonl(ROOT / f"google/xtreme/XQuAD.{lang}" / "validation.jsonl", rows)


def make_hellaswag(rng: random.Random) -> None:
    for split, n in (("train", 300), ("validation", 100), ("test", 50)):
        rows = []
        for i in range(n):
            ev = Event(rng)
            label = rng.randrange(4)
            objs = [ev.obj] + rng.sample([o for o in range(len(OBJECTS["en"])) if o != ev.obj], 3)
            wrong = objs[1:]
            endings = []
            for k in range(4):
                obj = ev.obj if k == label else wrong.pop()
                endings.append(f"{VERBS['en'][rng.randrange(8)]} the {OBJECTS['en'][obj]} again.")
            ctx_a = ev.sentence("en")
            ctx_b = f"{THEN['en']} {NAMES['en'][ev.name]}"
            rows.append(
                {
                    "ind": i,
                    "activity_label": "Demo activity",
                    "ctx_a": ctx_a,
                    "ctx_b": ctx_b,
                    "ctx": f"{ctx_a} {ctx_b}",
                    "endings": endings,
                    "source_id": f"demo~{i}",
                    "split": {"validation": "val"}.get(split, split),
                    "split_type": "indomain",
                    # HellaSwag stores labels as strings; the public test split has none.
                    "label": "" if split == "test" else str(label),
                }
            )
        write_jsonl(ROOT / "Rowan/hellaswag/default" / f"{split}.jsonl", rows)


def tagged_sentence(rng: random.Random, lang: str, long: bool) -> tuple[list[str], list[int]]:
    tokens, tags = [], []
    for _ in range(rng.randrange(5, 8) if long else 1):
        for tok, tag in Event(rng).tagged(lang):
            for piece in tok.split():  # "никогда не" never occurs here, but keep words whole
                tokens.append(piece)
                tags.append(UPOS.index(tag))
    return tokens, tags


def make_udpos(rng: random.Random, splits: dict | None = None) -> None:
    splits = splits or {
        "en": (("train", 200), ("validation", 60), ("test", 60)),
        "de": (("validation", 60), ("test", 60)),
        "ru": (("validation", 60), ("test", 60)),
    }
    for lang, spec in splits.items():
        for split, n in spec:
            rows = []
            for i in range(n):
                # Every tenth sentence is long, to exercise split-and-merge of long inputs.
                tokens, tags = tagged_sentence(rng, lang, long=(i % 10 == 9))
                rows.append({"tokens": tokens, "pos_tags": tags})
            write_jsonl(ROOT / f"google/xtreme/udpos.{UD_LANGUAGE_NAMES[lang]}" / f"{split}.jsonl", rows)
            write_conllu(lang, {"validation": "dev"}.get(split, split), rows)


def write_conllu(lang: str, split: str, rows: list[dict]) -> None:
    """The same sentences as a UD release file (demo/ud-treebanks-v2.5/UD_<Lang>-Demo/), which
    the demo reads the way the paper preset reads UD v2.5. Every word hangs on the sentence's
    first verb; German "bei" before a noun becomes the multiword token "beim" = bei + dem, so
    the demo exercises fused forms (both words hang on the noun: the tie goes to ADP)."""
    lines = []
    for k, row in enumerate(rows):
        words = [(t, UPOS[g]) for t, g in zip(row["tokens"], row["pos_tags"])]
        fused: dict[int, str] = {}
        if lang == "de":
            out: list[tuple[str, str]] = []
            for j, (w, tag) in enumerate(words):
                out.append((w, tag))
                if w == "bei" and j + 1 < len(words) and words[j + 1][1] == "NOUN":
                    fused[len(out)] = "beim"
                    out.append(("dem", "DET"))
            words = out
        verb = next((j + 1 for j, (_, tag) in enumerate(words) if tag == "VERB"), 1)
        lines += [f"# sent_id = demo-{lang}-{split}-{k}", f"# text = {' '.join(w for w, _ in words)}"]
        for j, (w, tag) in enumerate(words, 1):
            if j in fused:
                lines.append(f"{j}-{j + 1}\t{fused[j]}\t_\t_\t_\t_\t_\t_\t_\t_")
            head = 0 if j == verb else verb
            if j - 1 in fused or j in fused:  # bei, dem -> the noun after them
                head = j + 2 if j in fused else j + 1
            lines.append(f"{j}\t{w}\t_\t{tag}\t_\t_\t{head}\t{'root' if head == 0 else 'dep'}\t_\t_")
        lines.append("")
    name = UD_LANGUAGE_NAMES[lang]
    path = ROOT.parent / "ud-treebanks-v2.5" / f"UD_{name}-Demo" / f"{lang}_demo-ud-{split}.conllu"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_tatoeba(rng: random.Random) -> None:
    for lang, code in TATOEBA_CODES.items():
        rows = []
        for _ in range(100):
            ev = Event(rng)
            # The XTREME copy keeps the source files' trailing newlines.
            rows.append(
                {
                    "source_sentence": ev.sentence(lang) + "\n",
                    "target_sentence": ev.sentence("en") + "\n",
                    "source_lang": code,
                    "target_lang": "eng",
                }
            )
        write_jsonl(ROOT / f"google/xtreme/tatoeba.{code}" / "validation.jsonl", rows)


def make_wikipedia(rng: random.Random) -> None:
    for lang in LANGS:
        rows = []
        for i in range(60):
            text = " ".join(Event(rng).sentence(lang) for _ in range(rng.randrange(2, 5)))
            rows.append(
                {
                    "id": f"{i}",
                    "url": f"https://{lang}.wikipedia.org/wiki?curid={i}",
                    "title": f"Demo {i}",
                    "text": text,
                }
            )
        write_jsonl(ROOT / f"wikimedia/wikipedia/20231101.{lang}" / "train.jsonl", rows)


ORGS = ["UNESCO", "Siemens", "Gazprom", "Safaricom", "Interpol"]
PANX_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
CITIES = {
    "en": ["Berlin", "Moscow", "Nairobi", "Hamburg"],
    "de": ["Berlin", "Moskau", "Nairobi", "Hamburg"],
    "ru": ["Берлин", "Москва", "Найроби", "Гамбург"],
    "sw": ["Berlin", "Moscow", "Nairobi", "Hamburg"],
}
WORKS_FOR = {
    "en": ("works for", "in"),
    "de": ("arbeitet für", "in"),
    "ru": ("работает в", "в"),
    "sw": ("anafanya kazi", "huko"),
}


def make_panx(rng: random.Random, splits: dict | None = None) -> None:
    for lang, spec in (
        splits
        or {
            "en": (("train", 150), ("validation", 60), ("test", 60)),
            "de": (("validation", 60), ("test", 60)),
            "ru": (("validation", 60), ("test", 60)),
        }
    ).items():
        for split, n in spec:
            rows = []
            for _ in range(n):
                works, prep = WORKS_FOR[lang]
                tokens, tags = [], []
                for tok, tag in (
                    (NAMES[lang][rng.randrange(10)], "B-PER"),
                    (works, "O"),
                    (rng.choice(ORGS), "B-ORG"),
                    (prep, "O"),
                    (rng.choice(CITIES[lang]), "B-LOC"),
                    (".", "O"),
                ):
                    for k, piece in enumerate(tok.split()):
                        tokens.append(piece)
                        tags.append(tag if k == 0 or tag == "O" else "I-" + tag[2:])
                rows.append(
                    {"tokens": tokens, "ner_tags": [PANX_TAGS.index(t) for t in tags], "langs": [lang] * len(tokens)}
                )
            write_jsonl(ROOT / f"google/xtreme/PAN-X.{lang}" / f"{split}.jsonl", rows)


def make_pawsx(rng: random.Random, splits: dict | None = None) -> None:
    for lang, spec in (
        splits or {"en": (("train", 150), ("validation", 60), ("test", 60)), "de": (("validation", 60), ("test", 60))}
    ).items():
        for split, n in spec:
            rows = []
            for _ in range(n):
                ev, other = Event(rng), Event(rng)
                label = rng.randrange(2)
                if label:  # same event, different word order
                    s2 = f"{NAMES[lang][ev.name]} {VERBS[lang][ev.verb]} {ev.obj_phrase(lang)}."
                else:  # same words, roles swapped: not a paraphrase
                    other.verb, other.obj = ev.verb, ev.obj
                    s2 = f"{NAMES[lang][ev.other]} {VERBS[lang][ev.verb]} {ev.obj_phrase(lang)}."
                # google/xtreme stores PAWS-X labels as strings.
                rows.append({"sentence1": ev.sentence(lang), "sentence2": s2, "label": str(label)})
            write_jsonl(ROOT / f"google/xtreme/PAWS-X.{lang}" / f"{split}.jsonl", rows)


def make_mlqa_tydiqa(rng: random.Random) -> None:
    for lang in ("en", "de"):
        for split, n in (("validation", 30), ("test", 40)):
            rows = [qa_example(rng, lang, f"mlqa{split[0]}{i:04d}", False) for i in range(n)]
            write_jsonl(ROOT / f"google/xtreme/MLQA.{lang}.{lang}" / f"{split}.jsonl", rows)
    names = {"en": "english", "ru": "russian", "sw": "swahili"}
    for split, n in (("train", 60), ("validation", 30)):
        rows = []
        for lang in ("en", "ru", "sw"):  # one mixed-language split; the id prefix names the language
            rows += [qa_example(rng, lang, f"{names[lang]}-{rng.getrandbits(40)}-{i}", False) for i in range(n)]
        write_jsonl(ROOT / "google/xtreme/tydiqa" / f"{split}.jsonl", rows)


def make_squad_v2(rng: random.Random) -> None:
    for split, n in (("train", 120), ("validation", 40)):
        rows = []
        for i in range(n):
            row = qa_example(rng, "en", f"v2{split[:2]}{i:05d}", False)
            if i % 3 == 0:  # unanswerable: ask about an object the context never mentions
                row["question"] = "Who found the piano?"
                row["answers"] = {"text": [], "answer_start": []}
            rows.append(row)
        write_jsonl(ROOT / "rajpurkar/squad_v2/squad_v2" / f"{split}.jsonl", rows)


def make_nli_family(rng: random.Random) -> None:
    for split, n in (("train", 60), ("validation", 30)):
        rows = [
            {"question1": p, "question2": h if y != 2 else p, "label": int(y == 2), "idx": i}
            for i, (p, h, y) in enumerate(nli_rows(rng, "en", n))
        ]
        write_jsonl(ROOT / "nyu-mll/glue/qqp" / f"{split}.jsonl", rows)
    for rnd in (1, 2, 3):
        for split, n in ((f"train_r{rnd}", 30), (f"dev_r{rnd}", 10), (f"test_r{rnd}", 10)):
            rows = [
                {"uid": f"r{rnd}-{split}-{i}", "premise": p, "hypothesis": h, "label": y, "reason": ""}
                for i, (p, h, y) in enumerate(nli_rows(rng, "en", n))
            ]
            write_jsonl(ROOT / "facebook/anli/plain_text" / f"{split}.jsonl", rows)
    for split, n in (("train", 40), ("validation", 20)):
        rows = [
            {"premise": p, "hypothesis": h, "label": -1 if i % 10 == 0 else y}  # -1: no consensus
            for i, (p, h, y) in enumerate(nli_rows(rng, "en", n))
        ]
        write_jsonl(ROOT / "stanfordnlp/snli/plain_text" / f"{split}.jsonl", rows)
    for lang in ("de", "ru", "sw"):  # the XNLI authors' translations of MNLI (train) and XNLI dev
        for split, n in (("train", 120), ("validation", 40)):
            rows = [{"premise": p, "hypothesis": h, "label": y} for p, h, y in nli_rows(rng, lang, n)]
            write_jsonl(ROOT / f"facebook/xnli/{lang}" / f"{split}.jsonl", rows)


def make_choice_family(rng: random.Random) -> None:
    letters = "ABCDE"
    for split, n in (("train", 80), ("validation", 30), ("test", 10)):
        rows = []
        for i in range(n):
            ev = Event(rng)
            answer = rng.randrange(5)
            others = rng.sample([o for o in range(len(OBJECTS["en"])) if o != ev.obj], 4)
            objs = others[:answer] + [ev.obj] + others[answer:]
            rows.append(
                {
                    "id": f"csqa{split[:2]}{i:04d}",
                    "question": f"{ev.sentence('en')} What did {NAMES['en'][ev.name]} have?",
                    "question_concept": OBJECTS["en"][ev.obj],
                    "choices": {"label": list(letters), "text": [OBJECTS["en"][o] for o in objs]},
                    "answerKey": "" if split == "test" else letters[answer],
                }
            )
        write_jsonl(ROOT / "tau/commonsense_qa/default" / f"{split}.jsonl", rows)
    for split, n in (("train", 80), ("validation", 30), ("test", 10)):
        rows = []
        for i in range(n):
            ev = Event(rng)
            label = rng.randrange(4)
            others = rng.sample([p for p in range(len(PLACES["en"])) if p != ev.place], 3)
            places = others[:label] + [ev.place] + others[label:]
            row = {
                "id": f"cosmos{split[:2]}{i:04d}",
                "context": ev.sentence("en"),
                "question": f"Where was {NAMES['en'][ev.name]}?",
                "label": -1 if split == "test" else label,
            }
            row.update({f"answer{k}": f"At the {PLACES['en'][p]}." for k, p in enumerate(places)})
            rows.append(row)
        write_jsonl(ROOT / "allenai/cosmos_qa/default" / f"{split}.jsonl", rows)


def make_bucc(rng: random.Random) -> None:
    """BUCC-style comparable corpora: parallel pairs hidden among unaligned sentences."""
    root = ROOT / "bucc2018"
    root.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "ru"):
        for bucc_set, n_pairs, n_noise in (("sample", 30, 30), ("training", 40, 40)):
            src, eng, gold = [], [], []
            for i in range(n_pairs):
                ev = Event(rng)
                src.append((f"{lang}-{i:09d}", ev.sentence(lang)))
                eng.append((f"en-{i:09d}", ev.sentence("en")))
                gold.append((src[-1][0], eng[-1][0]))
            for i in range(n_pairs, n_pairs + n_noise):
                src.append((f"{lang}-{i:09d}", Event(rng).sentence(lang)))
                eng.append((f"en-{i:09d}", Event(rng).sentence("en")))
            rng.shuffle(src)
            rng.shuffle(eng)
            for suffix, lines in ((lang, src), ("en", eng), ("gold", gold)):
                (root / f"{lang}-en.{bucc_set}.{suffix}").write_text(
                    "".join(f"{a}\t{b}\n" for a, b in lines), encoding="utf-8"
                )


CCG_TAGS = {"PROPN": "N", "VERB": "(S\\NP)/NP", "DET": "NP/N", "ADJ": "N/N", "NOUN": "N", "ADP": "PP/NP", "PUNCT": "."}


def make_ccg(rng: random.Random) -> None:
    """A stand-in for a user's CCGbank-derived files (the real CCGbank is licensed)."""
    root = Path(__file__).resolve().parent / "ccg"
    root.mkdir(exist_ok=True)
    for split, n in (("train", 80), ("dev", 30)):
        lines = []
        for _ in range(n):
            lines += [f"{tok}\t{CCG_TAGS[tag]}" for tok, tag in Event(rng).tagged("en")] + [""]
        (root / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_foreign_train(rng: random.Random) -> None:
    """Training splits outside English, for the in-language settings (PAN-X, UD-POS) and
    PAWS-X's published machine-translated train (docs/protocol.md §7)."""
    make_panx(rng, dict.fromkeys(("de", "ru"), (("train", 100),)))
    make_udpos(rng, dict.fromkeys(("de", "ru"), (("train", 100),)))
    make_pawsx(rng, {"de": (("train", 100),)})


PARALLEL_ROOT = Path(__file__).resolve().parent / "parallel"
# Words the corpus translates differently alone than in a sentence (place index -> word), as
# real MT picks another sense without context: an answer translated alone is then not found
# in its translated context, and span re-alignment drops the example.
ALONE = {"de": {4: "Park", 5: "Station"}}
MARKED = ("<b>", "</b>")  # the markers span re-alignment wraps answers in (workflow_scripts/translation/translate.py)


def parallel_pair(rng: random.Random, lang: str) -> tuple[str, str]:
    """One English sentence (or a few, or a phrase) and its translation into ``lang``, in the
    shapes the demo translates: task sentences, NLI hypotheses, questions, answers alone and
    contexts with one span wrapped in markers, which the translator learns to carry."""
    kind = rng.random()
    if kind < 0.25:  # a lexicon entry: how answers translated alone look
        ev = Event(rng)
        part = rng.randrange(3)
        if part == 0:
            return NAMES["en"][ev.name], NAMES[lang][ev.name]
        if part == 1:
            return ev.obj_phrase("en", rng.random() < 0.5), OBJECTS[lang][ev.obj]
        return PLACES["en"][ev.place], ALONE.get(lang, {}).get(ev.place, PLACES[lang][ev.place])
    if kind < 0.4:  # an NLI hypothesis (the same random choices on both sides)
        ev, label, state = Event(rng), rng.randrange(3), rng.getstate()
        en = ev.hypothesis("en", label, rng)
        rng.setstate(state)
        return en, ev.hypothesis(lang, label, rng)
    if kind < 0.48:  # a question
        ev = Event(rng)
        if rng.random() < 0.5:
            return (
                f"{WHO['en']} {VERBS['en'][ev.verb]} {ev.obj_phrase('en')}?",
                f"{WHO[lang]} {VERBS[lang][ev.verb]} {ev.obj_phrase(lang)}?",
            )
        where = {
            "de": f"Wo war das {OBJECTS['de'][ev.obj]}?",
            "ru": f"Где был {OBJECTS['ru'][ev.obj]}?",
            "sw": f"{OBJECTS['sw'][ev.obj]} kilikuwa wapi?",
        }
        return f"Where was the {OBJECTS['en'][ev.obj]}?", where[lang]
    events = [Event(rng) for _ in range(rng.choice((1, 1, 1, 2)))]
    en, tr = " ".join(ev.sentence("en") for ev in events), " ".join(ev.sentence(lang) for ev in events)
    if rng.random() < 0.3:  # one span in markers, the same span on both sides
        ev = rng.choice(events)
        spans = [
            (NAMES["en"][ev.name], NAMES[lang][ev.name]),
            (PLACES["en"][ev.place], PLACES[lang][ev.place]),
            (OBJECTS["en"][ev.obj], OBJECTS[lang][ev.obj]),
        ]
        kind = rng.randrange(len(spans))
        en_span, tr_span = spans[kind]
        en_at, tr_at = en.index(ev.sentence("en")), tr.index(ev.sentence(lang))
        en_at, tr_at = en.index(en_span, en_at), tr.index(tr_span, tr_at)
        en = f"{en[:en_at]}{MARKED[0]}{en_span}{MARKED[1]}{en[en_at + len(en_span) :]}"
        # Real MT output loses inline tags now and then; here, those around person names and
        # the last four places.
        if kind == 2 or (kind == 1 and ev.place < 3):
            tr = f"{tr[:tr_at]}{MARKED[0]}{tr_span}{MARKED[1]}{tr[tr_at + len(tr_span) :]}"
    return en, tr


def make_parallel(rng: random.Random) -> None:
    """Parallel corpora en-de, en-ru, en-sw (the OPUS-100 row schema), on which the demo trains
    its translators and pre-trains its encoder. Sentences of the XNLI validation and test
    splits are left out, so translation quality is scored on held-out references."""
    held_out = set()
    for split in ("validation", "test"):
        for line in (ROOT / "google/xtreme/XNLI" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["language"] == "en":
                held_out.update((row["sentence1"], row["sentence2"]))
    for lang in ("de", "ru", "sw"):
        rows, seen = [], set()
        while len(rows) < 4000:
            en, tr = parallel_pair(rng, lang)
            # Sentences once each; lexicon entries (no final punctuation) repeat, as short
            # segments do in real corpora.
            if en in held_out or ((en, tr) in seen and en[-1] in ".?"):
                continue
            seen.add((en, tr))
            rows.append({"translation": {"en": en, lang: tr}})
        write_jsonl(PARALLEL_ROOT / f"en-{lang}.jsonl", rows)


def copa_item(rng: random.Random, lang: str) -> tuple[str, str, str, str, int]:
    """One cause/effect item from the lexicon: (premise, question, choice1, choice2, label).
    The right alternative is about the premise's person and object, the wrong one about
    another person and another object. "effect": the premise is the whole event and the
    alternatives say what the person did with an object next; "cause": the premise is the
    short sentence and the alternatives are whole events."""
    ev, question, label = Event(rng), rng.choice(("cause", "effect")), rng.randrange(2)
    then = VERBS[lang][rng.randrange(len(VERBS[lang]))]
    wrong = Event(rng)
    wrong.name = ev.other
    wrong.obj = (ev.obj + rng.randrange(1, len(OBJECTS["en"]))) % len(OBJECTS["en"])
    if question == "effect":
        premise = ev.sentence(lang)
        right_alt = f"{NAMES[lang][ev.name]} {then} {ev.obj_phrase(lang)}."
        wrong_alt = f"{NAMES[lang][wrong.name]} {then} {wrong.obj_phrase(lang)}."
    else:
        premise = f"{NAMES[lang][ev.name]} {then} {ev.obj_phrase(lang)}."
        cause = Event(rng)
        cause.name, cause.obj = ev.name, ev.obj
        right_alt, wrong_alt = cause.sentence(lang), wrong.sentence(lang)
    alts = (right_alt, wrong_alt) if label == 0 else (wrong_alt, right_alt)
    return premise, question, alts[0], alts[1], label


def make_xcopa_family(rng: random.Random) -> None:
    """XTREME-R's XCOPA recipe: Social IQa (allenai/social_i_qa, labels "1".."3"), English
    COPA (aps/super_glue config copa; the public test split unlabeled, -1) and XCOPA
    (cambridgeltl/xcopa, one config per language, parallel: the same items in every
    language, as XCOPA translates COPA). Demo XCOPA languages are de, ru, sw."""
    for split, n in (("train", 600), ("validation", 100)):
        rows = []
        for _ in range(n):
            ev, label = Event(rng), rng.randrange(3)
            if rng.random() < 0.5:
                question = f"Where was {NAMES['en'][ev.name]}?"
                others = rng.sample([p for p in range(len(PLACES["en"])) if p != ev.place], 2)
                answers = [f"at the {PLACES['en'][p]}" for p in others[:label] + [ev.place] + others[label:]]
            else:
                question = f"What did {NAMES['en'][ev.name]} have?"
                others = rng.sample([o for o in range(len(OBJECTS["en"])) if o != ev.obj], 2)
                answers = [f"the {OBJECTS['en'][o]}" for o in others[:label] + [ev.obj] + others[label:]]
            rows.append(
                {
                    "context": ev.sentence("en"),
                    "question": question,
                    "answerA": answers[0],
                    "answerB": answers[1],
                    "answerC": answers[2],
                    "label": str(label + 1),
                }
            )
        write_jsonl(ROOT / "allenai/social_i_qa/default" / f"{split}.jsonl", rows)
    for split, n in (("train", 400), ("validation", 100), ("test", 50)):
        rows = []
        for i in range(n):
            premise, question, choice1, choice2, label = copa_item(rng, "en")
            rows.append(
                {
                    "premise": premise,
                    "choice1": choice1,
                    "choice2": choice2,
                    "question": question,
                    "idx": i,
                    "label": -1 if split == "test" else label,
                }
            )
        write_jsonl(ROOT / "aps/super_glue/copa" / f"{split}.jsonl", rows)
    for split, n in (("validation", 50), ("test", 100)):
        seed = rng.random()
        for lang in ("de", "ru", "sw"):
            local = random.Random(seed)  # the same items in every language
            rows = []
            for i in range(n):
                premise, question, choice1, choice2, label = copa_item(local, lang)
                rows.append(
                    {
                        "premise": premise,
                        "choice1": choice1,
                        "choice2": choice2,
                        "question": question,
                        "label": label,
                        "idx": i,
                        "changed": False,
                    }
                )
            write_jsonl(ROOT / f"cambridgeltl/xcopa/{lang}" / f"{split}.jsonl", rows)


LIVES_IN = {
    "en": ("{name} lives at the {place}.", "{name} from the {place}"),
    "de": ("{name} wohnt bei {place}.", "{name} von {place}"),
    "ru": ("{name} живёт в {place}.", "{name} из {place}"),
}


def make_ranking(rng: random.Random) -> None:
    """XTREME-R's retrieval targets, in the layouts the ranking loaders read.

    Mewsli-X (izhx/mewsli-x): entities are (person, place) pairs described in one sentence in
    en, de or ru ("Anna lives at the market."); a mention is the person's name in a sentence
    about them ("Yesterday Anna from the market bought the book."). English Wikipedia-like
    training pairs (config wikipedia_pairs), WikiNews-like dev and test mentions in en, de,
    ru, and the pool (config candidate_entities), in the release's JSON schema.
    LAReQA: parallel paragraphs and questions in en, de, ru with the paragraphs'
    sentence_breaks, as XQuAD-R's release files (demo/xquad-r/<lang>.json, the layout of
    google-research-datasets/lareqa's xquad-r/); its training pairs come from the demo SQuAD."""
    langs = ("en", "de", "ru")
    entities = []
    for name in range(len(NAMES["en"])):
        for place in range(len(PLACES["en"])):
            lang = langs[(name + place) % 3]
            text = LIVES_IN[lang][0].format(name=NAMES[lang][name], place=PLACES[lang][place])
            entities.append(
                {
                    "entity_id": f"Q{100 + 10 * name + place}",
                    "title": NAMES[lang][name],
                    "description": text,
                    "sentence_spans": [{"start": 0, "end": len(text)}],
                    "description_language": lang,
                    "description_url": f"https://{lang}.wikipedia.invalid/wiki/Q{100 + 10 * name + place}",
                }
            )
    write_jsonl(ROOT / "izhx/mewsli-x/candidate_entities" / "test.jsonl", entities)

    def mention(lang: str, uid: str) -> tuple[dict, dict]:
        name, place = rng.randrange(len(NAMES["en"])), rng.randrange(len(PLACES["en"]))
        ev = Event(rng)
        phrase = LIVES_IN[lang][1].format(name=NAMES[lang][name], place=PLACES[lang][place])
        sentence = f"{phrase} {VERBS[lang][ev.verb]} {ev.obj_phrase(lang)}."
        text = f"{THEN[lang]} {sentence}"
        start = len(THEN[lang]) + 1
        context = {
            "document_title": f"demo {uid}",
            "document_url": f"https://news.invalid/{uid}",
            "document_id": uid,
            "language": lang,
            "text": text,
            "sentence_spans": [{"start": 0, "end": len(text)}],
        }
        span = {"start": start, "end": start + len(NAMES[lang][name]), "text": NAMES[lang][name]}
        return context, {"example_id": uid, "mention_span": span, "entity_id": f"Q{100 + 10 * name + place}"}

    by_id = {e["entity_id"]: e for e in entities}
    pairs = []
    for i in range(1500):
        context, m = mention("en", f"wp-{i:05d}")
        pairs.append({"contextual_mention": {"context": context, "mention": m}, "entity": by_id[m["entity_id"]]})
    write_jsonl(ROOT / "izhx/mewsli-x/wikipedia_pairs" / "train.jsonl", pairs)
    for lang in langs:
        for split, n in (("validation", 60), ("test", 150)):
            rows = []
            for i in range(n):
                context, m = mention(lang, f"{lang}-{split[0]}-{i:04d}")
                rows.append({"context": context, "mentions": [m]})
            write_jsonl(ROOT / "izhx/mewsli-x" / lang / f"{split}.jsonl", rows)

    seed = rng.random()
    for lang in langs:
        local, paragraphs = random.Random(seed), []  # parallel: the same paragraphs and question ids
        for i in range(60):
            row = qa_example(local, lang, f"xqr{i:05d}", False)
            context, breaks, at = row["context"], [], 0
            for end in [m.end() for m in re.finditer(r"[.?!](?= |$)", context)]:
                breaks.append([at, end])
                at = end + 1
            answers = [
                {"text": t, "answer_start": s} for t, s in zip(row["answers"]["text"], row["answers"]["answer_start"])
            ]
            paragraphs.append(
                {
                    "context": context,
                    "qas": [{"id": row["id"], "question": row["question"], "answers": answers}],
                    "sentence_breaks": breaks,
                    "sentences": [context[s:e] for s, e in breaks],
                }
            )
        XQUAD_R_ROOT.mkdir(parents=True, exist_ok=True)
        release = {"version": "1.1", "data": [{"paragraphs": paragraphs, "title": "demo-xqr"}]}
        (XQUAD_R_ROOT / f"{lang}.json").write_text(json.dumps(release, ensure_ascii=False) + "\n", encoding="utf-8")


def make_snli_ve(rng: random.Random) -> None:
    """SNLI-VE in the Hub's schema (``HuggingFaceM4/SNLI-VE``: filename, premise, hypothesis,
    label) over the synthetic image world: each scene is one rendered image, its caption the
    premise the image replaces, three hypotheses (one per label); every scene in one split
    only, as SNLI-VE's splits are image-disjoint. The images are PNGs beside the rows."""
    import sys

    from PIL import Image

    sys.path.insert(0, str(ROOT.parent.parent))
    import hashlib
    import shutil

    from workflow_scripts.multimodal import scene_world

    base = ROOT / "HuggingFaceM4/SNLI-VE"
    shutil.rmtree(base / "images", ignore_errors=True)
    (base / "images").mkdir(parents=True)
    sums = []
    # 2,000 training scenes: the demo encoder needs about 1,500-2,500 steps of batches of 16
    # before it relates a hypothesis to its premise, caption or image, and that many rows to
    # learn it rather than memorise them.
    for split, scenes in (("train", 2000), ("validation", 200), ("test", 200)):
        rows = []
        for n in range(scenes):
            scene = scene_world.random_scene(rng)
            name = f"{split}-{n:04d}.png"
            Image.fromarray(scene_world.render(scene, rng)).save(base / "images" / name, optimize=True)
            sums.append(f"{hashlib.sha256((base / 'images' / name).read_bytes()).hexdigest()}  {name}")
            for hypothesis, label in scene_world.pairs(scene, rng):
                rows.append(
                    {
                        "filename": name,
                        "premise": scene.caption(),
                        "hypothesis": hypothesis,
                        "label": scene_world.LABELS.index(label),
                    }
                )
        write_jsonl(base / "default" / f"{split}.jsonl", rows)
    # The download cache's lock: the embed step checks every image against it.
    (base / "images" / "SHA256SUMS").write_text("\n".join(sums) + "\n")


def make_nlvr2(rng: random.Random) -> None:
    """NLVR2 in its release's layout (lil-lab/nlvr's nlvr2/data: ``train.json``, ``dev.json``,
    images under ``<split>/`` named ``<split>-<set>-<pair>-img0.png`` and ``-img1.png``) over
    pairs of scenes of the image world: two statements per pair about the left image, the
    right one or both, one true and one false."""
    import hashlib
    import shutil
    import sys

    from PIL import Image

    sys.path.insert(0, str(ROOT.parent.parent))
    from workflow_scripts.multimodal import scene_world

    base = ROOT / "lil-lab/nlvr2"
    shutil.rmtree(base, ignore_errors=True)

    def statements(left, right):
        a, b = left.things[0], right.things[0]
        colour, shape = rng.choice(tuple(scene_world.COLOURS)), rng.choice(scene_world.SHAPES)
        size = rng.choice(scene_world.SIZES)
        return [
            (f"The left image shows a {colour} {shape}.", a.colour == colour and a.shape == shape),
            (f"The right image shows a {colour} {shape}.", b.colour == colour and b.shape == shape),
            (f"Both images show a {shape}.", a.shape == b.shape == shape),
            (f"Exactly one image shows a {colour} object.", (a.colour == colour) != (b.colour == colour)),
            (f"The left image shows a {size} object.", a.size == size),
            (f"The right image shows a {size} object.", b.size == size),
        ]

    sums = []
    for split, pairs in (("train", 300), ("dev", 60)):
        (base / "images" / split).mkdir(parents=True)
        rows = []
        for n in range(pairs):
            left, right = scene_world.random_scene(rng), scene_world.random_scene(rng)
            for k, scene in enumerate((left, right)):
                name = f"{split}/{split}-{n}-0-img{k}.png"
                Image.fromarray(scene_world.render(scene, rng)).save(base / "images" / name, optimize=True)
                sums.append(f"{hashlib.sha256((base / 'images' / name).read_bytes()).hexdigest()}  {name}")
            options = statements(left, right)
            while all(t for _, t in options) or not any(t for _, t in options):  # redraw the values
                options = statements(left, right)
            true = rng.choice([s for s, t in options if t])
            false = rng.choice([s for s, t in options if not t])
            for j, (sentence, label) in enumerate(rng.sample([(true, "True"), (false, "False")], 2)):
                rows.append(
                    {
                        "identifier": f"{split}-{n}-0-{j}",
                        "sentence": sentence,
                        "label": label,
                        "left_url": "",
                        "right_url": "",
                        "writer": "demo",
                    }
                )
        write_jsonl(base / f"{split}.json", rows)
    (base / "images" / "SHA256SUMS").write_text("\n".join(sums) + "\n")


def make_vqa_v2(rng: random.Random) -> None:
    """VQA v2 in its release's layout (visualqa.org: ``v2_OpenEnded_mscoco_<subset>_questions.json``
    and ``v2_mscoco_<subset>_annotations.json``; COCO-named JPEGs under ``images/<subset>/``)
    over scenes of the image world: two questions per image, ten answers each, a few of them
    another annotator's slip."""
    import hashlib
    import shutil
    import sys

    from PIL import Image

    sys.path.insert(0, str(ROOT.parent.parent))
    from workflow_scripts.multimodal import scene_world

    base = ROOT / "visualqa/vqa_v2"
    shutil.rmtree(base, ignore_errors=True)
    header = {
        "info": {"description": "xstilts demo in the layout of VQA v2.0"},
        "task_type": "Open-Ended",
        "data_type": "mscoco",
        "license": {"name": "demo data"},
    }

    def questions(thing):
        yes_no = rng.choice(scene_world.SIZES)
        return [
            (f"What color is the {thing.shape}?", thing.colour, tuple(scene_world.COLOURS)),
            (f"Which side is the {thing.shape} on?", thing.side, scene_world.SIDES),
            (f"Is the {thing.shape} {yes_no}?", "yes" if thing.size == yes_no else "no", ("yes", "no")),
            ("What is in the picture?", thing.shape, scene_world.SHAPES),
        ]

    sums = []
    for subset, images in (("train2014", 300), ("val2014", 60)):
        (base / "images" / subset).mkdir(parents=True)
        qs, anns = [], []
        for n in range(images):
            image_id = 100000 * (1 if subset == "train2014" else 2) + n
            scene = scene_world.random_scene(rng)
            name = f"{subset}/COCO_{subset}_{image_id:012d}.jpg"
            Image.fromarray(scene_world.render(scene, rng)).save(base / "images" / name, quality=85, optimize=True)
            sums.append(f"{hashlib.sha256((base / 'images' / name).read_bytes()).hexdigest()}  {name}")
            for k, (question, answer, values) in enumerate(rng.sample(questions(scene.things[0]), 2)):
                qid = image_id * 1000 + k
                given = [answer if rng.random() > 0.1 else rng.choice(values) for _ in range(10)]
                qs.append({"image_id": image_id, "question": question, "question_id": qid})
                anns.append(
                    {
                        "question_id": qid,
                        "image_id": image_id,
                        "multiple_choice_answer": answer,
                        "answers": [
                            {"answer": a, "answer_confidence": "yes", "answer_id": i + 1} for i, a in enumerate(given)
                        ],
                    }
                )
        (base / f"v2_OpenEnded_mscoco_{subset}_questions.json").write_text(
            json.dumps({**header, "data_subtype": subset, "questions": qs}) + "\n"
        )
        (base / f"v2_mscoco_{subset}_annotations.json").write_text(
            json.dumps({**header, "data_subtype": subset, "annotations": anns}) + "\n"
        )
    (base / "images" / "SHA256SUMS").write_text("\n".join(sums) + "\n")


def make_flickr30k() -> None:
    """Karpathy's Flickr30k split file (``dataset_flickr30k.json``) over the demo's SNLI-VE
    images, as the real one lists the images SNLI-VE reads: two captions per scene (its
    caption and a rewording), the scenes' SNLI-VE splits as train, val and test."""
    import json as json_

    base = ROOT / "HuggingFaceM4/SNLI-VE"
    records = []
    for split, name in (("train", "train"), ("validation", "val"), ("test", "test")):
        seen = {}
        for line in (base / "default" / f"{split}.jsonl").read_text().splitlines():
            row = json_.loads(line)
            seen.setdefault(row["filename"], row["premise"])
        for filename, caption in seen.items():
            words = caption.rstrip(".").lower().split()  # "a big red ball on the left"
            reworded = f"On the {words[-1]} there is a {' '.join(words[1:-3])}."
            records.append({"filename": filename, "split": name, "sentences": [{"raw": caption}, {"raw": reworded}]})
    out = ROOT / "karpathy/flickr30k"
    out.mkdir(parents=True, exist_ok=True)
    (out / "dataset_flickr30k.json").write_text(json_.dumps({"dataset": "flickr30k", "images": records}) + "\n")


def main() -> None:
    rng = random.Random(0)
    # New generators go last: each draws its own seed, so earlier files stay byte-identical.
    for make in (
        make_mnli,
        make_xnli,
        make_squad,
        make_xquad,
        make_hellaswag,
        make_udpos,
        make_tatoeba,
        make_wikipedia,
        make_panx,
        make_pawsx,
        make_mlqa_tydiqa,
        make_squad_v2,
        make_nli_family,
        make_choice_family,
        make_bucc,
        make_ccg,
        make_foreign_train,
        make_parallel,
    ):
        make(random.Random(rng.random()))
    # XTREME-R additions, each on its own seed: the files above do not change.
    make_xcopa_family(random.Random("xcopa"))
    make_ranking(random.Random("ranking"))
    # Multimodal (docs/protocol.md §9): SNLI-VE over the synthetic image world.
    make_snli_ve(random.Random("snli_ve"))
    make_nlvr2(random.Random("nlvr2"))
    make_vqa_v2(random.Random("vqa_v2"))
    make_flickr30k()
    print(
        f"wrote {sum(1 for _ in ROOT.rglob('*.jsonl'))} files under {ROOT} and the parallel corpora"
        f" under {PARALLEL_ROOT}"
    )


if __name__ == "__main__":
    main()
