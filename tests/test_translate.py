"""Answer-span re-alignment with a deterministic fake translator that perturbs like MT does."""

import hashlib
import shutil
from pathlib import Path

import pytest

from conftest import REPO, train_log_record
from workflow_scripts.data.prepare import read_table
from workflow_scripts.spec.basics import InputError
from workflow_scripts.translation.translate import (
    CLOSE,
    OPEN,
    fuzzy_find,
    read_marked,
    translate_rows,
    translate_spans,
)

pytestmark = pytest.mark.unit


def test_read_marked_cleans_context_and_points_at_answer():
    ctx, start, ans = read_marked("Er kaufte <b> das Buch </b>gestern.")
    assert ans == "das Buch"
    assert ctx[start : start + len(ans)] == ans
    assert OPEN not in ctx and CLOSE not in ctx
    assert read_marked("Er kaufte das Buch.") is None
    assert read_marked("Er <b>kaufte <b>das</b> Buch.") is None
    assert read_marked("Er </b>kaufte<b> das Buch.") is None
    assert read_marked("Er <b> </b> kaufte.") is None
    # Re-cased and re-spaced tags are still markers.
    assert read_marked("Er kaufte < B >das Buch</ b> gestern.")[1:] == (10, "das Buch")


def test_fuzzy_find_respects_the_distance_limit():
    context = "Gestern kaufte Anna das rote Buch am Markt."
    assert fuzzy_find("rotes Buch", context, 10) == (24, "rote Buch")
    # "Bahnhof" vs any substring is more than len/2 edits away.
    assert fuzzy_find("Bahnhof", context, 10) is None
    # The cap applies even for long answers.
    assert fuzzy_find("das rote Buch am Markt", "ganz andere Worte hier", 3) is None
    assert fuzzy_find("", context, 10) is None


def _bucket(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 100


def perturbing_translator(lost_share: int):
    """Deterministic stand-in for MT: re-cases, re-spaces and inflects; loses or breaks
    the markers for `lost_share`% of inputs; also translates answers alone the same way."""

    def translate_one(text: str) -> str:
        if not text:
            return ""
        b = _bucket(text)
        out = text.replace(".", " .").replace(",", " ,")  # re-spaced punctuation
        if OPEN in out and b < lost_share:
            kind = b % 3
            if kind == 0:
                out = out.replace(OPEN, "").replace(CLOSE, "")  # markers dropped
            elif kind == 1:
                out = out.replace(OPEN, "< b >").replace(CLOSE, "")  # one marker lost, one re-spaced
            else:
                out = out.replace(OPEN, "").replace(CLOSE, OPEN)  # moved / malformed
        elif OPEN in out and b % 5 == 0:
            out = out.replace(OPEN, "<B>").replace(CLOSE, "</B>")  # re-cased, still usable
        if b % 4 == 0:
            out = out.replace("market", "markets")  # inflection
        return out

    return lambda texts: [translate_one(t) for t in texts]


def test_every_kept_span_is_exact_and_stats_add_up(demo_data):
    rows = read_table(demo_data["squad.train"]).to_pylist()
    rows.append({**rows[0], "id": "no-answer", "answer_texts": [], "answer_starts": []})
    rows.append({**rows[1], "id": "wrong-start", "answer_starts": [rows[1]["answer_starts"][0] + 1]})
    out, stats = translate_spans(rows, perturbing_translator(lost_share=30), max_distance=10)
    for r in out:
        s, t = r["answer_starts"][0], r["answer_texts"][0]
        assert t and r["context"][s : s + len(t)] == t
    assert stats["kept"] == len(out)
    assert stats["recovered_by_markers"] + stats["recovered_by_fuzzy_match"] == stats["kept"]
    dropped = stats["dropped_no_answer_in_source"] + stats["dropped_unaligned"]
    assert stats["kept"] + dropped == stats["examples"] == len(rows)
    assert stats["dropped_no_answer_in_source"] == 2
    assert stats["recovered_by_fuzzy_match"] > 0


def test_recovery_rate_when_markers_survive_ninety_percent(demo_data):
    rows = read_table(demo_data["squad.train"]).to_pylist()
    _, stats = translate_spans(rows, perturbing_translator(lost_share=10), max_distance=10)
    assert stats["recovered_by_markers"] < len(rows)
    assert stats["kept"] / stats["examples"] >= 0.97


def test_classification_and_choices_keep_labels(demo_data):
    rows = read_table(demo_data["mnli.train"]).to_pylist()[:20]
    out, _stats = translate_rows("classification", rows, lambda ts: [t.upper() for t in ts], "de", 10)
    assert [r["label"] for r in out] == [r["label"] for r in rows]
    assert all(r["lang"] == "de" and r["text_a"] == src["text_a"].upper() for r, src in zip(out, rows))
    mc = [{"id": "1", "lang": "en", "context": "c", "choices": ["a", "b", "", "d"], "label": 2}]
    out, _ = translate_rows("multiple_choice", mc, lambda ts: [t + "!" if t else "" for t in ts], "de", 10)
    assert out[0]["choices"] == ["a!", "b!", "", "d!"] and out[0]["label"] == 2
    with pytest.raises(ValueError):
        translate_rows("tagging", [], lambda ts: ts, "de", 10)


# ----- the MarianMT path, on the tiny demo translator ---------------------------------------

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from workflow_scripts.spec.translation_settings import TranslationSettings  # noqa: E402
from workflow_scripts.translation.translate import translation_quality  # noqa: E402
from workflow_scripts.translation.translators import MarianTranslator, TranslationCache  # noqa: E402

# greedy and short, on the transformers engine unless a test names another; the batch size is
# the job's own (--batch-size), not the workflow's
MT_SETTINGS = TranslationSettings.defaults().replace(
    backend="transformers", batch_size=8, num_beams=1, max_new_tokens=12, max_fuzzy_distance=10
)


@pytest.fixture(scope="module")
def translator_dir(tmp_path_factory, demo_data):
    from workflow_scripts.models.demo_models import build_demo_translator
    from workflow_scripts.spec.model_settings import DemoTranslator

    out = tmp_path_factory.mktemp("mt") / "de"
    settings = DemoTranslator.defaults().replace(
        vocab_size=800, d_model=16, layers=1, heads=2, ffn_dim=32, max_position_embeddings=64
    )
    build_demo_translator(settings, [str(p) for p in demo_data.values()], "de", out)  # no corpus: untrained
    return out


def test_cache_persists_across_jobs_and_separates_models(tmp_path):
    db = tmp_path / "cache.sqlite"
    TranslationCache(db, "model-a").put_many({"Hello.": "Hallo."})
    assert TranslationCache(db, "model-a").get_many(["Hello.", "Bye."]) == {"Hello.": "Hallo."}
    assert TranslationCache(db, "model-b").get_many(["Hello."]) == {}


def test_rerun_translates_only_new_text(tmp_path, translator_dir, demo_data):
    import torch

    texts = [r["text_a"] for r in read_table(demo_data["mnli.train"]).to_pylist()[:30]]
    first = MarianTranslator(translator_dir, MT_SETTINGS, torch.device("cpu"), tmp_path / "c.sqlite")
    out1 = first(texts + texts[:5])  # repeats are translated once
    assert first.counts["segments_translated"] == first.counts["segments_requested"] <= len(set(texts)) * 2
    second = MarianTranslator(translator_dir, MT_SETTINGS, torch.device("cpu"), tmp_path / "c.sqlite")
    assert second(texts) == out1[:30]
    assert second.counts["segments_translated"] == 0
    assert second.counts["segments_from_cache"] == second.counts["segments_requested"] > 0


def test_inputs_beyond_the_model_limit_and_empty_strings(tmp_path, translator_dir):
    import torch

    mt = MarianTranslator(translator_dir, MT_SETTINGS, torch.device("cpu"), None)
    long_text = " ".join(["Anna bought the red book at the market"] * 40)  # no sentence breaks
    segments = mt._segments(long_text)
    assert len(segments) > 1 and all(len(mt.tokenizer(s)["input_ids"]) <= mt.limit for s in segments)
    assert " ".join(segments) == long_text
    out = mt(["", long_text, "   "])
    assert out[0] == "" and out[2] == "" and isinstance(out[1], str)


@pytest.fixture(scope="module")
def converted_dir(tmp_path_factory, translator_dir):
    from workflow_scripts.translation.translators import main

    out = tmp_path_factory.mktemp("ct2") / "de"
    main(["convert", "--model", str(translator_dir), "--output", str(out)])
    return out


def test_ctranslate2_and_transformers_give_the_same_greedy_translations(translator_dir, converted_dir, demo_data):
    import torch

    texts = [r["text_a"] for r in read_table(demo_data["xnli.dev"]).to_pylist()[:40]]
    hf = MarianTranslator(translator_dir, MT_SETTINGS.replace(backend="transformers"), torch.device("cpu"))
    for threads in (1, 2):  # batches run in parallel with 2 threads: same strings, same order
        ct2 = MarianTranslator(
            translator_dir,
            MT_SETTINGS.replace(backend="ctranslate2", compute_type="float32"),
            torch.device("cpu"),
            converted=converted_dir,
            threads=threads,
        )
        assert ct2(texts) == hf(texts)
    assert ct2.describe()["backend"] == "ctranslate2" and ct2.describe()["precision"] == "float32"
    # The engine and its precision are part of the cache key.
    assert ct2.cache.model_key != hf.cache.model_key
    int8 = MarianTranslator(
        translator_dir,
        MT_SETTINGS.replace(backend="ctranslate2", compute_type="int8"),
        torch.device("cpu"),
        converted=converted_dir,
    )
    assert int8.cache.model_key != ct2.cache.model_key


def test_ctranslate2_backend_refuses_a_missing_or_stale_conversion(tmp_path, translator_dir, converted_dir):
    import shutil

    import torch

    settings = MT_SETTINGS.replace(backend="ctranslate2")
    with pytest.raises(InputError, match="needs the converted model"):
        MarianTranslator(translator_dir, settings, torch.device("cpu"))
    other = tmp_path / "other"
    shutil.copytree(translator_dir, other)
    (other / "generation_config.json").write_text('{"num_beams": 2}')
    with pytest.raises(InputError, match="converted from other weights"):
        MarianTranslator(other, settings, torch.device("cpu"), converted=converted_dir)
    with pytest.raises(InputError, match="not a converted translator"):
        MarianTranslator(translator_dir, settings, torch.device("cpu"), converted=translator_dir)
    with pytest.raises(InputError, match="backend: 'fairseq' is not one of 'ctranslate2', 'transformers'"):
        MT_SETTINGS.replace(backend="fairseq")


# --- CTranslate2's CUDA 12 cuBLAS -----------------------------------------------------------------


def _unloadable(loaded: list[str], loads: set[str] = frozenset()):
    """A stand-in for translators.load_shared_library: records each name or path asked for,
    loads those in ``loads`` and fails on the others as dlopen does."""

    def load(name_or_path: str) -> None:
        loaded.append(name_or_path)
        if name_or_path not in loads:
            raise OSError(f"{name_or_path}: cannot open shared object file: No such file or directory")

    return load


def _cublas_package(site: Path) -> Path:
    """A fake nvidia-cublas-cu12 installation under ``site`` (empty files: found, not loadable)."""
    lib = site / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublasLt.so.12").touch()
    (lib / "libcublas.so.12").touch()
    return lib / "libcublas.so.12"


def test_no_cuda12_cublas_anywhere_is_an_error_naming_the_package_the_variable_and_the_other_backend(
    tmp_path, monkeypatch
):
    from workflow_scripts.translation import translators as T

    loaded: list[str] = []
    monkeypatch.setattr(T, "load_shared_library", _unloadable(loaded))
    assert T.find_packaged_cublas12([str(tmp_path)]) is None
    with pytest.raises(InputError) as error:
        T.ensure_cublas12([str(tmp_path)])
    message = str(error.value)
    assert f"pip install {T.CUBLAS_12_PACKAGE}" in message and T.CUBLAS_12_PACKAGE.startswith("nvidia-cublas-cu12==12.")
    assert "LD_LIBRARY_PATH" in message and "lib64" in message
    assert "translation.backend: transformers" in message
    assert loaded == ["libcublas.so.12"]


def test_cuda12_cublas_of_an_installed_package_is_found_and_preloaded(tmp_path, monkeypatch):
    from workflow_scripts.translation import translators as T

    library = _cublas_package(tmp_path / "site-packages")
    assert T.find_packaged_cublas12([str(tmp_path / "elsewhere"), str(tmp_path / "site-packages")]) == library
    loaded: list[str] = []
    lt = str(library.with_name("libcublasLt.so.12"))
    monkeypatch.setattr(T, "load_shared_library", _unloadable(loaded, {lt, str(library)}))
    where = T.ensure_cublas12([str(tmp_path / "site-packages")])
    assert str(library) in where
    # the loader's own search first, then the package's cublasLt (libcublas needs it), then libcublas
    assert loaded == ["libcublas.so.12", lt, str(library)]


def test_cuda12_cublas_on_the_loader_path_is_used_as_it_is(tmp_path, monkeypatch):
    from workflow_scripts.translation import translators as T

    _cublas_package(tmp_path)
    loaded: list[str] = []
    monkeypatch.setattr(T, "load_shared_library", _unloadable(loaded, {"libcublas.so.12"}))
    assert "dynamic loader" in T.ensure_cublas12([str(tmp_path)])
    assert loaded == ["libcublas.so.12"]


def test_a_packaged_cublas_that_does_not_load_is_an_error_naming_it(tmp_path, monkeypatch):
    from workflow_scripts.translation import translators as T

    library = _cublas_package(tmp_path)
    monkeypatch.setattr(T, "load_shared_library", _unloadable([]))
    with pytest.raises(InputError, match="does not load") as error:
        T.ensure_cublas12([str(tmp_path)])
    assert str(library) in str(error.value) and "--force-reinstall" in str(error.value)


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build a stand-in libcublas.so.12")
def test_a_preloaded_library_serves_a_later_dlopen_of_its_bare_soname(tmp_path):
    """What the preload rests on, with a real shared library: once loaded from the package
    folder, dlopen("libcublas.so.12"), as ctranslate2 calls it, gets that copy. In a
    subprocess: a loaded library cannot be unloaded from the test process."""
    import subprocess
    import sys

    library = _cublas_package(tmp_path)
    library.unlink()
    library.with_name("libcublasLt.so.12").unlink()
    source = tmp_path / "stand_in.c"
    source.write_text("int stand_in_version(void) { return 12; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-Wl,-soname,libcublas.so.12", "-o", str(library), str(source)], check=True
    )
    script = (
        "import ctypes, sys\n"
        "from workflow_scripts.translation import translators as T\n"
        "try:\n"
        "    ctypes.CDLL('libcublas.so.12')\n"
        "    sys.exit(3)  # this system has one: nothing to show\n"
        "except OSError:\n"
        "    pass\n"
        f"print(T.ensure_cublas12([{str(tmp_path)!r}]))\n"
        "print(ctypes.CDLL('libcublas.so.12').stand_in_version())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    if proc.returncode == 3:
        pytest.skip("this system's loader finds a libcublas.so.12 of its own")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{library} (nvidia-cublas-cu12, preloaded)", "12"]


def test_ctranslate2_on_a_gpu_checks_for_cublas_before_building_its_translator(tmp_path, monkeypatch):
    import torch

    from workflow_scripts.translation import translators as T

    def missing() -> str:
        raise InputError("no CUDA 12 cuBLAS (stand-in)")

    monkeypatch.setattr(T, "ensure_cublas12", missing)
    with pytest.raises(InputError, match="stand-in"):
        T.CTranslate2Engine(tmp_path, tmp_path, None, MT_SETTINGS, torch.device("cuda", 0), 10, 1)
    # on the CPU it is not asked: the next check (the conversion record) speaks
    with pytest.raises(InputError, match="not a converted translator"):
        T.CTranslate2Engine(tmp_path, tmp_path, None, MT_SETTINGS, torch.device("cpu"), 10, 1)


def test_random_translator_drops_spans_without_crashing(tmp_path, translator_dir, demo_data):
    cmd = [
        sys.executable,
        "-m",
        "workflow_scripts.translation.translate",
        "data",
        "--task",
        "squad",
        "--lang",
        "de",
        "--model",
        str(translator_dir),
        "--input",
        str(demo_data["squad.train"]),
        "--settings",
        MT_SETTINGS.to_json(),
        "--output",
        str(tmp_path / "out.parquet"),
        "--stats",
        str(tmp_path / "stats.json"),
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    stats = json.loads((tmp_path / "stats.json").read_text())
    out = read_table(tmp_path / "out.parquet").to_pylist()
    assert stats["kept"] == len(out)
    assert stats["kept"] + stats["dropped_unaligned"] + stats["dropped_no_answer_in_source"] == stats["examples"]
    for r in out:
        s, t = r["answer_starts"][0], r["answer_texts"][0]
        assert r["context"][s : s + len(t)] == t


def test_quality_against_references():
    perfect = translation_quality(
        lambda xs: list(xs), ["Der Hund schläft.", "Ein Haus."], ["Der Hund schläft.", "Ein Haus."]
    )
    assert perfect["bleu"] == pytest.approx(100) and perfect["chrf"] == pytest.approx(100)
    worse = translation_quality(lambda xs: ["Die Katze." for _ in xs], ["a", "b"], ["Der Hund schläft.", "Ein Haus."])
    assert worse["bleu"] < 10 and worse["chrf"] < perfect["chrf"]
    assert "nrefs:1" in perfect["bleu_signature"]
    with pytest.raises(ValueError):
        translation_quality(lambda xs: list(xs), ["a"], [])


def test_translation_tables(tmp_path):
    from workflow_scripts.reporting.tables import translation_tables

    stats = tmp_path / "train.stats.json"
    stats.write_text(
        json.dumps(
            {
                "task": "squad",
                "language": "de",
                "examples": 10,
                "kept": 8,
                "recovered_by_markers": 6,
                "recovered_by_fuzzy_match": 2,
                "segments_requested": 20,
                "segments_from_cache": 5,
            }
        )
    )
    quality = tmp_path / "de.json"
    quality.write_text(
        json.dumps(
            {
                "language": "de",
                "splits": {
                    "dev": {"bleu": 30.0, "chrf": 55.0, "sentences": 4, "bleu_signature": "B", "chrf_signature": "C"}
                },
            }
        )
    )
    run = tmp_path / "results/demo/intermediate/xlmr_tiny/qqp_de/seed1/encoder"
    run.parent.mkdir(parents=True)  # the model discarded, its record beside it (disk.py)
    (run.parent / "train_log.json").write_text(
        json.dumps(train_log_record(best={"scores": {"qqp": {"accuracy": 71.5}}}, settings={"language": "de"}))
    )
    test = tmp_path / "test.stats.json"  # translate-test: xnli de test into English
    test.write_text(
        json.dumps(
            {
                "task": "xnli",
                "language": "en",
                "source_language": "de",
                "direction": "de-en",
                "examples": 5,
                "kept": 5,
                "segments_requested": 10,
                "segments_from_cache": 0,
            }
        )
    )
    md, frame = translation_tables([str(stats), str(test)], [str(quality)], [str(run)])
    assert list(frame[frame["kind"] == "data"]["direction"]) == ["en-de", "de-en"]
    dev = frame[frame["kind"] == "intermediate_dev"].iloc[0]
    assert (dev["intermediate"], dev["data"], dev["task"], dev["median"]) == ("qqp_de", "de", "qqp", 71.5)
    assert "71.5" in md
    assert "squad" in md and "30.0" in md and "55.0" in md
    row = frame[frame["kind"] == "data"].iloc[0]
    assert (row["dropped"], row["cache_hit_rate"]) == (2, 0.25)
    assert frame[frame["kind"] == "quality"].iloc[0]["bleu"] == 30.0


@pytest.mark.parametrize("source,target", [("en", "de"), ("de", "en")])
def test_quality_pairs_xnli_sentences_in_either_direction(tmp_path, translator_dir, demo_data, source, target):
    """en -> de is scored against XNLI's German translations; de -> en (translate-test)
    against the English originals; both on the same parallel pairs."""
    from workflow_scripts.translation.translate import main

    out = tmp_path / "quality.json"
    main(
        [
            "quality",
            "--from-lang",
            source,
            "--lang",
            target,
            "--model",
            str(translator_dir),
            "--data",
            f"dev={demo_data['xnli.dev']}",
            "--settings",
            MT_SETTINGS.to_json(),
            "--output",
            str(out),
        ]
    )
    result = json.loads(out.read_text())
    rows = read_table(demo_data["xnli.dev"]).to_pylist()
    pairs = {r["id"].replace("-de-", "-") for r in rows if r["lang"] == "de"} & {
        r["id"].replace("-en-", "-") for r in rows if r["lang"] == "en"
    }
    assert result["direction"] == f"{source}-{target}" and result["splits"]["dev"]["sentences"] == 2 * len(pairs) > 0
    assert result["reference"] == ("XNLI human translations" if source == "en" else "XNLI English originals")


@pytest.fixture(scope="module")
def multi_target_dir(tmp_path_factory, translator_dir):
    """The demo translator with two language tokens in its vocabulary, as OPUS-MT's
    multi-target models (en-ar, en-zh) have."""
    from transformers import MarianMTModel

    out = tmp_path_factory.mktemp("mt-multi") / "ar"
    shutil.copytree(translator_dir, out)
    vocab = json.loads((out / "vocab.json").read_text())
    for code in (">>ara<<", ">>arz<<"):
        vocab[code] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab))
    model = MarianMTModel.from_pretrained(str(out))
    model.resize_token_embeddings(len(vocab))
    model.save_pretrained(out)
    return out


def test_a_multi_target_translator_needs_its_target_token(tmp_path, multi_target_dir):
    import torch

    with pytest.raises(InputError, match=r"several languages \(>>ara<<, >>arz<<\).*target_token"):
        MarianTranslator(multi_target_dir, MT_SETTINGS, torch.device("cpu"))
    with pytest.raises(InputError, match="'>>cmn_Hans<<' is not one of its language tokens"):
        MarianTranslator(multi_target_dir, MT_SETTINGS.replace(target_token=">>cmn_Hans<<"), torch.device("cpu"))

    mt = MarianTranslator(
        multi_target_dir, MT_SETTINGS.replace(target_token=">>arz<<"), torch.device("cpu"), tmp_path / "c.sqlite"
    )

    class Recording:  # the engine, noting what it is asked to translate
        def __init__(self, engine) -> None:
            self.engine, self.batches_per_call, self.tokens_generated = engine, engine.batches_per_call, 0

        def __call__(self, segments):
            seen.extend(segments)
            return self.engine(segments)

    seen: list[str] = []
    engine, mt.engine = mt.engine, Recording(mt.engine)
    out = mt(["The cat sleeps.", "Anna reads a book."])
    mt.engine = engine
    assert len(out) == 2 and seen and all(s.startswith(">>arz<< ") for s in seen)
    code_id = mt.tokenizer.convert_tokens_to_ids(">>arz<<")
    assert mt.tokenizer(seen[0])["input_ids"][0] == code_id  # one token, the model's own
    assert mt.describe()["target_token"] == ">>arz<<"
    other = MarianTranslator(multi_target_dir, MT_SETTINGS.replace(target_token=">>ara<<"), torch.device("cpu"))
    assert other.cache.model_key != mt.cache.model_key  # another language, another cache entry


def test_a_single_target_translator_takes_no_target_token(translator_dir):
    import torch

    with pytest.raises(InputError, match="none: a single-target model"):
        MarianTranslator(translator_dir, MT_SETTINGS.replace(target_token=">>deu<<"), torch.device("cpu"))
    assert MarianTranslator(translator_dir, MT_SETTINGS, torch.device("cpu")).target_token is None


# ----- image tasks: the text is translated, the images and labels carry over ----------------

# The demo image world's mirrors (demo/hub/) and the release folders the loaders read.
IMAGE_TASK_SOURCES = {
    "snli_ve": ("HuggingFaceM4/SNLI-VE", {}),
    "hypothesis_only": ("HuggingFaceM4/SNLI-VE", {}),
    "snli_caption": ("HuggingFaceM4/SNLI-VE", {}),
    "vqa_v2": ("visualqa/vqa_v2", {"path": "demo/hub/visualqa/vqa_v2"}),
    "nlvr2": ("lil-lab/nlvr2", {"path": "demo/hub/lil-lab/nlvr2"}),
    "flickr30k": ("karpathy/flickr30k", {"path": "demo/hub/karpathy/flickr30k"}),
}


@pytest.fixture(scope="module")
def image_task_rows(tmp_path_factory) -> dict[str, list[dict]]:
    """The first rows of each image task's (and its text controls') demo dev split, read
    through the real loaders."""
    from conftest import local_settings
    from workflow_scripts.data.prepare import prepare

    out = tmp_path_factory.mktemp("image-data")
    rows = {}
    for task, (path, options) in IMAGE_TASK_SOURCES.items():
        prepare(task, "dev", local_settings(path, options=options), out / f"{task}.parquet")
        rows[task] = read_table(out / f"{task}.parquet").to_pylist()[:6]
    return rows


def test_image_tasks_translate_their_text_and_keep_images_labels_and_ids(tmp_path, translator_dir, image_task_rows):
    import torch

    from workflow_scripts.data.prepare import to_table
    from workflow_scripts.spec.formats import get_format
    from workflow_scripts.spec.tasks import get_task

    mt = MarianTranslator(translator_dir, MT_SETTINGS, torch.device("cpu"), tmp_path / "de.sqlite")
    expected = {
        "snli_ve": ["text_a"],
        "hypothesis_only": ["text_a", "text_b"],
        "snli_caption": ["text_a", "text_b"],
        "vqa_v2": ["text_a"],  # the question; the answers are the label vocabulary and stay English
        "nlvr2": ["text_a"],
        "flickr30k": ["text_a"],
    }
    for task, rows in image_task_rows.items():
        fmt = get_task(task).format
        out, stats = translate_rows(fmt, rows, mt, "de", 10)
        assert stats == {"examples": len(rows), "kept": len(rows), "translated_columns": expected[task]}
        assert len(out) == len(rows) > 0
        text = set(get_format(fmt).translated_columns)
        for r, src in zip(out, rows):
            assert r["lang"] == "de"
            assert r["text_a"] != src["text_a"], task
            if src.get("text_b"):  # the caption premise (snli_caption)
                assert r["text_b"] != src["text_b"]
            untouched = {c for c in src if c not in text | {"lang"}}
            assert {c: r[c] for c in untouched} == {c: src[c] for c in untouched}, task
            if task == "hypothesis_only":
                assert r["text_b"] is None  # no premise stays no premise
        to_table(get_task(task), out)  # the canonical schema holds
    # the arms share their hypotheses: hypothesis_only's come from the cache snli_ve filled
    first = MarianTranslator(translator_dir, MT_SETTINGS, torch.device("cpu"), tmp_path / "shared.sqlite")
    translate_rows("visual_classification", image_task_rows["snli_ve"], first, "de", 10)
    again = MarianTranslator(translator_dir, MT_SETTINGS, torch.device("cpu"), tmp_path / "shared.sqlite")
    translate_rows("classification", image_task_rows["hypothesis_only"], again, "de", 10)
    assert again.counts["segments_translated"] == 0 and again.counts["segments_from_cache"] > 0


def test_the_translate_step_writes_an_image_task_and_its_statistics(tmp_path, translator_dir, image_task_rows):
    import pyarrow.parquet as pq

    from workflow_scripts.data.prepare import to_table
    from workflow_scripts.reporting.tables import translation_tables
    from workflow_scripts.spec.tasks import get_task
    from workflow_scripts.translation.translate import main

    source = tmp_path / "dev.parquet"
    rows = image_task_rows["vqa_v2"]
    pq.write_table(to_table(get_task("vqa_v2"), rows), source)
    out, stats = tmp_path / "de" / "dev.parquet", tmp_path / "de" / "dev.stats.json"
    out.parent.mkdir()
    main(
        ["data", "--task", "vqa_v2", "--lang", "de", "--model", str(translator_dir), "--input", str(source)]
        + ["--settings", MT_SETTINGS.to_json(), "--output", str(out), "--stats", str(stats)]
    )
    translated = read_table(out, "visual_answer").to_pylist()
    assert [(r["id"], r["images"], r["answers"]) for r in translated] == [
        (r["id"], r["images"], r["answers"]) for r in rows
    ]
    assert all(r["lang"] == "de" for r in translated)
    _, frame = translation_tables([str(stats)], [])
    row = frame[frame["kind"] == "data"].iloc[0]
    assert (row["task"], row["direction"], row["examples"], row["dropped"]) == ("vqa_v2", "en-de", len(rows), 0)


def test_a_format_declares_its_translated_text_columns():
    from workflow_scripts.spec.formats import TaskFormat, get_format

    assert get_format("visual_answer").translated_columns == ("text_a",)  # not the answers
    assert get_format("tagging").translatable is False
    with pytest.raises(ValueError, match=r"translated_columns \['label'\]"):
        TaskFormat(
            name="x",
            columns={"text": "string", "label": "int64"},
            head=None,
            scorer=None,
            translated_columns=("label",),
        )
    with pytest.raises(InputError, match="cannot be machine-translated"):
        translate_rows("mining", [], lambda ts: ts, "de", 10)


def test_ctranslate2_without_its_cublas_falls_back_to_transformers_and_says_so(
    translator_dir, converted_dir, demo_data, monkeypatch, caplog
):
    """A GPU install without requirements-gpu.txt: the CTranslate2 engine cannot start, the
    transformers engine translates instead, with a warning; the stats and the cache key name
    the engine that ran, so its translations are never taken for CTranslate2's."""
    import torch

    from workflow_scripts.translation import translators as T

    def no_cublas(*args, **kwargs):
        raise T.CublasMissing("translation.backend ctranslate2 on a GPU needs the CUDA 12 cuBLAS")

    texts = [r["text_a"] for r in read_table(demo_data["xnli.dev"]).to_pylist()[:10]]
    settings = MT_SETTINGS.replace(backend="ctranslate2", compute_type="float32")
    genuine = MarianTranslator(translator_dir, settings, torch.device("cpu"), converted=converted_dir)
    monkeypatch.setattr(T, "CTranslate2Engine", no_cublas)
    with caplog.at_level("WARNING"):
        fallback = MarianTranslator(translator_dir, settings, torch.device("cpu"), converted=converted_dir)
    assert "translating with the transformers backend (fp32) instead" in caplog.text
    assert fallback.describe()["backend"] == "transformers"
    assert fallback.cache.model_key != genuine.cache.model_key
    hf = MarianTranslator(translator_dir, MT_SETTINGS.replace(precision="fp32"), torch.device("cpu"))
    assert fallback(texts) == hf(texts) and fallback.cache.model_key == hf.cache.model_key
    assert [T.precision_of_compute_type(c) for c in ("bfloat16", "int8_float16", "auto", "int8", "float32")] == [
        "bf16",
        "fp16",
        "fp16",
        "fp32",
        "fp32",
    ]
