"""The CUDA runtime: one context, stream and set of compiled kernels per device, shared by every
backend of the process on that device.

PyCUDA is imported only when a runtime is first asked for, so importing this module needs no GPU.
"""

import contextlib
import os
import re
import threading

import numpy as np

from ..devices import device_label
from ..errors import ConvnetError
from .graphs import DriverAPI, DriverEvent, Graph
from .kernel_args import compiled_functions
from .kernel_cache import CompileJob, KernelCache, split_units
from .tuning import NN_SHARED, NN_TENSOR, NN_TILES, SHARED_BYTES, TN_TENSOR, tile_source, tn_tiles

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
# built when a backend is made (the files its net needs) or on a function's first launch
EAGER_FILES = ("gemm.cu", "gemm_async.cu", "gemm_split.cu", "gemm_tf32.cu", "conv_small.cu",
               "pool.cu", "output.cu", "weights.cu", "minibatch.cu")
# built for one layer shape at a time (conv_tiled.py, conv_patch.py)
SPECIALIZED_FILES = ("conv_tiled.cu", "conv_patch.cu")
KERNEL_FILES = EAGER_FILES + SPECIALIZED_FILES

NULL = np.uintp(0)


class DeviceUnavailable(ConvnetError):
    """No usable CUDA device (PyCUDA missing, no driver, no GPU, or a kernel failed to build)."""


def kernel_source(name):
    """The text of kernels/NAME with its headers inlined (what the runtime compiles): each
    `#include "HEADER"` of a file in kernels/ is replaced by that file's text, its own includes
    inlined the same way, and a header already inlined is left out (so it comes once)."""
    return _inline_headers(name, set())


_LOCAL_INCLUDE = re.compile(r'^#include "([\w.]+)"[ \t]*$', re.M)


def _inline_headers(name, seen):
    with open(os.path.join(KERNEL_DIR, name), encoding="utf-8") as f:
        text = f.read()

    def header(match):
        included = match.group(1)
        if included in seen:
            return ""
        seen.add(included)
        return _inline_headers(included, seen)

    return _LOCAL_INCLUDE.sub(header, text)


def specialized_source(name, lines):
    """The text of kernels/NAME as Runtime.specialize compiles it: SPECIALIZED defined (the file
    leaves out its own default instantiations) and the instantiation lines appended."""
    return "#define SPECIALIZED\n" + kernel_source(name) + "\n" + "\n".join(lines) + "\n"


def _function_files():
    """({function name: its kernel file}, {kernel file: [(function name, KernelParams)]}) of
    every function of EAGER_FILES."""
    by_name, by_file = {}, {f: [] for f in EAGER_FILES}
    products = compiled_functions([*NN_TILES, *NN_TENSOR], [*tn_tiles(), *TN_TENSOR],
                                  tile_source)
    for source, name, params in products:
        by_name[name] = source
        by_file[source].append((name, params))
    return by_name, by_file


def _shared_needs():
    """{kernel file: [(function name, dynamic shared bytes)]} of the functions that have to opt
    in to more than SHARED_BYTES when they are loaded."""
    needs = {}
    for tile, nbytes in NN_SHARED.items():
        if nbytes > SHARED_BYTES:
            needs.setdefault(tile_source(tile), []).append((f"gemm_nn_{tile}", nbytes))
    return needs


def _special_key(name, defines, kernels):
    return (name, tuple(sorted(defines.items())), tuple(line for _, line, _ in kernels))


def ptr(buf, offset_elems=0, itemsize=4):
    """The device address offset_elems elements of itemsize bytes into buf."""
    return np.uintp(int(buf) + int(offset_elems) * itemsize)


class Runtime:
    """One device's primary context, a stream on it, and the compiled kernels.

    ``Runtime.get(device)`` makes it on first use and returns the same object afterwards; a
    device that failed once keeps failing with the same reason (no retry per evaluation)."""

    _instances = {}
    _failures = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, device=0):
        with cls._lock:
            rt = cls._instances.get(device)
            if rt is None:
                if device in cls._failures:
                    raise DeviceUnavailable(cls._failures[device])
                try:
                    rt = cls._instances[device] = cls(device)
                except DeviceUnavailable as e:
                    cls._failures[device] = e.message
                    raise
            return rt

    def __init__(self, device=0):
        try:
            import pycuda
            import pycuda.driver as cuda
        except ImportError as e:
            raise DeviceUnavailable(f"PyCUDA is not installed ({e}); install the 'cuda' extra") from None
        try:
            cuda.init()
            n = cuda.Device.count()
        except Exception as e:          # pycuda.driver.Error and friends
            raise DeviceUnavailable(f"the CUDA driver is not usable: {e}") from None
        if n < 1:
            raise DeviceUnavailable("no CUDA device found")
        if not 0 <= device < n:
            raise DeviceUnavailable(f"there is no CUDA device {device} (this machine has {n})")
        self.cuda = cuda
        self.pycuda_version = getattr(pycuda, "VERSION_TEXT", "?")
        self.index = device
        self.device = cuda.Device(device)
        self.ctx = self.device.retain_primary_context()
        self.lock = threading.RLock()
        self.trace = None
        # the most shared memory one block may have once its kernel opts in (Volta and later)
        self.shared_optin = self.device.get_attribute(
            cuda.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        self.multiprocessors = self.device.get_attribute(
            cuda.device_attribute.MULTIPROCESSOR_COUNT)
        major, minor = self.device.compute_capability()
        self.arch = f"sm_{major}{minor}"
        self.cache = KernelCache()
        self.modules = {}           # file name or specialisation key -> its units' modules
        self.functions = {}         # function name -> prepared function
        self.function_files, self.file_functions = _function_files()
        self.shared_needs = _shared_needs()
        with self.active():
            self.stream = cuda.Stream()
        # CUDA graphs and in-graph timing events need the driver API and the stream's handle
        driver = DriverAPI.load()
        self.driver = driver if driver is not None and hasattr(self.stream, "handle") else None

    @contextlib.contextmanager
    def active(self):
        """Holds the lock and makes this context current for the calling thread."""
        with self.lock:
            self.ctx.push()
            try:
                yield
            finally:
                self.cuda.Context.pop()

    @contextlib.contextmanager
    def on_stream(self, stream):
        """Launches, copies and captures go to `stream` instead of the context's own stream."""
        own, self.stream = self.stream, stream
        try:
            yield
        finally:
            self.stream = own

    def _jobs(self, name, defines=None, appended=()):
        """The compile jobs of kernels/NAME (split_units), with -D NAME=value for defines;
        appended: instantiation lines of a specialised build."""
        options = ("-O3",) + tuple(f"-D{k}={v}" for k, v in sorted((defines or {}).items()))
        text = specialized_source(name, ()) if appended else kernel_source(name)
        return [CompileJob(unit, options, self.arch, name)
                for unit in split_units(text, tuple(appended))]

    def _load(self, requests):
        """Builds every unit of requests [(key, jobs)] in one batch (cache, else nvcc side by
        side) and returns {key: [module, ...]}."""
        jobs = [job for _, js in requests for job in js]
        try:
            cubins = self.cache.build(jobs)
        except Exception as e:
            raise DeviceUnavailable(f"kernels did not build: {e}") from None
        modules, k = {}, 0
        for key, js in requests:
            modules[key] = [self._module(job, cubin) for job, cubin in zip(js, cubins[k:k + len(js)])]
            k += len(js)
        return modules

    def _module(self, job, cubin):
        try:
            return self.cuda.module_from_buffer(cubin)
        except self.cuda.Error:         # a damaged file: build it again
            self.cache.forget(job)
            return self.cuda.module_from_buffer(self.cache.build([job])[0])

    def prepare(self, files=(), specialized=()):
        """Builds, in one batch, the kernel files named (those of EAGER_FILES not built yet) and
        the specialised modules [(name, defines, kernels)] (see specialize), so that their
        compilations run side by side; what a net launches later and was not named here is
        built on its first launch."""
        with self.active():
            requests = [(f, self._jobs(f)) for f in dict.fromkeys(files)
                        if f not in self.modules]
            todo = {}
            for name, defines, kernels in specialized:
                key = _special_key(name, defines, kernels)
                if key not in self.modules and key not in todo:
                    todo[key] = kernels
                    requests.append((key, self._jobs(name, defines, [k[1] for k in kernels])))
            for key, modules in self._load(requests).items():
                self.modules[key] = modules
                if key in todo:
                    self._register(modules, [(f, p) for f, _, p in todo[key]])
                else:
                    self._register(modules, self.file_functions[key])
                    for fname, nbytes in self.shared_needs.get(key, ()):
                        self.allow_shared(fname, nbytes)

    def _register(self, modules, functions):
        """Prepares each (function name, KernelParams) from the module of modules that has it."""
        for fname, params in functions:
            for module in modules:
                try:
                    f = module.get_function(fname)
                except self.cuda.LogicError:
                    continue
                f.prepare(params.signature)
                self.functions[fname] = f
                break
            else:
                raise DeviceUnavailable(f"no kernel {fname} in the modules built")

    def function(self, name):
        """The prepared kernel `name`, its file built now if it was not yet."""
        f = self.functions.get(name)
        if f is None:
            source = self.function_files.get(name)
            if source is None:
                raise KeyError(f"no kernel {name} is known (and none was specialised)")
            self.prepare([source])
            f = self.functions[name]
        return f

    def specialize(self, name, defines, kernels):
        """Builds kernels/NAME for the constants `defines` (-D NAME=value) with the given
        instantiations appended: kernels is [(function name, instantiation line, KernelParams)].
        The functions are then launched by name like the others; a second call with the same
        text only looks them up (and the kernel cache keeps the compiled units on disk)."""
        self.prepare(specialized=[(name, defines, kernels)])

    def build_line(self):
        """One line for CUDA.LOG: the kernel modules of this process, from the cache or built,
        and how long that took."""
        return self.cache.stats.line()

    def allow_shared(self, name, nbytes):
        """Lets kernel `name` start with nbytes of dynamic shared memory (above 48 KB a kernel
        has to opt in; at most shared_optin)."""
        self.function(name).set_attribute(
            self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes))

    # ------------------------------------------------------------------ helpers
    def pinned_for_all(self, n, dtype):
        """A page-locked host array that every context may copy from asynchronously."""
        with self.active():
            return self.cuda.pagelocked_empty(n, dtype,
                                              mem_flags=self.cuda.host_alloc_flags.PORTABLE)

    def alloc(self, nbytes):
        return self.cuda.mem_alloc(max(int(nbytes), 16))

    def upload(self, array):
        a = np.ascontiguousarray(array)
        buf = self.alloc(a.nbytes)
        if a.nbytes:
            self.cuda.memcpy_htod(buf, a)
        return buf

    def launch(self, name, grid, block, *args, shared=0):
        if self.trace is not None:          # checks: an event pair around every launch
            e0, e1 = self.cuda.Event(), self.cuda.Event()
            e0.record(self.stream)
            self.function(name).prepared_async_call(grid, block, self.stream, *args,
                                                    shared_size=shared)
            e1.record(self.stream)
            self.trace.append((name, grid, e0, e1))
            return
        f = self.functions.get(name) or self.function(name)
        f.prepared_async_call(grid, block, self.stream, *args, shared_size=shared)

    @property
    def can_capture(self):
        return self.driver is not None

    def capture(self, record):
        """record() run with the stream capturing, as a Graph (launch(stream) replays it).
        Raises graphs.DriverError when the driver refuses."""
        return Graph(self.driver, self.stream, record)

    def new_event(self):
        """A timing event; one that can also be recorded inside a graph when graphs work here."""
        return DriverEvent(self.driver) if self.driver is not None else self.cuda.Event()

    def free_memory(self):
        free, total = self.cuda.mem_get_info()
        return free, total

    def report(self):
        d = self.device
        cuda = self.cuda
        at = d.get_attributes()
        A = cuda.device_attribute

        def attr(name, default=None):
            key = getattr(A, name, None)
            return at.get(key, default) if key is not None else default

        major, minor = d.compute_capability()
        with self.active():
            free, total = self.free_memory()
        drv = cuda.get_driver_version()
        lines = [
            f"Device {device_label(self.index)}: {d.name()}",
            f"   Compute capability {major}.{minor}, {attr('MULTIPROCESSOR_COUNT', '?')} multiprocessors",
            f"   Global memory {total / 2**20:.0f} MiB ({free / 2**20:.0f} MiB free)",
            f"   Clock {attr('CLOCK_RATE', 0) / 1000:.0f} MHz, memory clock "
            f"{attr('MEMORY_CLOCK_RATE', 0) / 1000:.0f} MHz, memory bus {attr('GLOBAL_MEMORY_BUS_WIDTH', '?')} bits",
            f"   L2 cache {attr('L2_CACHE_SIZE', 0) / 2**20:.1f} MiB, shared memory per block "
            f"{attr('MAX_SHARED_MEMORY_PER_BLOCK', 0) // 1024} KiB, registers per block "
            f"{attr('MAX_REGISTERS_PER_BLOCK', '?')}",
            f"   Warp size {attr('WARP_SIZE', '?')}, max threads per block "
            f"{attr('MAX_THREADS_PER_BLOCK', '?')}, max grid {attr('MAX_GRID_DIM_X', '?')} x "
            f"{attr('MAX_GRID_DIM_Y', '?')} x {attr('MAX_GRID_DIM_Z', '?')}",
            f"   Driver CUDA version {drv // 1000}.{drv % 1000 // 10}, PyCUDA {self.pycuda_version}",
        ]
        n = cuda.Device.count()
        for i in range(n):
            if i == self.index:
                continue
            other = cuda.Device(i)
            lines.append(f"Device {device_label(i)}: {other.name()} (not used), "
                         f"{other.total_memory() / 2**20:.0f} MiB, compute capability "
                         f"{'.'.join(map(str, other.compute_capability()))}")
        return lines


def device_available(device=0):
    """(True, "") when a CUDA device is usable, else (False, why not)."""
    try:
        Runtime.get(device)
        return True, ""
    except DeviceUnavailable as e:
        return False, e.message


def device_report(device=0):
    """Lines about the CUDA device (name, memory, compute capability, ...); raises
    DeviceUnavailable (a ConvnetError) saying why when there is none."""
    return Runtime.get(device).report()
