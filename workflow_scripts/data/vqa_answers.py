"""VQA v2's answers (Goyal et al. 2017): how an answer is normalised, the answer vocabulary a
classifier predicts over, the soft training targets, and the official accuracy.

- Normalisation follows the rules of the official evaluation (GT-Vision-Lab/VQA, vqaEval.py):
  lower case; punctuation removed, or replaced by a space between words, except a full stop
  inside a number; number words to digits; articles dropped; common contractions spelt
  with their apostrophe.
- Vocabulary: the answers given by the annotators at least ``min_count`` times in the
  training split (9 gives the usual ~3,000-answer vocabulary on VQA v2's train set).
- Training target of an answer: min(1, n / 3), n the annotators (of 10) who gave it.
- Accuracy of a predicted answer: over the 10 leave-one-out subsets of 9 annotators, the
  mean of min(1, matches / 3), as the official evaluation computes it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

_NUMBERS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
_ARTICLES = {"a", "an", "the"}
_CONTRACTIONS = {
    "arent": "aren't",
    "cant": "can't",
    "couldnt": "couldn't",
    "didnt": "didn't",
    "doesnt": "doesn't",
    "dont": "don't",
    "hasnt": "hasn't",
    "havent": "haven't",
    "isnt": "isn't",
    "its": "it's",
    "shouldnt": "shouldn't",
    "thats": "that's",
    "theres": "there's",
    "theyre": "they're",
    "wasnt": "wasn't",
    "werent": "weren't",
    "whats": "what's",
    "wont": "won't",
    "wouldnt": "wouldn't",
    "youre": "you're",
    "im": "i'm",
    "ive": "i've",
    "lets": "let's",
}
_PUNCTUATION = ";/[]\"{}()=+\\_-><@`,?!*#%^&$~|:'"
_PERIOD_OUTSIDE_NUMBER = re.compile(r"(?!<=\d)(\.)(?!\d)")
_COMMA_IN_NUMBER = re.compile(r"(\d)(,)(\d)")


def normalize_answer(answer: str) -> str:
    original = answer.replace("\n", " ").replace("\t", " ").strip().lower()
    text = original
    number_with_comma = _COMMA_IN_NUMBER.search(original) is not None
    for p in _PUNCTUATION:
        # A mark next to a space, or any mark in a text with a number like "1,000", is
        # dropped; otherwise it separates words ("black/white" -> "black white").
        if p + " " in original or " " + p in original or number_with_comma:
            text = text.replace(p, "")
        else:
            text = text.replace(p, " ")
    text = _PERIOD_OUTSIDE_NUMBER.sub("", text)
    words = []
    for word in text.split():
        word = _NUMBERS.get(word, word)
        if word in _ARTICLES:
            continue
        words.append(_CONTRACTIONS.get(word, word))
    return " ".join(words)


def answer_vocabulary(answer_lists: Iterable[Sequence[str]], min_count: int) -> tuple[str, ...]:
    """The answers given at least ``min_count`` times, most frequent first (ties by text)."""
    counts = Counter(a for answers in answer_lists for a in answers)
    kept = [a for a, n in counts.items() if n >= min_count and a]
    return tuple(sorted(kept, key=lambda a: (-counts[a], a)))


def soft_targets(answers: Sequence[str], index: dict[str, int]) -> tuple[list[int], list[float]]:
    """(vocabulary ids, targets min(1, n / 3)) of the answers of one question in the vocabulary."""
    counts = Counter(answers)
    ids = sorted((index[a], a) for a in counts if a in index)
    return [i for i, _ in ids], [min(1.0, counts[a] / 3) for _, a in ids]


def vqa_accuracy(predicted: str, answers: Sequence[str]) -> float:
    """The official per-question accuracy of ``predicted`` against the annotators' answers."""
    if not answers:
        return 0.0
    scores = []
    for left_out in range(len(answers)):
        others = answers[:left_out] + answers[left_out + 1 :]
        scores.append(min(1.0, sum(a == predicted for a in others) / 3))
    return sum(scores) / len(scores)
