"""CONVNET.LOG: every control line echoed, the architecture report, training results and errors.

Lines are flushed as they are written, so the log is complete up to any interruption.
"""

import datetime
import os

from .._version import __version__
from ..errors import ConvnetError

# The first line of every CONVNET.LOG; the log reader refuses a format version it does not know.
LOG_FORMAT_VERSION = 1
VERSION_LINE_PREFIX = "CONVNET.LOG format"


class LogWriter:
    """Writes CONVNET.LOG (or nothing, when path is None: used by `convnet check`)."""

    def __init__(self, path=None):
        self.path = path
        self._file = None
        if path is not None:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                self._file = open(path, "w", encoding="utf-8")
            except OSError as e:
                raise self._error(e) from None
            stamp = datetime.datetime.now().isoformat(timespec="seconds")
            self.write(f"{VERSION_LINE_PREFIX} {LOG_FORMAT_VERSION}, convnet {__version__}, {stamp}")

    def write(self, text=""):
        """Write one or more lines (a string with newlines, or a list of strings)."""
        if self._file is None:
            return
        if isinstance(text, (list, tuple)):
            text = "\n".join(text)
        try:
            self._file.write(text + "\n")
            self._file.flush()
        except OSError as e:
            # a full disk or a vanished folder: stop writing (the closing lines cannot be written
            # either) and say so once, as a user error
            self._abandon()
            raise self._error(e) from None

    def _error(self, e):
        return ConvnetError(f"cannot write {self.path}: {e.strerror or e}")

    def _abandon(self):
        f, self._file = self._file, None
        try:
            f.close()
        except OSError:
            pass

    def blank(self):
        self.write("")

    def close(self):
        if self._file is not None:
            try:
                self._file.close()
            except OSError:        # what could not be flushed was reported by write()
                pass
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
