"""Compiled kernels (cubin files) kept on disk by content, and built several at a time.

    cache = KernelCache()                               # CONVNET_CACHE_DIR, else the user's cache
    cubins = cache.build([CompileJob(text, options, "sm_90"), ...])
    cache.stats.line()                                  # what CUDA.LOG says about the build

A cubin's file name is the SHA-256 of everything that decides its bits: the source text, the
nvcc options, the target architecture and the compiler's own version text. A changed kernel,
option, GPU generation or CUDA release therefore gets a new file; no stale binary can be
served. Files are written whole and renamed into place, so a crashed or concurrent run leaves
no half-written cubin behind.

A kernel file whose functions are all template instantiation lines (GEMM_NN(name, ...)) is
compiled as several units, each the same text with only some of those lines kept
(``split_units``): nvcc compiles every instantiation on its own, so a function's machine code
does not depend on which others share its module, and the units compile side by side.

Nothing here needs a GPU or PyCUDA: the compiler is a function ``compile(text, options, arch)
-> bytes`` (``nvcc_compile`` by default; tests pass their own).
"""

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Tuple

from ..atomic import replace_file
from ..errors import ConvnetError

# Bumped when the way a key is formed changes, so that older files are never read as newer.
KEY_VERSION = "convnet-cubin-1"
# Instantiation lines a unit keeps: few enough that a big file spreads over the cores, many
# enough that nvcc's start (about half a second) is not paid per function. A constant, not the
# machine's core count, so that every machine forms the same units and shares cache files. On
# an H100 machine's 16 cores the manual example's first build took 6.3-6.4 s in units of 3 lines
# (29 units), 7.0-8.0 s in units of 4 (23) and 7.1 s in units of 2 (41).
LINES_PER_UNIT = 3
# A line that instantiates a kernel from a macro: NAME(args) alone on a line at column 0.
INSTANTIATION = re.compile(r"^[A-Z][A-Z0-9_]*\(\w+(?:,[^\n]*)?\)[ \t]*$", re.M)
PLAIN_KERNEL = re.compile(r'^extern "C"', re.M)


class KernelBuildError(ConvnetError):
    """nvcc failed on a kernel unit (its message says which and why)."""


@dataclass(frozen=True)
class CompileJob:
    """One unit to compile: its full source text, nvcc options (besides -arch) and target."""
    text: str
    options: Tuple[str, ...]
    arch: str
    label: str = ""


@dataclass
class BuildStats:
    """What a cache did in this process: units loaded from files, units compiled and the wall
    seconds spent building (compiling and reading files)."""
    folder: str
    cached: int = 0
    compiled: int = 0
    seconds: float = 0.0
    workers: int = 1

    def line(self):
        total = self.cached + self.compiled
        if self.compiled == 0:
            return (f"Kernels: {total} modules from the cache ({self.folder}), "
                    f"{self.seconds:.2f} s")
        return (f"Kernels: {total} modules, {self.cached} from the cache and {self.compiled} "
                f"compiled with nvcc ({self.workers} at a time) in {self.seconds:.2f} s; "
                f"cache {self.folder}")


def cache_folder(environ=None):
    """Where cubins are kept: $CONVNET_CACHE_DIR/kernels, else $XDG_CACHE_HOME/convnet/kernels,
    else ~/.cache/convnet/kernels."""
    env = os.environ if environ is None else environ
    if env.get("CONVNET_CACHE_DIR"):
        return os.path.join(env["CONVNET_CACHE_DIR"], "kernels")
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "convnet", "kernels")


def split_units(text, appended=(), per_unit=LINES_PER_UNIT):
    """The texts to compile for one module. ``appended``: instantiation lines added after the
    text (a specialised build), grouped per_unit a text. Otherwise a text whose kernels all come
    from instantiation lines is split: each unit blanks the lines of the other units (blank, so
    that compiler messages keep their line numbers). A text with a plain kernel stays whole."""
    if appended:
        groups = [appended[i:i + per_unit] for i in range(0, len(appended), per_unit)]
        return [text + "\n" + "\n".join(group) + "\n" for group in groups]
    found = list(INSTANTIATION.finditer(text))
    if len(found) <= per_unit or PLAIN_KERNEL.search(text):
        return [text]
    units = []
    for start in range(0, len(found), per_unit):
        keep = set(range(start, min(start + per_unit, len(found))))
        parts, pos = [], 0
        for k, m in enumerate(found):
            parts.append(text[pos:m.start()])
            parts.append(m.group(0) if k in keep else "")
            pos = m.end()
        parts.append(text[pos:])
        units.append("".join(parts))
    return units


_VERSIONS = {}


def nvcc_path():
    path = shutil.which("nvcc")
    if path is None:
        raise KernelBuildError("nvcc was not found on PATH (the CUDA toolkit builds the kernels)")
    return path


def nvcc_version(nvcc=None):
    """nvcc's --version text (once per process): part of every cache key."""
    nvcc = nvcc or nvcc_path()
    if nvcc not in _VERSIONS:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
        _VERSIONS[nvcc] = out.stdout
    return _VERSIONS[nvcc]


def nvcc_compile(text, options, arch):
    """The cubin nvcc makes of text (as PyCUDA's SourceModule would: --cubin, the options,
    -arch)."""
    nvcc = nvcc_path()
    with tempfile.TemporaryDirectory(prefix="convnet-nvcc-") as folder:
        with open(os.path.join(folder, "kernel.cu"), "w", encoding="utf-8") as f:
            f.write(text)
        cmd = [nvcc, "--cubin", *options, "-arch", arch, "-o", "kernel.cubin", "kernel.cu"]
        res = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
        if res.returncode != 0:
            raise KernelBuildError(f"nvcc failed ({' '.join(cmd)}): {res.stderr.strip()}")
        with open(os.path.join(folder, "kernel.cubin"), "rb") as f:
            return f.read()


def default_workers():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:          # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class KernelCache:
    """Cubins by content in ``folder``; ``compile`` and ``compiler_id`` make the missing ones
    (nvcc by default), ``workers`` of them at a time."""
    folder: str = field(default_factory=cache_folder)
    compile: object = nvcc_compile
    compiler_id: object = nvcc_version
    workers: int = field(default_factory=default_workers)

    def __post_init__(self):
        self.stats = BuildStats(self.folder, workers=self.workers)
        self._lock = threading.Lock()

    def key(self, job):
        h = hashlib.sha256()
        for part in (KEY_VERSION, job.text, "\0".join(job.options), job.arch, self.compiler_id()):
            h.update(part.encode("utf-8"))
            h.update(b"\0\1\0")
        return h.hexdigest()

    def path(self, job):
        return os.path.join(self.folder, self.key(job) + ".cubin")

    def build(self, jobs):
        """The cubin of every job, in order: read from the folder, or compiled (side by side)
        and then stored there."""
        start = time.perf_counter()
        paths = [self.path(job) for job in jobs]
        cubins = [_read(p) for p in paths]
        missing = [k for k, c in enumerate(cubins) if c is None]
        if missing:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(missing))) as pool:
                built = list(pool.map(lambda k: self._compile(jobs[k], paths[k]), missing))
            for k, cubin in zip(missing, built):
                cubins[k] = cubin
        with self._lock:
            self.stats.cached += len(jobs) - len(missing)
            self.stats.compiled += len(missing)
            self.stats.seconds += time.perf_counter() - start
        return cubins

    def forget(self, job):
        """Removes a job's file (one the driver would not load)."""
        try:
            os.remove(self.path(job))
        except OSError:
            pass

    def _compile(self, job, path):
        cubin = self.compile(job.text, job.options, job.arch)
        try:
            replace_file(path, cubin)
        except OSError:             # a read-only or full cache costs time, never a result
            pass
        return cubin


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read() or None
    except OSError:
        return None
