"""Translation throughput: CTranslate2 backend vs our transformers backend vs a naive loop.

One MarianMT model of OPUS-MT's shape (6 + 6 layers, 512 wide, 8 heads, 2048 feed-forward;
the vocabulary padded to OPUS-MT en-de's 58,101 entries), random-init and built locally since
the real OPUS-MT weights are not reachable here, converted once for CTranslate2. Same inputs
(the unique sentences of the demo SQuAD split) and decoding settings for every row. A
random-init model rarely emits </s>, so every hypothesis runs to --max-new-tokens: the rates
are for outputs of that length. Prints, from one run: the device, sentences/s and generated
tokens/s per engine, the ratio to our transformers backend, and the share of translations
identical to it (the two engines stop beam search differently: transformers, with
early_stopping=False, keeps extending beams while a longer hypothesis can still win;
CTranslate2 stops once beam_size hypotheses have ended); then the cache hit rate of a rerun.

    .venv/bin/python benchmarks/translation_throughput.py [--sentences 128] [--beams 1 4]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from workflow_scripts.data.prepare import prepare, read_table  # noqa: E402
from workflow_scripts.models.demo_models import build_demo_translator  # noqa: E402
from workflow_scripts.spec.data_settings import DataSettings  # noqa: E402
from workflow_scripts.spec.model_settings import DemoTranslator  # noqa: E402
from workflow_scripts.spec.translation_settings import TranslationSettings  # noqa: E402
from workflow_scripts.translation.translators import MarianTranslator, convert_to_ctranslate2  # noqa: E402

# OPUS-MT's shape (untrained: no corpus), the vocabulary grown to its size by pad_vocabulary
OPUS_MT = DemoTranslator.defaults().replace(
    vocab_size=2000, d_model=512, layers=6, heads=8, ffn_dim=2048, max_position_embeddings=512
)
OPUS_MT_VOCAB = 58101


def pad_vocabulary(model_dir: Path, size: int) -> None:
    """Grow the model's vocabulary to ``size`` with placeholder pieces (a larger output layer),
    keeping Marian's layout: <pad>, the decoder start token, stays the last entry."""
    from transformers import MarianMTModel

    vocab = json.loads((model_dir / "vocab.json").read_text())
    pieces = [p for p in sorted(vocab, key=vocab.get) if p != "<pad>"]
    pieces += [f"\u2581xstilts{k}" for k in range(size - 1 - len(pieces))] + ["<pad>"]
    (model_dir / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False))
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    added = tokenizer_config.get("added_tokens_decoder", {})
    tokenizer_config["added_tokens_decoder"] = {
        (str(size - 1) if entry["content"] == "<pad>" else key): entry for key, entry in added.items()
    }
    (model_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, ensure_ascii=False))
    model = MarianMTModel.from_pretrained(str(model_dir))
    import torch

    model.resize_token_embeddings(size, mean_resizing=False)
    with torch.no_grad():  # as in OPUS-MT, the decoder starts from <pad>'s zero embedding
        model.get_input_embeddings().weight[size - 1] = 0
    for cfg in (model.config, model.generation_config):
        cfg.pad_token_id = cfg.decoder_start_token_id = size - 1
    model.save_pretrained(str(model_dir))


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=128)
    ap.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(
        f"device: {dev.type} ({torch.cuda.get_device_name(0) if dev.type == 'cuda' else platform.machine()}), "
        f"{args.threads} threads; model: OPUS-MT shape, vocabulary {OPUS_MT_VOCAB}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        prepare(
            "squad",
            "train",
            DataSettings.parse(
                {"source": "local", "local_root": str(REPO / "demo/hub"), "hub": {"path": "rajpurkar/squad"}}
            ),
            tmp / "squad.parquet",
        )
        build_demo_translator(OPUS_MT, [str(tmp / "squad.parquet")], "de", tmp / "mt")
        pad_vocabulary(tmp / "mt", OPUS_MT_VOCAB)
        convert_to_ctranslate2(tmp / "mt", tmp / "ct2")
        rows = read_table(tmp / "squad.parquet").to_pylist()
        decoding = TranslationSettings.defaults().replace(backend="transformers")
        probe = MarianTranslator(tmp / "mt", decoding.replace(batch_size=1, num_beams=1, max_new_tokens=1), dev)
        sentences = sorted({s for r in rows for t in (r["question"], r["context"]) for s in probe._segments(t)})
        sentences = sentences[: args.sentences]

        for beams in args.beams:
            settings = decoding.replace(batch_size=args.batch_size, num_beams=beams, max_new_tokens=args.max_new_tokens)
            print(
                f"\n{len(sentences)} sentences, num_beams={beams}, batch {args.batch_size}, "
                f"max_new_tokens={args.max_new_tokens}"
            )
            print(f"{'engine':40s} {'sent/s':>8s} {'tok/s':>8s} {'vs ours-transformers':>21s} {'same output':>12s}")
            engines = [
                ("naive loop (generate, 1 sentence per call)", None, None),
                ("xstilts transformers backend", "transformers", None),
                ("xstilts ctranslate2 float32", "ctranslate2", "float32"),
                ("xstilts ctranslate2 int8 (auto on CPU)", "ctranslate2", "auto"),
            ]
            results = {}
            for name, backend, compute in engines:
                mt = MarianTranslator(
                    tmp / "mt",
                    settings.replace(backend=backend or "transformers", compute_type=compute or "auto"),
                    dev,
                    None,
                    tmp / "ct2",
                    args.threads,
                )
                start = time.perf_counter()
                if backend is None:  # every sentence its own batch, no sorting
                    out = [x for s in sentences for x in mt.engine([s])]
                else:
                    out = mt(sentences)
                seconds = time.perf_counter() - start
                tokens = mt.engine.tokens_generated
                results[name] = (out, seconds, tokens)
            ref_out, ref_s, _ = results["xstilts transformers backend"]
            for name, (out, seconds, tokens) in results.items():
                same = sum(a == b for a, b in zip(out, ref_out)) / len(out)
                print(
                    f"{name:40s} {len(out) / seconds:8.1f} {tokens / seconds:8.0f} {ref_s / seconds:20.2f}x "
                    f"{same:12.3f}"
                )

        cache = tmp / "cache.sqlite"
        settings = decoding.replace(
            batch_size=args.batch_size,
            num_beams=1,
            max_new_tokens=args.max_new_tokens,
            backend="ctranslate2",
            compute_type="auto",
        )
        MarianTranslator(tmp / "mt", settings, dev, cache, tmp / "ct2", args.threads)(sentences)
        rerun = MarianTranslator(tmp / "mt", settings, dev, cache, tmp / "ct2", args.threads)
        rerun(sentences)
        print(
            f"\ncache hit rate on a rerun: {rerun.counts['segments_from_cache'] / rerun.counts['segments_requested']:.3f}"
        )


if __name__ == "__main__":
    main()
