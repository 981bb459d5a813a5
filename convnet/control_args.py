"""The words of a control line and the typed values of a command's arguments.

``tokenize`` splits a line into words, ``=`` and quoted names; an ``Arg`` is one argument of a
command or parameter (its name, type and range), converts a word to its value and says in words
what it accepts. The registry of commands and parameters (``control.py``) is made of them.
"""

import re
from dataclasses import dataclass

from .errors import MAX_DIGITS, shown
from .params import parse_devices


# ---------------------------------------------------------------------------------- the lexer
@dataclass
class Token:
    text: str
    quoted: bool = False


_TOKEN = re.compile(r'\s*(?:"([^"]*)"|(=)|([^\s="]+)|("))')


def tokenize(text):
    """Split a line into words, '=' and quoted names. Raises ValueError on an unclosed quote."""
    tokens = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            break
        quoted, equals, word, stray = match.groups()
        if stray is not None:
            raise ValueError("a quoted file name is missing its closing double quote")
        if quoted is not None:
            tokens.append(Token(quoted, True))
        elif equals is not None:
            tokens.append(Token("="))
        else:
            tokens.append(Token(word))
        pos = match.end()
    return tokens


# ---------------------------------------------------------------------------------- argument types
class Arg:
    """One argument of a command: a name, a type and a range check."""

    def __init__(self, name, value_type, minimum=None, maximum=None, choices=None, optional=False,
                 exclusive_min=False, joined=False, exclusive_max=False):
        self.name, self.value_type = name, value_type
        self.joined = joined            # the words after '=' are one value ("0, 1")
        self.minimum, self.maximum, self.exclusive_min = minimum, maximum, exclusive_min
        self.exclusive_max = exclusive_max
        self.choices, self.optional = choices, optional

    def describe(self):
        if self.value_type == "file":
            return f'"{self.name}"'
        if self.value_type == "choice":
            return " | ".join(self.choices)
        if self.value_type == "devices":
            return "0,1,... | ALL"
        return self.name        # also a sweep's "NAME = value, value, ..."

    def placeholder(self):
        """What stands for the value in the docs: ``n`` (whole number), ``x`` (number) or the choices."""
        return {"int": "n", "float": "x"}.get(self.value_type) or self.describe()

    def value_words(self):
        """The type of value and its range, in words: ``whole number, at least 1``."""
        if self.value_type == "choice":
            return ", ".join(self.choices[:-1]) + " or " + self.choices[-1]
        if self.value_type == "file":
            return "file name in double quotes"
        if self.value_type == "devices":
            return "CUDA device numbers separated by commas, or ALL"
        words = {"int": "whole number", "float": "number"}[self.value_type]
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None and (self.exclusive_min or self.exclusive_max):
            return (f"{words}, {'greater than' if self.exclusive_min else 'at least'} {lo} and "
                    f"{'less than' if self.exclusive_max else 'at most'} {hi}")
        if lo is not None and hi is not None:
            return f"{words}, {lo} to {hi}"
        if lo is not None:
            return f"{words}, {'greater than' if self.exclusive_min else 'at least'} {lo}"
        if hi is not None:  # pragma: no cover - no such parameter today
            return f"{words}, at most {hi}"
        return words

    def convert(self, token, what):
        """Convert one token; raise a message string (no location) when it does not fit."""
        try:
            return self._convert(token, what)
        except ValueError as e:
            message = str(e)
            if what == self.name:                  # "WPEN: WPEN must be ..." says it twice
                message = message[len(what) + 2:]
            raise ValueError(message) from None

    def _convert(self, token, what):
        if self.value_type == "file":
            if not token.quoted:
                raise ValueError(f"{what}: the file name must be in double quotes, e.g. \"{shown(token.text)}\"")
            if not token.text:
                raise ValueError(f"{what}: the file name is empty")
            if "\0" in token.text:
                raise ValueError(f"{what}: the file name \"{shown(token.text)}\" contains a NUL byte")
            return token.text
        if token.quoted:
            raise ValueError(f"{what}: {self.name} must be a {self._type_word()}, not a quoted name")
        text = token.text
        if self.value_type == "int":
            if not re.fullmatch(r"[+-]?\d+", text):
                raise ValueError(f"{what}: {self.name} must be a whole number, not '{shown(text)}'")
            if len(text) > MAX_DIGITS:
                raise ValueError(f"{what}: {self.name} has {len(text)} digits; at most {MAX_DIGITS} "
                                 "are read")
            value = int(text)
        elif self.value_type == "float":
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"{what}: {self.name} must be a number, not '{shown(text)}'") from None
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"{what}: {self.name} must be a finite number, not '{shown(text)}'")
        elif self.value_type == "devices":
            try:
                return parse_devices(text)
            except ValueError as e:
                raise ValueError(f"{what}: {self.name}: {e}") from None
        elif self.value_type == "choice":
            value = text.upper()
            if value not in self.choices:
                raise ValueError(f"{what}: {self.name} must be {' or '.join(self.choices)}, not '{shown(text)}'")
            return value
        else:  # pragma: no cover - registry error
            raise AssertionError(self.value_type)
        if self.minimum is not None:
            if self.exclusive_min and value <= self.minimum:
                raise ValueError(f"{what}: {self.name} must be greater than {self.minimum}, not {shown(text)}")
            if not self.exclusive_min and value < self.minimum:
                raise ValueError(f"{what}: {self.name} must be at least {self.minimum}, not {shown(text)}")
        if self.maximum is not None and self.exclusive_max and value >= self.maximum:
            raise ValueError(f"{what}: {self.name} must be less than {self.maximum}, not {shown(text)}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"{what}: {self.name} must be at most {self.maximum}, not {shown(text)}")
        return value

    def _type_word(self):
        return {"int": "whole number", "float": "number", "choice": "keyword"}.get(self.value_type, "value")


def int_arg(name, minimum=None, maximum=None, optional=False):
    """A whole-number argument in minimum..maximum."""
    return Arg(name, "int", minimum, maximum, optional=optional)


def file_arg(name="FileName"):
    """A file name in double quotes."""
    return Arg(name, "file")
