"""Memory: what data sets, models and training need, what the machine has, and a clear refusal.

``convnet check`` and ``convnet run`` ask here before every large allocation, so a size that cannot
fit (a MAKE IMAGE of four billion cases, a fully connected layer of two billion slices) is refused
at its control line with the size needed and the size available, instead of ending in a numpy
traceback. The estimates are lower bounds of the largest arrays the program makes (data as
float64, the weight vectors of training, one case's work areas per host thread, one device batch):
a refusal means the work certainly cannot fit; passing means only that it may.

Available host memory is the kernel's estimate of what can be allocated without swapping
(MemAvailable), lowered by a cgroup memory limit and by the process's address-space limit where
either is set. Device memory is the free memory the CUDA driver reports.
"""

import os
import resource

from .errors import ConvnetError

FLOAT64 = 8

# Vectors of n_weights float64 numbers that training holds at once: the model's weights, the
# annealing centre and scales, the conjugate-gradient point, gradient, direction, previous
# gradient and line-search trial point.
TRAINING_WEIGHT_VECTORS = 8

# The device path's smallest batch when MAX BATCH is not given (device/plan.py: CHUNK).
DEVICE_MIN_BATCH = 256


def format_bytes(n):
    """``1.28 TiB``, ``512.00 MiB``, ``12 bytes``."""
    n = int(n)
    if n < 1024:
        return f"{n} byte{'s' if n != 1 else ''}"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        n /= 1024.0
        if n < 1024.0 or unit == "EiB":
            return f"{n:.2f} {unit}"
    return f"{n:.2f} EiB"  # pragma: no cover - unreachable


# ---------------------------------------------------------------------------------- what there is
def _meminfo_available():
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_available():
    """What a cgroup (v2) memory limit still allows this process, or None when there is none."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            rel = next((line.strip().split(":", 2)[2] for line in f if line.startswith("0::")), None)
        if rel is None:
            return None
        base = os.path.join("/sys/fs/cgroup", rel.lstrip("/"))
        with open(os.path.join(base, "memory.max"), encoding="ascii") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(base, "memory.current"), encoding="ascii") as f:
            current = int(f.read().strip())
        return max(0, int(limit) - current)
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def _rlimit_available():
    best = None
    for name in ("RLIMIT_AS", "RLIMIT_DATA"):
        which = getattr(resource, name, None)
        if which is None:
            continue
        soft, _ = resource.getrlimit(which)
        if soft != resource.RLIM_INFINITY:
            best = soft if best is None else min(best, soft)
    return best


def host_available():
    """Bytes of host memory this process can still allocate (None when it cannot be told)."""
    found = [v for v in (_meminfo_available(), _cgroup_available(), _rlimit_available())
             if v is not None]
    return min(found) if found else None


def device_available(device=0):
    """Free bytes on CUDA device ``device``, or None when it cannot be told. It asks through the
    runtime that will compute there, so the run's own context answers: a context made only for
    this question would be torn down and made again (a few tenths of a second) when the run
    starts."""
    try:
        from .device.runtime import Runtime
        rt = Runtime.get(device)
        with rt.active():
            free, _ = rt.free_memory()
        return int(free)
    except Exception:        # no PyCUDA, no device, a driver error: the device check is skipped
        return None


# ---------------------------------------------------------------------------------- the refusal
def require(need, what, available=None, where="host"):
    """Raise ConvnetError unless ``need`` bytes fit in ``available`` (default: host_available()).

    ``what`` names the thing ("MAKE IMAGE's 4294967297 images of 16 x 16 x 3"); the message carries
    no location, the session adds the control line.
    """
    if available is None:
        available = host_available() if where == "host" else None
    if available is None or need <= available:
        return
    device = "CUDA device" if where == "device" else "host"
    raise ConvnetError(f"not enough {device} memory for {what}: {format_bytes(need)} needed, "
                       f"{format_bytes(available)} available")


def is_allocation_failure(error):
    """True for the ways an allocation that does not fit shows itself (numpy, Numba, PyCUDA)."""
    if isinstance(error, MemoryError) or type(error).__name__ == "MemoryError":
        return True
    if isinstance(error, (ValueError, OverflowError)):
        text = str(error)
        return any(s in text for s in ("Maximum allowed size exceeded", "array is too big",
                                       "Allocation failed", "cannot allocate"))
    return False


def allocation_error(error, what):
    """The ConvnetError that stands for an allocation failure while doing ``what``."""
    detail = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
    available = host_available()
    have = f"; {format_bytes(available)} of host memory available" if available is not None else ""
    return ConvnetError(f"not enough memory for {what} ({detail}){have}")


# ---------------------------------------------------------------------------------- estimates
def images_bytes(n_cases, bands, rows, cols):
    """A data set held as float64 images plus one int64 class per case."""
    return int(n_cases) * (FLOAT64 * int(bands) * int(rows) * int(cols) + FLOAT64)


def series_bytes(n_cases, resolution, window):
    """Imaging a series: a lit/unlit mask (1 byte) and the float64 image per pixel."""
    return int(n_cases) * int(resolution) * int(window) * (1 + FLOAT64) \
        + int(n_cases) * int(window) * 3 * FLOAT64


def picture_bytes(width, height, cells, values_per_cell):
    """A DISPLAY picture: the RGB canvas and its pillow copy, and the tones of every cell (float64,
    shown, scaled and tiled)."""
    return 2 * 3 * int(width) * int(height) + 3 * FLOAT64 * int(cells) * int(values_per_cell)


def _per_case_host(arch):
    """Host work areas of one case: every layer's activations and two delta buffers."""
    neurons = [layer.n_neurons for layer in arch.all_layers]
    return FLOAT64 * (arch.n_inputs + sum(neurons) + 2 * max(neurons))


def host_training_bytes(arch, threads):
    """TRAIN on the host: the weight vectors of training, and per thread a gradient and one case."""
    threads = max(1, int(threads or 1))
    return (FLOAT64 * arch.n_weights * (TRAINING_WEIGHT_VECTORS + threads)
            + threads * _per_case_host(arch))


def host_testing_bytes(arch, n_cases, threads):
    """TEST on the host: the weights, one case per thread, the class probabilities of every case."""
    threads = max(1, int(threads or 1))
    return (FLOAT64 * arch.n_weights * 2 + threads * _per_case_host(arch)
            + FLOAT64 * int(n_cases) * arch.n_classes)


def device_training_bytes(arch, n_cases, max_batch=None):
    """Every byte the device path allocates for a data set, as its kernel plan counts them
    (device/kernel_plan.py, the count CUDA.LOG prints): the data, the weights in their layouts
    with their index tables, and one batch of activations, winners, deltas and gradient scratch.
    The batch is MAX BATCH cases when given, else the smallest automatic batch; the kernels are
    those of a device without shared memory beyond the 48 KB every block may have."""
    from .device.kernel_plan import device_bytes
    from .params import DeviceParams
    batch = int(max_batch) if max_batch else DEVICE_MIN_BATCH
    return device_bytes(arch, int(n_cases), batch, DeviceParams(max_batch=max_batch))


def require_model(arch, n_cases, threads, training, device, max_batch=None, cuda_devices=None):
    """Refuse a TRAIN (``training``) or TEST whose model and work areas cannot fit in host memory,
    or in the memory of a CUDA device it uses (``cuda_devices``, a CUDA DEVICES value; each holds
    its share of the cases) when ``device`` ("cpu", "cuda" or "auto") uses a usable GPU."""
    if training:
        need = host_training_bytes(arch, threads)
    else:
        need = host_testing_bytes(arch, n_cases, threads)
    what = f"the model's {arch.n_weights:,} weights"
    big = largest_layer(arch)
    if big is not None and big.n_weights * 2 > arch.n_weights and big.spec.line is not None:
        what += f" (most of them in line {big.spec.line}: {big.spec.control_line()})"
    require(need, what + f" and {'training' if training else 'testing'} on the host")
    if device == "cpu":
        return
    from .devices import cuda_status
    if not cuda_status()[0]:
        return
    from .device.multi import resolve_devices, shard_bounds
    try:
        indices = resolve_devices(cuda_devices)
    except ConvnetError:
        return                  # the backend says what is wrong with the devices
    shards = shard_bounds(n_cases, len(indices))
    for index, (start, stop) in zip(indices, shards):
        require(device_training_bytes(arch, stop - start, max_batch),
                f"{stop - start} cases and the model's {arch.n_weights:,} weights on CUDA "
                f"device {index}", device_available(index), where="device")


def require_picture(geometry, bands):
    """Refuse a DISPLAY grid whose picture cannot fit in host memory (geometry: the grid's
    display.grids.GridGeometry: its rows x cols tiles and the picture's pixels)."""
    rows, cols = geometry.rows, geometry.cols
    need = picture_bytes(geometry.width, geometry.height, rows * cols,
                         geometry.tile_height * geometry.tile_width * bands)
    require(need, f"a picture of {rows} x {cols} images "
                  f"({geometry.width} x {geometry.height} pixels)")


def largest_layer(arch):
    """The hidden layer with the most weights (for messages), or None."""
    layers = [layer for layer in arch.layers if layer.n_weights]
    return max(layers, key=lambda layer: layer.n_weights) if layers else None
