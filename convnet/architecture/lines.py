"""Layer lines (``CONVOLUTIONAL LAYER 6 1 1 1 1 1 1``) read without the control parser.

A saved model keeps its architecture as layer lines, and :meth:`Architecture.from_lines` reads
them back (``LayerSpec.from_line``); this module reads them with the layer kinds' own keywords
and ranges, so the architecture needs nothing from the control language (which sits above it).
Its messages are the control parser's for the same lines (tests/test_architecture.py compares
the two).
"""

import re

from ..errors import MAX_DIGITS, ConvnetError, shown
from .kinds import KINDS

# Longest keyword first, as the control parser matches them.
_BY_LENGTH = sorted(KINDS, key=lambda kind: -len(kind.keyword.split()))


def usage(kind):
    """The layer line's form, e.g. ``LOCAL LAYER Slices hwV hwH padV padH strideV strideH``."""
    return " ".join([kind.keyword] + [name for name, _, _ in kind.arg_names])


def _whole_number(kind, name, limits, text, err):
    if not re.fullmatch(r"[+-]?\d+", text):
        raise err(f"{kind.keyword}: {name} must be a whole number, not '{shown(text)}'")
    if len(text) > MAX_DIGITS:
        raise err(f"{kind.keyword}: {name} has {len(text)} digits; at most {MAX_DIGITS} are read")
    value = int(text)
    minimum, maximum = limits
    if minimum is not None and value < minimum:
        raise err(f"{kind.keyword}: {name} must be at least {minimum}, not {shown(text)}")
    if maximum is not None and value > maximum:
        raise err(f"{kind.keyword}: {name} must be at most {maximum}, not {shown(text)}")
    return value


def layer_words(text, file=None, line=None):
    """One layer line -> (its kind, the numbers after the keyword), range-checked as numbers;
    ConvnetError, at ``file``/``line``, for anything else (``LayerSpec.from_line`` makes the
    spec)."""
    def err(message):
        return ConvnetError(message, file, line)

    words = text.split()
    upper = [word.upper() for word in words]
    for kind in _BY_LENGTH:
        keyword = kind.keyword.split()
        if upper[:len(keyword)] != keyword:
            continue
        given, expected = words[len(keyword):], kind.arg_names
        if len(given) != len(expected):
            got = "nothing" if not given else f"{len(given)}"
            plural = "s" if len(expected) != 1 else ""
            raise err(f"{kind.keyword} takes {len(expected)} argument{plural}, got {got} "
                      f"(usage: {usage(kind)})")
        numbers = [_whole_number(kind, name, (minimum, maximum), word, err)
                   for (name, minimum, maximum), word in zip(expected, given)]
        return kind, numbers
    raise err(f"not a layer line: '{text.strip()}'")
