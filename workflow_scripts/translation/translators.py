"""MarianMT (OPUS-MT) translation engines: CTranslate2 or transformers, behind one cached translator.

``MarianTranslator`` turns arbitrary strings into translations: it cuts them into sentences
that fit the model, deduplicates them, looks them up in a persistent cache, and sends what is
new, length-sorted, to its engine:

- ``ctranslate2`` (default): the same OPUS-MT weights converted once, by the
  ``convert_translator`` rule, into a CTranslate2 model; ``compute_type`` picks the precision
  at load time ("auto": int8 on CPU, the fastest supported type on a GPU). On CPU the
  job's threads run whole batches in parallel (one thread each), which beat intra-op
  threads in benchmarks/translation_throughput.py.
- ``transformers``: ``MarianMTModel.generate`` in ``translation.precision`` (fp32, or bf16 / fp16
  autocast, on any device: precision.py).

Both decode with the model's own generation config: its banned tokens (OPUS-MT bans <pad>)
and, when it forces </s> at the length limit, the same number of real tokens. With greedy
decoding and float32 the two engines give the same strings (tests/test_translate.py); the
cache key holds the engine, its precision and the library version, so translations of one
engine never stand in for another's.

CLI: ``python -m workflow_scripts.translation.translators convert --model DIR --output DIR``.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

from workflow_scripts.common import LOG, atomic_path, read_json, setup_logging
from workflow_scripts.precision import DTYPE_NAMES, Precision
from workflow_scripts.progress import progress
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.translation_settings import TranslationSettings

CONVERSION_RECORD = "xstilts_conversion.json"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Batches handed to the engine per call (and per cache write, per progress-bar tick).
_BATCHES_PER_CALL = 8

# ctranslate2's Linux wheel is a CUDA 12 build: on a GPU it dlopens this library by name at
# its first CUDA call (cuDNN is not needed for translation). torch's CUDA 13 wheels bring
# libcublas.so.13 only, and ctranslate2 does not look into pip's nvidia-* packages, so it is
# found only through LD_LIBRARY_PATH or the system's loader cache unless preloaded.
CUBLAS_12 = "libcublas.so.12"
CUBLAS_LT_12 = "libcublasLt.so.12"  # libcublas.so.12's own dependency, in the same folder
# Where the nvidia-cublas-cu12 package puts it, under a site-packages folder. Not in
# requirements.txt: several hundred MB that only GPU users of this backend need. Any 12.x
# cuBLAS serves ctranslate2's CUDA 12 build; this one is on PyPI (checked with `pip index
# versions nvidia-cublas-cu12`).
CUBLAS_12_PACKAGE_DIR = Path("nvidia", "cublas", "lib")
CUBLAS_12_PACKAGE = "nvidia-cublas-cu12==12.9.1.4"


class TranslationCache:
    """Persistent segment translations keyed by (model, engine, generation settings, source text).

    An SQLite file shared by every job of one language: a rerun, or a new task that repeats
    known text, translates only what is new. Writes are batched and committed atomically.
    """

    def __init__(self, path: Path | None, model_key: str) -> None:
        import sqlite3

        self.model_key = model_key
        self.memory: dict[str, str] = {}
        self.db = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, timeout=600)
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS translation (model TEXT, source TEXT, target TEXT, "
                "PRIMARY KEY (model, source))"
            )

    def get_many(self, sources: Sequence[str]) -> dict[str, str]:
        found = {s: self.memory[s] for s in sources if s in self.memory}
        missing = [s for s in sources if s not in found]
        if self.db is not None:
            for k in range(0, len(missing), 500):
                chunk = missing[k : k + 500]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT source, target FROM translation WHERE model = ? AND source IN ({marks})"
                found.update(self.db.execute(query, [self.model_key, *chunk]).fetchall())
        self.memory.update(found)
        return found

    def put_many(self, pairs: dict[str, str]) -> None:
        self.memory.update(pairs)
        if self.db is not None and pairs:
            with self.db:  # one transaction
                self.db.executemany(
                    "INSERT OR REPLACE INTO translation VALUES (?, ?, ?)",
                    [(self.model_key, s, t) for s, t in pairs.items()],
                )


def weights_digest(model_dir: Path) -> str:
    """The downloaded (or built) model's files: weights, vocabularies, configs."""
    digest = hashlib.sha256()
    for name in sorted(p.name for p in model_dir.iterdir() if p.is_file() and not p.name.startswith(".")):
        digest.update(name.encode() + b"\0")
        with (model_dir / name).open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def required_batch_size(settings: TranslationSettings) -> int:
    """The batch size the job set (--batch-size): the workflow's settings leave it out, since it
    changes only speed."""
    if settings.batch_size is None:
        raise InputError("translation needs a batch size (--batch-size)")
    return settings.batch_size


def model_key(model_dir: Path, settings: TranslationSettings, engine: dict[str, Any]) -> str:
    """What determines a translation: the weights and vocabularies, the engine with its
    precision and version, and the decoding settings."""
    generation: dict[str, Any] = {"num_beams": settings.num_beams, "max_new_tokens": settings.max_new_tokens}
    if settings.target_token:
        generation["target_token"] = settings.target_token
    text = weights_digest(model_dir) + json.dumps([generation, engine], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class TransformersEngine:
    def __init__(self, model_dir: Path, tokenizer, settings: TranslationSettings, dev, limit: int) -> None:
        import torch
        from transformers import MarianMTModel

        # fp32 weights, the forward under the precision policy's autocast (precision.py), as a backbone's
        self.model = MarianMTModel.from_pretrained(str(model_dir), dtype=torch.float32).to(dev).eval()
        self.tokenizer, self.settings, self.dev, self.limit = tokenizer, settings, dev, limit
        self.precision = Precision(settings.precision)  # named with this backend (TranslationSettings)
        self.precision.check_device(dev, "translation.precision")
        self.description = {
            "backend": "transformers",
            "precision": f"{DTYPE_NAMES[self.precision.name]}-autocast" if self.precision.mixed else "float32",
            "version": version("transformers"),
        }
        self.batches_per_call, self.tokens_generated = 1, 0

    def __call__(self, segments: list[str]) -> list[str]:
        import torch

        enc = self.tokenizer(segments, return_tensors="pt", padding=True, truncation=True, max_length=self.limit).to(
            self.dev
        )
        with torch.inference_mode(), self.precision.autocast(self.dev):
            out = self.model.generate(
                **enc, num_beams=self.settings.num_beams, max_new_tokens=self.settings.max_new_tokens
            )
        special = torch.tensor(self.tokenizer.all_special_ids, device=out.device)
        self.tokens_generated += int((~torch.isin(out, special)).sum())
        return [hyp.strip() for hyp in self.tokenizer.batch_decode(out, skip_special_tokens=True)]


def find_packaged_cublas12(search_path: Sequence[str] | None = None) -> Path | None:
    """The libcublas.so.12 of an installed nvidia-cublas-cu12 package: the first
    ``nvidia/cublas/lib`` holding it under a folder of ``search_path`` (default ``sys.path``,
    where pip's site-packages are)."""
    for folder in sys.path if search_path is None else search_path:
        candidate = Path(folder or ".") / CUBLAS_12_PACKAGE_DIR / CUBLAS_12
        if candidate.is_file():
            return candidate
    return None


def load_shared_library(name_or_path: str) -> None:
    """dlopen it for the whole process (RTLD_GLOBAL). A later dlopen by its bare soname, as
    ctranslate2's, then gets this copy instead of searching. Raises OSError when it cannot load."""
    ctypes.CDLL(name_or_path, mode=ctypes.RTLD_GLOBAL)


class CublasMissing(InputError):
    """ctranslate2's CUDA build cannot find or load the CUDA 12 cuBLAS it needs."""


def ensure_cublas12(search_path: Sequence[str] | None = None) -> str:
    """Make sure ctranslate2's CUDA build will find libcublas.so.12, before it is put on a GPU
    (it would otherwise fail at its first batch). Returns where the library came from.

    The dynamic loader's own search first (LD_LIBRARY_PATH, the loader cache: what
    ctranslate2 itself would find), then an installed nvidia-cublas-cu12 package, which is
    preloaded. An InputError names the ways to provide it where neither has it."""
    try:
        load_shared_library(CUBLAS_12)
        return f"{CUBLAS_12} from the dynamic loader's search path"
    except OSError as err:
        not_found = str(err)
    packaged = find_packaged_cublas12(search_path)
    if packaged is None:
        raise CublasMissing(
            f"translation.backend ctranslate2 on a GPU needs the CUDA 12 cuBLAS ({CUBLAS_12}), which is "
            f"neither on the loader's path ({not_found}) nor in an installed nvidia-cublas-cu12 package. "
            f"Install it into this environment (`pip install {CUBLAS_12_PACKAGE}`, found and preloaded "
            f"here), or set LD_LIBRARY_PATH to a CUDA 12 toolkit's lib64 folder (`module load cuda/12...` "
            f"on many clusters), or set `translation.backend: transformers`, which runs on torch's own CUDA."
        )
    try:
        lt = packaged.with_name(CUBLAS_LT_12)
        if lt.is_file():
            load_shared_library(str(lt))
        load_shared_library(str(packaged))
    except OSError as err:
        raise CublasMissing(
            f"translation.backend ctranslate2: {packaged} (nvidia-cublas-cu12) does not load: {err}. "
            f"Reinstall it (`pip install --force-reinstall {CUBLAS_12_PACKAGE}`), or set LD_LIBRARY_PATH "
            f"to a CUDA 12 toolkit's lib64 folder, or set `translation.backend: transformers`."
        ) from None
    return f"{packaged} (nvidia-cublas-cu12, preloaded)"


class CTranslate2Engine:
    def __init__(
        self, converted: Path, model_dir: Path, tokenizer, settings: TranslationSettings, dev, limit: int, threads: int
    ) -> None:
        if dev.type == "cuda":
            LOG.info("CTranslate2 on %s: %s", dev, ensure_cublas12())
        import ctranslate2
        from transformers import GenerationConfig

        record = read_json(converted / CONVERSION_RECORD) if (converted / CONVERSION_RECORD).is_file() else None
        if record is None:
            raise InputError(
                f"{converted} is not a converted translator (no {CONVERSION_RECORD}); run the convert_translator rule"
            )
        if record["source_digest"] != weights_digest(model_dir):
            raise InputError(f"{converted} was converted from other weights than {model_dir}; reconvert it")
        on_gpu = dev.type == "cuda"
        # CPU: one thread per batch, batches in parallel; GPU: one stream.
        self.translator = ctranslate2.Translator(
            str(converted),
            device="cuda" if on_gpu else "cpu",
            device_index=dev.index or 0,
            compute_type=settings.compute_type,
            inter_threads=1 if on_gpu else max(1, threads),
            intra_threads=1,
        )
        self.batches_per_call = _BATCHES_PER_CALL * (1 if on_gpu else max(1, threads))
        self.tokenizer, self.settings, self.limit = tokenizer, settings, limit
        self.batch_size = required_batch_size(settings)
        generation = GenerationConfig.from_pretrained(str(model_dir))
        # transformers counts a forced </s> among max_new_tokens; CTranslate2 counts real tokens.
        forced_eos = generation.forced_eos_token_id is not None
        self.max_decoding_length = settings.max_new_tokens - (1 if forced_eos else 0)
        # CTranslate2 drops Marian's <pad> from the converted vocabulary (it can never be
        # generated), so OPUS-MT's ban on it holds already and cannot be passed on: only bans
        # on tokens the converted model has are.
        known = _converted_vocabulary(converted)
        self.suppress = [
            seq
            for seq in (tokenizer.convert_ids_to_tokens(ids) for ids in generation.bad_words_ids or [])
            if all(token in known for token in seq)
        ]
        self.description = {
            "backend": "ctranslate2",
            "precision": self.translator.compute_type,
            "version": ctranslate2.__version__,
        }
        self.tokens_generated = 0

    def __call__(self, segments: list[str]) -> list[str]:
        ids = self.tokenizer(segments, truncation=True, max_length=self.limit)["input_ids"]
        results = self.translator.translate_batch(
            [self.tokenizer.convert_ids_to_tokens(x) for x in ids],
            max_batch_size=self.batch_size,
            beam_size=self.settings.num_beams,
            max_decoding_length=max(1, self.max_decoding_length),
            suppress_sequences=self.suppress or None,
        )
        self.tokens_generated += sum(len(r.hypotheses[0]) for r in results)
        return [
            self.tokenizer.decode(
                self.tokenizer.convert_tokens_to_ids(r.hypotheses[0]), skip_special_tokens=True
            ).strip()
            for r in results
        ]


def _engine(model_dir: Path, converted: Path | None, tokenizer, settings: TranslationSettings, dev, limit, threads):
    """The configured backend's engine. CTranslate2 on a GPU without its CUDA 12 cuBLAS (a GPU
    install without requirements-gpu.txt) falls back to the transformers engine on torch's
    own CUDA, in the precision nearest to the compute type, with a warning: the engine that
    ran is named in the job's stats and in the cache key, so its translations are never taken
    for CTranslate2's."""
    if settings.backend != "ctranslate2":
        return TransformersEngine(model_dir, tokenizer, settings, dev, limit)
    if converted is None:
        raise InputError("translation.backend ctranslate2 needs the converted model (--converted DIR)")
    try:
        return CTranslate2Engine(converted, model_dir, tokenizer, settings, dev, limit, threads)
    except CublasMissing as err:
        fallback = settings.replace(backend="transformers", precision=precision_of_compute_type(settings.compute_type))
        LOG.warning("%s -- translating with the transformers backend (%s) instead", err, fallback.precision)
        return TransformersEngine(model_dir, tokenizer, fallback, dev, limit)


def precision_of_compute_type(compute_type: str) -> str:
    """The transformers engine's precision nearest to a CTranslate2 compute type."""
    if "bfloat16" in compute_type:
        return "bf16"
    if "float16" in compute_type or compute_type == "auto":  # auto: float16 on a GPU
        return "fp16"
    return "fp32"


class MarianTranslator:
    """Batched, deduplicated, cached MarianMT translation of arbitrary-length strings.

    ``converted``: the CTranslate2 model of ``model_dir`` (needed by that backend only).
    """

    def __init__(
        self,
        model_dir: Path,
        settings: TranslationSettings,
        dev,
        cache_path: Path | None = None,
        converted: Path | None = None,
        threads: int = 1,
    ) -> None:
        from transformers import MarianConfig, MarianTokenizer

        if not (model_dir / "config.json").is_file():
            raise InputError(f"translator directory {model_dir} has no config.json")
        self.batch_size = required_batch_size(settings)
        self.model_name = model_dir.name  # names the model in progress lines
        self.tokenizer = MarianTokenizer.from_pretrained(str(model_dir))
        self.target_token = target_language_token(
            model_dir, self.tokenizer.supported_language_codes, settings.target_token
        )
        positions = MarianConfig.from_pretrained(str(model_dir)).max_position_embeddings
        # The target-language token, where there is one, takes a position of every segment.
        self.limit = min(self.tokenizer.model_max_length, positions) - 1 - bool(self.target_token)
        self.settings = settings
        self.engine = _engine(model_dir, converted, self.tokenizer, settings, dev, self.limit, threads)
        self.cache = TranslationCache(cache_path, model_key(model_dir, settings, self.engine.description))
        self.counts = {
            "segments_requested": 0,
            "segments_from_cache": 0,
            "segments_translated": 0,
            "tokens_generated": 0,
        }

    def _segments(self, text: str) -> list[str]:
        """Sentences, further cut at word boundaries when one alone exceeds the model limit."""
        out = []
        for sentence in _SENTENCE_END.split(text.strip()):
            if len(self.tokenizer(sentence)["input_ids"]) <= self.limit:
                out.append(sentence)
                continue
            piece: list[str] = []
            for word in sentence.split():
                if piece and len(self.tokenizer(" ".join(piece + [word]))["input_ids"]) > self.limit:
                    out.append(" ".join(piece))
                    piece = [word]
                else:
                    piece.append(word)
            if piece:
                out.append(" ".join(piece))
        return [s for s in out if s]

    def __call__(self, texts: Sequence[str]) -> list[str]:
        distinct = [t for t in set(texts) if t.strip()]
        segmented = {t: self._segments(t) for t in progress(distinct, desc="splitting into segments", unit="text")}
        unique = sorted({s for segs in segmented.values() for s in segs}, key=len)
        done = self.cache.get_many(unique)
        todo = [s for s in unique if s not in done]
        self.counts["segments_requested"] += len(unique)
        self.counts["segments_from_cache"] += len(unique) - len(todo)
        self.counts["segments_translated"] += len(todo)
        step = self.batch_size * self.engine.batches_per_call
        with progress(total=len(todo), desc=f"translating with {self.model_name}", unit="segment") as bar:
            for b in range(0, len(todo), step):
                chunk = todo[b : b + step]  # length-sorted: little padding per batch
                inputs = [f"{self.target_token} {s}" for s in chunk] if self.target_token else chunk
                translated = dict(zip(chunk, self.engine(inputs)))
                self.cache.put_many(translated)
                done.update(translated)
                bar.update(len(chunk))
        self.counts["tokens_generated"] = self.engine.tokens_generated
        return [" ".join(done[s] for s in segmented[t]) if t.strip() else "" for t in texts]

    def describe(self) -> dict[str, Any]:
        return {**self.engine.description, **({"target_token": self.target_token} if self.target_token else {})}


def target_language_token(model_dir: Path, codes: Sequence[str], configured: str | None) -> str | None:
    """The sentence-initial token that picks the output language of a multi-target OPUS-MT
    model (``>>ara<<`` for opus-mt-en-ar, whose vocabulary has several Arabic varieties).
    Without it such a model picks a language by itself; a single-target model has none."""
    if configured:
        if configured not in codes:
            raise InputError(
                f"translator {model_dir}: target_token {configured!r} is not one of its language "
                f"tokens ({', '.join(codes[:20]) or 'none: a single-target model'})"
            )
        return configured
    if len(codes) > 1:
        raise InputError(
            f"translator {model_dir} translates into several languages ({', '.join(codes[:20])}): "
            f"set its target_token in models.translators (the model card names the right one)"
        )
    return codes[0] if codes else None


def _converted_vocabulary(converted: Path) -> set[str]:
    """The target-side tokens of a converted model (shared or target vocabulary file)."""
    for name in ("shared_vocabulary", "target_vocabulary"):
        if (converted / f"{name}.json").is_file():
            return set(json.loads((converted / f"{name}.json").read_text(encoding="utf-8")))
        if (converted / f"{name}.txt").is_file():
            return set((converted / f"{name}.txt").read_text(encoding="utf-8").splitlines())
    raise InputError(f"{converted} has no target vocabulary file")


def convert_to_ctranslate2(model_dir: Path, output: Path) -> None:
    """Convert a MarianMT directory to a CTranslate2 model, float32 weights (the precision is
    chosen when the model is loaded), with a record of the weights it was converted from."""
    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    if not (model_dir / "config.json").is_file():
        raise InputError(f"translator directory {model_dir} has no config.json")
    with atomic_path(output) as tmp:
        TransformersConverter(str(model_dir)).convert(str(tmp), force=True)
        record = {
            "source": str(model_dir),
            "source_digest": weights_digest(model_dir),
            "ctranslate2": ctranslate2.__version__,
            "transformers": version("transformers"),
        }
        (tmp / CONVERSION_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    LOG.info("converted %s -> %s (CTranslate2 %s)", model_dir, output, ctranslate2.__version__)


def main(argv: list[str] | None = None) -> None:
    setup_logging()
    ap = argparse.ArgumentParser(description="Convert a MarianMT model for the CTranslate2 backend.")
    sub = ap.add_subparsers(dest="command", required=True)
    convert = sub.add_parser("convert", help="MarianMT directory -> CTranslate2 model directory")
    convert.add_argument("--model", required=True, type=Path)
    convert.add_argument("--output", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        convert_to_ctranslate2(args.model, args.output)
    except InputError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
