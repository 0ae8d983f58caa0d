"""BUCC 2018 bitext mining data, read from the original archives."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from workflow_scripts.data.loaders.registry import Report, Row, converter
from workflow_scripts.data.loaders.source import Source, fetch_archive, is_url
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.data_settings import DataOptions


@converter("bucc")
def _bucc(src: Source, split: str, langs: list[str], opts: DataOptions, report: Report) -> Iterable[Row]:
    """BUCC 2018 from the original archives (the Hub copies hold only the gold pairs, not the
    corpora mining needs). As in XTREME, the "sample" set is dev and the "training" set, whose
    gold is public, is test. Files: ``{lang}-en.{set}.{lang|en}`` (``id<TAB>sentence``) and
    ``{lang}-en.{set}.gold`` (``source id<TAB>English id``)."""
    bucc_set = {"dev": "sample", "test": "training"}[split]
    report["release"] = {
        "name": "BUCC 2018",
        "location": opts.archives if src.kind == "hub" else str(src.local_root / src.path),
    }
    for lang in langs:
        files = _bucc_files(src, opts, lang, bucc_set)
        sentences = {side: _bucc_sentences(text, name) for side, (name, text) in files.items() if side != "gold"}
        gold: dict[str, list[str]] = {}
        name, text = files["gold"]
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                parts = line.split("\t")
                if len(parts) != 2:
                    raise InputError(f"{name}, line {lineno}: expected source id<TAB>English id")
                gold.setdefault(parts[0], []).append(parts[1])
        unknown = [sid for sid in gold if sid not in sentences["source"]]
        if unknown or not gold:
            raise InputError(f"{name}: {len(unknown)} gold ids not in the {lang} corpus, or no gold at all")
        for sid, text_ in sentences["source"].items():
            yield {"id": sid, "lang": lang, "side": "source", "text": text_, "gold": gold.get(sid, [])}
        for eid, text_ in sentences["en"].items():
            yield {"id": eid, "lang": lang, "side": "en", "text": text_, "gold": []}


def _bucc_sentences(text: str, name: str) -> dict[str, str]:
    out = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t", 1)
        if len(parts) != 2:
            raise InputError(f"{name}, line {lineno}: expected id<TAB>sentence")
        out[parts[0]] = parts[1].strip()
    return out


def _bucc_files(src: Source, opts: DataOptions, lang: str, bucc_set: str) -> dict[str, tuple[str, str]]:
    """{side: (file name, text)} for source, en and gold, from a local mirror or the archives."""
    stem = f"{lang}-en.{bucc_set}"
    if src.kind == "local":
        root = src.local_root / src.path
        out = {}
        for side, suffix in (("source", lang), ("en", "en"), ("gold", "gold")):
            file = root / f"{stem}.{suffix}"
            if not file.is_file():
                raise InputError(f"missing data file {file}")
            out[side] = (str(file), file.read_text(encoding="utf-8"))
        return out
    import tarfile

    base = opts.archives
    if not base:
        raise InputError("tasks.bucc.options.archives: the URL or directory of the BUCC 2018 archives")
    archive = f"bucc2018-{lang}-en.{bucc_set}-gold.tar.bz2"
    # Downloaded once into the cache (or read where it lies, for a local directory).
    local = fetch_archive(f"{base.rstrip('/')}/{archive}" if is_url(base) else str(Path(base) / archive))
    try:
        with tarfile.open(local, "r:bz2") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            out = {}
            for side, suffix in (("source", lang), ("en", "en"), ("gold", "gold")):
                name = f"{stem}.{suffix}"
                if name not in members:
                    raise InputError(f"{archive} has no {name}")
                out[side] = (f"{archive}:{name}", tar.extractfile(members[name]).read().decode("utf-8"))
    except tarfile.TarError as err:
        raise InputError(f"BUCC archive {local} is not a readable tar.bz2 archive: {err}") from err
    return out
