"""Small helpers that put counts and lists into the words of messages and reports."""

from __future__ import annotations


def plural(n, word, words=None):
    """``'1 draw'``, ``'3 draws'`` (``words`` for an irregular plural)."""
    n = int(n)
    return f"{n} {word}" if n == 1 else f"{n} {words or word + 's'}"


def ordinal(n):
    """``'1st'``, ``'2nd'``, ``'12th'``, ``'23rd'``."""
    n = int(n)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def listing(items):
    """``'a'``, ``'a and b'``, ``'a, b and c'``."""
    items = [str(item) for item in items]
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def chains(labels):
    """``'chain 2'``, ``'chains 0 and 3'``: chain labels as a subject."""
    labels = list(labels)
    return f"{'chain' if len(labels) == 1 else 'chains'} {listing(labels)}"
