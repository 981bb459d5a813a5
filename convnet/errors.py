"""User-facing errors: one line, naming the file and line where there is one."""

import re

# A run of this many characters without a blank (a file name, a number, a word written by a user)
# is shown cut to its first LONG_RUN_SHOWN characters, so a message stays one readable line.
LONG_RUN = 160
LONG_RUN_SHOWN = 100
LONG_BLANKS = 20          # a run of blanks this long is shown as its count
LONGEST = 600             # a longer message keeps its beginning and its end
# Messages quote at most this many characters of what was written.
SHOWN_CHARS = 60
# Longest whole number read (far beyond any size that fits; Python refuses much longer ones).
MAX_DIGITS = 100


def shown(text, limit=SHOWN_CHARS):
    """``text`` as a message quotes it: control characters escaped, cut to ``limit`` characters."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit + 1])
    if len(out) > limit:
        out = out[:limit] + f"... ({len(text)} characters)"
    return out


def _readable(text):
    """Control characters escaped, very long runs cut."""
    text = re.sub(r"\s{%d,}" % LONG_BLANKS, lambda m: f" ({len(m.group())} blanks) ", text)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    text = re.sub(r"\S{%d,}" % LONG_RUN,
                  lambda m: f"{m.group()[:LONG_RUN_SHOWN]}... ({len(m.group())} characters)", text)
    if len(text) > LONGEST:
        text = f"{text[:LONGEST // 2]} ... {text[-LONGEST // 3:]}"
    return text


class ConvnetError(Exception):
    """A user error (bad control line, bad data file, impossible architecture).

    The command line prints ``convnet: error: FILE:LINE: message`` and exits with status 2.
    """

    def __init__(self, message, file=None, line=None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def located(self, file=None, line=None):
        """Return this error with a file / line filled in where it had none."""
        if self.file is None and file is not None:
            self.file = file
        if self.line is None and line is not None:
            self.line = line
        return self

    def __str__(self):
        where = ""
        if self.file is not None:
            where = f"{self.file}:"
            if self.line is not None:
                where += f"{self.line}:"
            where += " "
        return _readable(f"{where}{self.message}")


class Interrupted(Exception):
    """Raised when the run must end at once: a second Ctrl-C (SIGINT) or a SIGTERM.

    ``signum`` is the signal; a command line ends with status 128 + signum (130, 143).
    """

    def __init__(self, message, signum=2):
        super().__init__(message)
        self.signum = int(signum)

    @property
    def exit_status(self):
        return 128 + self.signum
