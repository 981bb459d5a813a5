"""Replacing a file at once: the data goes to a temporary file beside it, which is then renamed
over the path, so a reader sees the old file or the new one, never a part."""

import os
import tempfile

from .errors import ConvnetError


def replace_file(path, data, sync=False):
    """Write the bytes ``data`` to ``path`` atomically (``sync``: flushed to disk before the
    rename). OSError when it cannot be written; no temporary file is left behind."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp makes the file private (0600); the file gets the mode any new file gets
            os.fchmod(f.fileno(), 0o666 & ~current_umask())
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_atomically(path, data, what="file", sync=True):
    """replace_file (``sync``: flushed to disk first) with one ConvnetError naming the file
    (``what`` says what it is) when it cannot be written, or when ``path`` exists and is not a
    regular file."""
    path = os.fspath(path)
    if os.path.lexists(path) and not os.path.isfile(path):
        # renaming over it would replace a folder's entry such as a device (/dev/null) or a link
        raise ConvnetError(f"cannot write the {what}: it exists and is not a regular file",
                           file=path)
    try:
        replace_file(path, data, sync)
    except OSError as e:
        raise ConvnetError(f"cannot write the {what}: {e.strerror or e}", file=path) from None


def current_umask():
    """The process's umask (from /proc where it can be read, so no thread ever sees it changed)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
