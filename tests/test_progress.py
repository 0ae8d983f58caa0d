"""Progress bars (workflow_scripts/progress.py): plain, rate-limited lines in a job's log
file, in-place redraws on a terminal; and the steps that report through them."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios

import numpy as np
import pytest

from workflow_scripts import progress as progress_module
from workflow_scripts.progress import INTERVAL_VARIABLE, progress
from workflow_scripts.spec.basics import InputError
from workflow_scripts.spec.task_options import FormatOptions

pytestmark = pytest.mark.unit


@pytest.fixture
def log_file(tmp_path, monkeypatch):
    """A function that redirects stderr to a file, as a job's ``> log 2>&1`` does, and returns
    a reader of the file. Called in the test itself: pytest resets stderr between a fixture's
    setup and the test."""
    path = tmp_path / "job.log"
    stream = path.open("w")

    def redirect():
        monkeypatch.setattr(sys, "stderr", stream)
        return lambda: (stream.flush(), path.read_text())[1]

    yield redirect
    stream.close()


def test_a_log_file_gets_few_plain_lines_and_a_final_one_with_the_total(log_file, monkeypatch):
    read_log = log_file()
    monkeypatch.delenv(INTERVAL_VARIABLE, raising=False)
    for _ in progress(range(200_000), desc="tokenising xnli", unit="example"):
        pass
    text = read_log()
    lines = text.splitlines()
    assert "\r" not in text
    assert 1 <= len(lines) <= 3, lines  # the first line, maybe one more, the final one
    assert all(line.startswith("tokenising xnli:") for line in lines)
    assert "200000/200000" in lines[-1] and "100%" in lines[-1]


def test_a_bar_updated_by_hand_ends_with_its_total(log_file, monkeypatch):
    read_log = log_file()
    monkeypatch.delenv(INTERVAL_VARIABLE, raising=False)
    with progress(total=1000, desc="embedding images", unit="image") as bar:
        for _ in range(100):
            bar.update(10)
    lines = read_log().splitlines()
    assert len(lines) <= 3 and "1000/1000" in lines[-1]


def test_the_environment_sets_the_interval_between_lines(log_file, monkeypatch):
    read_log = log_file()
    monkeypatch.setenv(INTERVAL_VARIABLE, "0")
    for _ in progress(range(50), desc="predicting xnli", unit="feature"):
        pass
    lines = read_log().splitlines()
    assert len(lines) >= 50
    assert lines[-1].startswith("predicting xnli: 100%") and "50/50" in lines[-1]


def test_a_step_that_slows_down_still_reports_every_interval(log_file, monkeypatch):
    import time

    read_log = log_file()
    monkeypatch.setenv(INTERVAL_VARIABLE, "0.05")
    with progress(total=10_005, desc="embedding candidate pool", unit="row") as bar:
        for _ in range(10_000):  # a fast start
            bar.update(1)
        for _ in range(5):  # then slow items, one per interval
            time.sleep(0.06)
            bar.update(1)
    lines = read_log().splitlines()
    assert sum(f"{n}/10005" in line for line in lines for n in range(10_001, 10_006)) >= 4


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_interval_names_the_variable(monkeypatch, value):
    monkeypatch.setenv(INTERVAL_VARIABLE, value)
    with pytest.raises(InputError, match=f"{INTERVAL_VARIABLE}='{value}'"):
        progress_module.log_interval()


def test_a_terminal_gets_a_bar_redrawn_in_place(monkeypatch):
    monkeypatch.setenv(INTERVAL_VARIABLE, "30")  # a terminal ignores it
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    terminal = os.fdopen(slave, "w")
    monkeypatch.setattr(sys, "stderr", terminal)
    try:
        bar = progress(total=20, desc="translating", unit="segment")
        for _ in range(20):
            bar.update(1)
            bar.refresh()
        bar.close()
        terminal.flush()
        shown = b""
        while select.select([master], [], [], 0.2)[0]:
            shown += os.read(master, 65536)
    finally:
        terminal.close()
        os.close(master)
    text = shown.decode()
    assert text.count("\rtranslating:") >= 20  # every redraw returns to the start of the line
    assert text.count("\n") == 1  # one line break, when the bar is done
    assert "20/20" in text


def test_encode_reports_tokenising_the_task_in_chunks(log_file, monkeypatch):
    read_log = log_file()
    import pyarrow as pa
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from workflow_scripts.data import features
    from workflow_scripts.spec.tasks import get_task

    words = ["a", "cat", "sat", "on", "the", "mat", "dog", "ran"]
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]")
    rng = np.random.default_rng(0)
    rows = [
        {
            "id": f"x-{i}",
            "text_a": " ".join(rng.choice(words, 6)),
            "text_b": " ".join(rng.choice(words, 4)),
            "label": int(i % 3),
            "lang": "en",
        }
        for i in range(300)
    ]
    monkeypatch.setenv(INTERVAL_VARIABLE, "0")
    monkeypatch.setattr(features, "ENCODE_CHUNK", 64)  # the Arrow table is read in 5 chunks
    task = get_task("xnli")
    from_table = features.encode(task, tokenizer, pa.Table.from_pylist(rows), FormatOptions(max_length=16), train=False)
    from_list = features.encode(task, tokenizer, rows, FormatOptions(max_length=16), train=False)
    assert from_table.features.table.equals(from_list.features.table)  # the bar only observes
    lines = [line for line in read_log().splitlines() if line.startswith("tokenising xnli:")]
    assert "\r" not in "".join(lines)
    assert any("128/300" in line for line in lines)  # a line per chunk at interval 0
    assert sum("300/300" in line for line in lines) == 2  # each call's final line


def test_chunked_faiss_search_finds_exactly_what_one_search_finds(log_file, monkeypatch):
    read_log = log_file()
    import faiss

    from workflow_scripts.evaluation import neighbours

    rng = np.random.default_rng(7)
    dim = 32
    block = faiss.cvar.distance_compute_blas_query_bs
    queries = rng.standard_normal((2 * block + 50, dim)).astype(np.float32)
    keys = rng.standard_normal((1500, dim)).astype(np.float32)
    keys[1000:1100] = keys[:100]  # bit-identical keys: ties must come out in faiss's order
    queries = neighbours.l2_normalize(queries)
    keys = neighbours.l2_normalize(keys)
    chunks = neighbours.query_chunks(len(queries), dim)
    assert len(chunks) == 2 and chunks[0] == (0, block) and chunks[-1][1] == len(queries)
    monkeypatch.setenv(INTERVAL_VARIABLE, "0")
    for k in (1, 5, 120):  # faiss's three searches: top-1 scan, heaps, reservoirs
        scores, found = neighbours.flat_knn(queries, keys, k)
        one_scores, one_found = faiss.knn(queries, keys, k, faiss.METRIC_INNER_PRODUCT)
        assert np.array_equal(found, one_found) and np.array_equal(scores, one_scores)
    approximate = neighbours.knn(queries, keys, 5, index="Flat")
    index = faiss.IndexFlatIP(dim)
    index.add(keys)
    assert all(np.array_equal(a, b) for a, b in zip(approximate, index.search(queries, 5)))
    lines = read_log().splitlines()
    assert any(line.startswith("searching 1500 keys:") and f"{block}/{len(queries)}" in line for line in lines)


@pytest.mark.parametrize("n_queries", [0, 1, 19, 4095, 4096, 4097, 9000, 50_000])
@pytest.mark.parametrize("dim", [8, 32, 1024])
def test_query_chunks_are_whole_blocks_searched_as_one_search_would(n_queries, dim):
    import faiss

    block = faiss.cvar.distance_compute_blas_query_bs
    threshold = faiss.cvar.distance_compute_blas_threshold
    from workflow_scripts.evaluation.neighbours import query_chunks

    chunks = query_chunks(n_queries, dim)
    ends = [0, *(end for _, end in chunks)]
    assert [start for start, _ in chunks] == ends[:-1] and ends[-1] == n_queries  # contiguous, all queries
    for start, end in chunks:
        assert start % block == 0
        if n_queries * dim >= threshold:  # faiss's BLAS search for all: for every chunk too
            assert (end - start) * dim >= threshold


def test_a_long_description_keeps_the_counts_in_the_line(log_file, monkeypatch):
    read_log = log_file()
    monkeypatch.delenv(INTERVAL_VARIABLE, raising=False)
    desc = "reading images of " + "/very/long/image/directory" * 4
    with progress(total=12345, desc=desc, unit="image") as bar:
        bar.update(12345)
    last = read_log().splitlines()[-1]
    assert last.startswith(desc) and "12345/12345" in last and last.endswith("image/s]")


def test_library_bars_stay_out_of_a_log_file_but_not_off_a_terminal(tmp_path, monkeypatch):
    from workflow_scripts.progress import LIBRARY_BARS_VARIABLE, quiet_library_bars

    monkeypatch.setenv(LIBRARY_BARS_VARIABLE, "0")  # restored after the test
    monkeypatch.delenv(LIBRARY_BARS_VARIABLE)
    with (tmp_path / "job.log").open("w") as log:
        monkeypatch.setattr(sys, "stderr", log)
        quiet_library_bars()
    assert os.environ[LIBRARY_BARS_VARIABLE] == "1"
    monkeypatch.setenv(LIBRARY_BARS_VARIABLE, "0")  # an explicit choice is kept
    quiet_library_bars()
    assert os.environ[LIBRARY_BARS_VARIABLE] == "0"
    monkeypatch.delenv(LIBRARY_BARS_VARIABLE)
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as terminal:
        monkeypatch.setattr(sys, "stderr", terminal)
        quiet_library_bars()
    os.close(master)
    assert LIBRARY_BARS_VARIABLE not in os.environ
