"""Is a CUDA device usable here, and what is there? (``convnet devices``, CUDA = AUTO)."""

import contextlib
import os
import threading

from ._version import pip_install


VISIBLE_VARIABLE = "CUDA_VISIBLE_DEVICES"


def visible_devices(environ=None):
    """The machine's numbers of the CUDA devices this process sees, in its order, when
    CUDA_VISIBLE_DEVICES names them by number; else None (every device, as numbered)."""
    value = (os.environ if environ is None else environ).get(VISIBLE_VARIABLE, "").strip()
    parts = [p.strip() for p in value.split(",")] if value else []
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


def device_label(index, environ=None):
    """How a log names CUDA device ``index`` of this process: by its number on the machine, with
    the variable that renumbered it (a batch gives each session its GPU that way)."""
    seen = visible_devices(environ)
    if seen is None or index >= len(seen) or seen[index] == index:
        return str(index)
    return f"{seen[index]} ({VISIBLE_VARIABLE}={','.join(map(str, seen))})"


# the driver's list of the machine's NVIDIA GPUs, a folder each (Linux)
GPU_LISTING = "/proc/driver/nvidia/gpus"


def listed_gpu_count(environ=None, listing=None):
    """How many CUDA devices a process would see, from the driver's list of GPUs and
    CUDA_VISIBLE_DEVICES, without starting CUDA (its start is a third of a second, which a batch
    would pay before its first session); None where that list is missing or the variable names
    devices other than by number: then only CUDA can tell. As CUDA does, the numbers count up to
    the first that is not there."""
    try:
        present = len(os.listdir(GPU_LISTING if listing is None else listing))
    except OSError:
        return None
    environ = os.environ if environ is None else environ
    if VISIBLE_VARIABLE not in environ:
        return present
    seen = visible_devices(environ)
    if seen is None:
        return None
    count = 0
    while count < len(seen) and seen[count] < present:
        count += 1
    return count


def pycuda_installed():
    """Whether PyCUDA can be found (not imported: that loads the driver's library)."""
    import importlib.util
    return importlib.util.find_spec("pycuda") is not None


# the thread pools of the host's linear algebra (OpenBLAS, OpenMP, MKL)
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def session_environment(gpu, environ=None, on_gpu=True):
    """The environment of a session given the GPU numbered ``gpu`` here: it sees that device
    alone (as its device 0), so its CUDA start-up touches no other GPU. A session computing on
    it (``on_gpu``) also gets one thread for the host's linear algebra where the environment
    does not say otherwise: it does little of it, and a pool of a thread per core in every
    session of a batch made sessions running side by side slow each other down."""
    env = dict(os.environ if environ is None else environ)
    seen = visible_devices(env)
    env[VISIBLE_VARIABLE] = str(seen[gpu] if seen is not None and gpu < len(seen) else gpu)
    if on_gpu:
        for name in BLAS_THREAD_VARIABLES:
            env.setdefault(name, "1")
    return env


# names a file whose lock a process holds while its CUDA starts (a batch names one for its sessions)
START_LOCK_VARIABLE = "CONVNET_CUDA_START_LOCK"


@contextlib.contextmanager
def cuda_start_lock(environ=None):
    """Hold the lock of the file CONVNET_CUDA_START_LOCK names while CUDA starts. The driver's
    start (cuInit and a primary context) took 0.41 s alone and 0.69 s each for two processes at
    once on two H200 of one host, so the sessions of a batch on several GPUs take turns: the
    first starts at full speed, and the GPUs' sessions fall out of step instead of starting
    together every time. Nothing is held where the variable is unset or the file cannot be
    locked; the lock goes with the process if it ends."""
    path = (os.environ if environ is None else environ).get(START_LOCK_VARIABLE)
    handle = None
    if path:
        try:
            import fcntl
            handle = open(path, "rb")          # never made here: the batch makes it
            fcntl.flock(handle, fcntl.LOCK_EX)
        except (ImportError, OSError):
            if handle is not None:
                handle.close()
            handle = None
    try:
        yield
    finally:
        if handle is not None:
            handle.close()          # which lets go of the lock


def start_cuda_early(indices=(0,)):
    """Start the CUDA driver and the primary contexts of devices ``indices`` in a thread of their
    own, while the run imports its modules, parses and reads its data. The driver's start is a
    few tenths of a second of its own work, done without the interpreter lock (a ctypes call);
    PyCUDA then finds the driver started and the contexts made (a primary context is one per
    device and process: the runtime retains this one). Where there is no driver nothing happens,
    and an error is left for the run to meet and report in its own words."""
    def start():
        try:
            import ctypes
            driver = ctypes.CDLL("libcuda.so.1")
            with cuda_start_lock():
                if driver.cuInit(0) != 0:
                    return
                for index in indices:
                    device, context = ctypes.c_int(), ctypes.c_void_p()
                    if driver.cuDeviceGet(ctypes.byref(device), int(index)) == 0:
                        driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
        except Exception:       # no driver, another platform: the run finds out by itself
            pass
    thread = threading.Thread(target=start, name="convnet-cuda-start", daemon=True)
    thread.start()
    return thread


def cuda_status():
    """(usable, reason): whether PyCUDA imports and finds a GPU; reason says why not."""
    try:
        import pycuda.driver as drv
    except ImportError:
        return False, f"PyCUDA is not installed ({pip_install('cuda')})"
    except Exception as e:  # a broken CUDA installation raises all sorts of errors
        return False, f"PyCUDA cannot load: {e}"
    try:
        drv.init()
        count = drv.Device.count()
    except Exception as e:
        return False, f"no CUDA driver or device: {e}"
    if count < 1:
        return False, "no CUDA device found"
    return True, f"{count} CUDA device{'s' if count > 1 else ''}"


def host_threads():
    """The host thread count a run uses by default: every core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def report():
    """Lines for ``convnet devices``: each GPU (name, memory, compute capability) or why none."""
    usable, reason = cuda_status()
    lines = []
    if usable:
        import pycuda.driver as drv
        for i in range(drv.Device.count()):
            dev = drv.Device(i)
            major, minor = dev.compute_capability()
            lines.append(f"CUDA device {i}: {dev.name()}, {dev.total_memory() // 2 ** 20} MiB, "
                         f"compute capability {major}.{minor}")
    else:
        lines.append(f"No usable CUDA device: {reason}")
    lines.append(f"Host threads: {host_threads()}")
    return lines
