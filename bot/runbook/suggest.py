"""Did-you-mean: the runbook's own word closest to a mistyped one (subcommands, flags, decisions).

People type at 3 a.m.; ``diagnoes``, ``aprove``, ``--reasn`` and ``retry-restore`` deserve the word
they meant, not a page of help. Distance is the optimal string alignment distance (Levenshtein plus
the swap of two neighbours, so ``diagnoes`` is one edit from ``diagnose``); ``-`` and ``_`` count as
the same letter, so ``retry-restore`` is ``retry_restore``.
"""

from __future__ import annotations

from collections.abc import Iterable

LONGEST = 64


def distance(a: str, b: str) -> int:
    """Edits (insert, delete, substitute, swap two neighbours) turning ``a`` into ``b``."""
    a, b = _fold(a), _fold(b)
    if a == b:
        return 0
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[len(b)]


def _fold(word: str) -> str:
    return word.lower().replace("-", "_")


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The one choice near enough to ``word`` to be what was meant (None when none is, or two tie)."""
    choices = list(choices)
    near = _scored(word, choices)
    if not near:
        if len(word) > LONGEST:
            return None
        prefixed = [c for c in choices if len(word) >= 3 and _fold(c).startswith(_fold(word))]
        return prefixed[0] if len(prefixed) == 1 else None
    if len(near) > 1 and near[1][0] == near[0][0]:
        return None
    return near[0][1]


def nearest(word: str, choices: Iterable[str], most: int = 3) -> list[str]:
    """The choices near enough to ``word`` to be what was meant, nearest first, at most ``most``: for
    an id, where two known ones may be equally near (``ses_a1`` and ``ses_a2`` for ``ses_a3``)."""
    return [c for _, c in _scored(word, dict.fromkeys(c for c in choices if c != word))][:most]


def _scored(word: str, choices: Iterable[str]) -> list[tuple[int, str]]:
    if len(word) > LONGEST:  # no runbook word is this long; and a distance costs len(word) × len(choice)
        return []
    limit = max(1, min(3, len(word) // 3))
    return [(d, c) for d, c in sorted((distance(word, c), c) for c in choices) if d <= limit]


def did_you_mean(*lines: str) -> list[str]:
    """The lines to copy for what was probably meant, as every did-you-mean says them."""
    return ["Did you mean:", *(f"  {line}" for line in lines)] if lines else []
