"""One run per output folder: a lock file naming the run that owns the folder while it runs.

``convnet run --out DIR`` creates ``DIR/.convnet.lock`` holding the owner's host name, process id
and process start time, and removes it when the run ends. A second run into the same folder finds
the lock and is refused with the owner's process id. A lock whose owner is gone is stale and is
taken over: its process no longer exists, or the process id has been reused by another process
(its start time differs from the one recorded), or it is this process's own lock from a session
that has ended without closing.

A lock written on another host cannot be checked from here and is always respected; its message
says which file to remove once that run is known to have ended.
"""

import datetime
import json
import os
import socket
import time

from .errors import ConvnetError

LOCK_NAME = ".convnet.lock"

_HELD = set()          # lock paths held by sessions of this process that are still open


def process_start_time(pid):
    """The process's start time in clock ticks since boot (Linux /proc), or None where unknown."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        # the command name (field 2) is in parentheses and may hold blanks: split after it
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _process_exists(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # exists, owned by another user
        return True
    except (OSError, OverflowError, ValueError):
        return False
    return True


def read_lock(path):
    """The lock's fields (a dict), or None when it cannot be read as a lock (being written, damaged)."""
    try:
        with open(path, encoding="utf-8") as f:
            holder = json.load(f)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return holder if isinstance(holder, dict) else None


def holder_is_alive(holder, path):
    """Whether the run described by ``holder`` (a lock's fields) is still running."""
    if holder.get("host") != socket.gethostname():
        return True
    pid = holder.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if pid == os.getpid():
        return os.path.abspath(path) in _HELD
    if not _process_exists(pid):
        return False
    recorded, actual = holder.get("start"), process_start_time(pid)
    if recorded is not None and actual is not None and recorded != actual:
        return False                 # the process id now belongs to another process
    return True


def _describe(holder):
    started = holder.get("started") or "at an unknown time"
    return f"process {holder.get('pid')} on {holder.get('host')}, started {started}"


class RunLock:
    """The lock of one output folder, held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, path, fields):
        self.path = path
        self.fields = fields

    @classmethod
    def acquire(cls, folder):
        """Take ``folder``'s lock, taking over a stale one; ConvnetError when a live run holds it."""
        path = os.path.join(folder, LOCK_NAME)
        pid = os.getpid()
        fields = {"host": socket.gethostname(), "pid": pid, "start": process_start_time(pid),
                  "started": datetime.datetime.now().isoformat(timespec="seconds")}
        text = json.dumps(fields) + "\n"
        for _ in range(5):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = read_lock(path)
                if holder is not None and holder_is_alive(holder, path):
                    raise ConvnetError(
                        f"the output folder '{folder}' is in use by another run ({_describe(holder)});"
                        f" choose another --out, or remove {path} if that run has ended") from None
                if holder is None and _young(path):
                    time.sleep(0.2)          # another run is writing its lock this moment
                    continue
                cls._take_over(path, text)
                if read_lock(path) == fields:
                    break
                continue
            except OSError as e:
                raise ConvnetError(f"cannot create the lock file {path}: "
                                   f"{e.strerror or e}") from None
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            break
        else:
            raise ConvnetError(f"the output folder '{folder}' is in use by another run "
                               f"(its lock file {path} keeps changing)")
        _HELD.add(os.path.abspath(path))
        return cls(path, fields)

    @staticmethod
    def _take_over(path, text):
        """Replace a stale lock with ours in one step (rename), so no moment is without a lock."""
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise ConvnetError(f"cannot take over the stale lock file {path}: "
                               f"{e.strerror or e}") from None

    def release(self):
        """Remove the lock if it is still ours."""
        _HELD.discard(os.path.abspath(self.path))
        if read_lock(self.path) == self.fields:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _young(path, seconds=2.0):
    """A lock file modified in the last few seconds (possibly still being written)."""
    try:
        return time.time() - os.path.getmtime(path) < seconds
    except OSError:
        return False
