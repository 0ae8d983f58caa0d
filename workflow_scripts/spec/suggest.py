"""'Did you mean ...?' for a name that is not among the known ones: a task, target, benchmark,
backbone family or method, config key or Hub id that is one typo away from a real one.

Every "unknown ..." error puts :func:`did_you_mean` right after the name it rejects, so a
misspelling names its fix, not just the list to search. Standard library only: the
Snakefile imports the config checks that use it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's own default: 'xnil' -> 'xnli' (0.75) and 'hellaswg' -> 'hellaswag' (0.94)
# match, while two-letter codes one letter apart ('ge', 'de': 0.5) do not, where any of a
# dozen codes would be an equally good guess.
CUTOFF = 0.6
MAX_MATCHES = 3


def close_matches(name: object, known: Iterable[object]) -> list[str]:
    """The known names closest to ``name`` (at most MAX_MATCHES, closest first), compared
    without case: 'XNLI' is close to 'xnli'."""
    choices: dict[str, str] = {}
    for item in known:
        choices.setdefault(str(item).lower(), str(item))
    matches = difflib.get_close_matches(str(name).lower(), list(choices), n=MAX_MATCHES, cutoff=CUTOFF)
    return [choices[m] for m in matches if choices[m] != str(name)]


def did_you_mean(name: object, known: Iterable[object]) -> str:
    """`` (did you mean 'xnli'?)`` or `` (did you mean 'a' or 'b'?)`` to append to the name in
    an error message; empty when no known name is close."""
    matches = close_matches(name, known)
    return f" (did you mean {' or '.join(map(repr, matches))}?)" if matches else ""
