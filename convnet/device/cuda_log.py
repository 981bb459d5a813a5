"""CUDA.LOG: what the device path did (SPEC section 5, book p.172).

A session keeps one CUDA.LOG: its first device TRAIN or TEST starts the file, and every device
TRAIN and TEST appends a part headed by the command and its control-file line, so nothing a
session did on the device is overwritten. Each part has the book's four sections:

    1. the device and its capabilities
    2. the architecture and the training parameters
    3. device memory allocations, the gradient partial-sum scratch and how MAX BATCH,
       MAX HID GRAD and MAX MEM GRAD split the launches
    4. device time by layer and activity during that command, measured with CUDA events:
       launches, total ms and ms per launch; the rows add up to the measured total. Every activity
       of the book's table is either a row or named in one line saying why it has no launch.

:class:`CudaLog` appends the parts; ``write_cuda_log(path, backend, arch, params)`` writes a file
of one part; ``cuda_log_lines`` gives a part's lines. A run over several GPUs (CUDA DEVICES)
has, in each part, section 1 for every GPU and then a section per GPU in place of 3 and 4.
"""

import datetime
import os

from .._version import __version__

# Activities in the order the table shows them; any other follows in the order first met.
ACTIVITY_ORDER = ("weight copy", "forward", "softmax", "delta", "gradient", "gradient fetch",
                  "log likelihood")

# The book's activities (SPEC 5) and the row that times each here (None: no launch of its own).
BOOK_ACTIVITIES = (
    ("activation", "forward"),
    ("delta backprop", "delta"),
    ("gradient", "gradient"),
    ("weight copy", "weight copy"),
    ("SoftMax", "softmax"),
    ("log likelihood", "log likelihood"),
    ("delta move", None),
    ("gradient fetch", "gradient fetch"),
)
NO_LAUNCH = {
    "delta move": "no launch of its own: each layer's backward launch writes the delta of the layer "
                  "below straight into the second of two delta buffers, which then swap roles, so "
                  "no delta is ever moved",
}
# Why an activity that has launches on the device may have none in one command.
NOT_IN_COMMAND = {
    "delta": "no launches here: only criteria and outputs were evaluated, no gradient",
    "gradient": "no launches here: only criteria and outputs were evaluated, no gradient",
    "gradient fetch": "no launches here: no gradient was evaluated",
    "log likelihood": "no launches here: only outputs were evaluated",
    "weight copy": "no launches here: the weights on the device were already current",
}

# Section 2's parameters after the device's own (MAX BATCH, MAX HID GRAD, MAX MEM GRAD and
# CUDA DEVICES, which the backend reads), by their control-file phrases.
TRAINING_PARAMS = ("ANNEAL ITERS", "ANNEAL RANGE", "ANNEAL SCALE", "MAXITERS", "TOL", "WPEN",
                   "RANDOM SEED")


def _section(title):
    return ["", title, "-" * len(title)]


def _param_lines(backend, params):
    params = params.phrases()
    out = []
    mb = backend.max_batch
    out.append(f"   MAX BATCH = {'automatic (as many cases as fit in a quarter of free device memory)' if mb is None else mb}")
    out.append(f"   MAX HID GRAD = {backend.max_hid_grad}")
    out.append(f"   MAX MEM GRAD = {backend.max_mem_grad} MB")
    if params.get("CUDA DEVICES") is not None:
        out.append(f"   CUDA DEVICES = {params['CUDA DEVICES']}")
    out.append(f"   CUDA PRECISION = {params['CUDA PRECISION']}")
    for key in TRAINING_PARAMS:
        if params.get(key) is not None:
            out.append(f"   {key} = {params[key]}")
    return out


def timing_lines(timings, measured_seconds=None):
    """The timing table of section 4 from [(label, activity, launches, seconds)]."""
    rows = {}
    labels, activities = [], []
    for label, activity, launches, seconds in timings:
        if label not in labels:
            labels.append(label)
        if activity not in activities:
            activities.append(activity)
        cell = rows.setdefault((label, activity), [0, 0.0])
        cell[0] += int(launches)
        cell[1] += float(seconds)
    if not rows:
        return ["   (nothing was timed)"]
    order = [a for a in ACTIVITY_ORDER if a in activities] + \
            [a for a in activities if a not in ACTIVITY_ORDER]
    width = max(10, max(len(lb) for lb in labels) + 2)
    head = f"{'Layer':<{width}}{'Activity':<16}{'Launches':>10}{'Total ms':>12}{'ms/launch':>12}"
    out = [head]
    total = 0.0
    by_activity = {a: [0, 0.0] for a in order}
    for label in labels:
        for a in order:
            if (label, a) not in rows:
                continue
            n, s = rows[(label, a)]
            total += s
            by_activity[a][0] += n
            by_activity[a][1] += s
            per = s * 1000.0 / n if n else 0.0
            out.append(f"{label:<{width}}{a:<16}{n:>10d}{s * 1000.0:>12.3f}{per:>12.4f}")
    out.append("")
    for a in order:
        n, s = by_activity[a]
        per = s * 1000.0 / n if n else 0.0
        out.append(f"{'All layers':<{width}}{a:<16}{n:>10d}{s * 1000.0:>12.3f}{per:>12.4f}")
    out.append("")
    out.append(f"Sum of the rows: {total * 1000.0:.3f} ms")
    if measured_seconds is not None:
        out.append(f"Measured total (CUDA events, first to last of every evaluation): "
                   f"{measured_seconds * 1000.0:.3f} ms")
    return out


def book_activity_lines(timings, fused_first_pool=None, fused_in_gradients=False):
    """One line for each activity of the book's table: the row that times it, or why it has no
    launch of its own (always, or in this command). ``fused_first_pool``: the label of a pooling
    layer computed inside the layer before it, if any; ``fused_in_gradients``: whether gradients
    compute it there too."""
    seen = {activity for _, activity, launches, _ in timings if launches}
    out = ["The book's activities:"]
    for book, ours in BOOK_ACTIVITIES:
        if ours is None:
            out.append(f"   {book}: {NO_LAUNCH[book]}")
        elif ours in seen:
            out.append(f"   {book}: the '{ours}' rows" +
                       (" (when a gradient is wanted, the same launch computes the output delta)"
                        if ours == "softmax" else ""))
        else:
            out.append(f"   {book}: {NOT_IN_COMMAND.get(ours, 'no launches here')}")
    if fused_first_pool:
        when = ("for criteria, outputs and gradients" if fused_in_gradients
                else "when only the criterion or outputs are wanted")
        out.append(f"   ({fused_first_pool} activation: computed in the launch of the layer before "
                   f"it, which pools as it goes, {when})")
    return out


def product_lines(backend):
    """How the products of FC, LOCAL and CONV layers are computed: float32 fused multiply-adds,
    and the steps the kernel plan put on the tensor cores (split TF32 at float32 accuracy, or one
    TF32 product with CUDA PRECISION = TF32)."""
    plan = getattr(backend, "kernels", None)
    steps = []
    if plan is not None:
        for what, layers in (("weight gradients of", plan.split_gradients),
                             ("activations of", plan.split_forward),
                             ("deltas backpropagated from", plan.split_delta)):
            if layers:
                steps.append(f"{what} " + ", ".join(plan.labels[i] for i in sorted(layers)))
    lines = ["Products of FC, LOCAL and CONV layers: float32 fused multiply-adds"
             + (", except on the tensor cores" if steps else "")]
    if steps and plan.tf32:
        lines.append("Tensor cores (one TF32 product, CUDA PRECISION = TF32: operands rounded to "
                     "11 significant bits, sums in stages of 16 terms): " + "; ".join(steps))
    elif steps:
        lines.append("Tensor cores (split TF32: float32 accuracy, sums in stages of 16 terms): "
                     + "; ".join(steps))
    return lines


def _report(backend):
    try:
        return backend.rt.report()
    except Exception as e:              # the report is informative only
        return [f"(device report failed: {e})"]


def _kernel_line(backend):
    """What building the kernels took this process: modules read from the cache or compiled,
    and the seconds (Runtime.build_line)."""
    line = getattr(backend.rt, "build_line", None)
    return [line()] if line is not None else []


def _devices_report(backends, indices):
    """Each device's own lines, then the devices not used (a device report starts with a
    'Device N:' line and lists the others after its own)."""
    lines, unused = [], []
    for k, part in enumerate(backends):
        report = _report(part)
        own = 1 + next((j for j, ln in enumerate(report[1:]) if ln.startswith("Device ")),
                       len(report) - 1)
        lines += report[:own]
        if k == 0:
            unused = [ln for ln in report[own:]
                      if not any(ln.startswith(f"Device {i}:") for i in indices)]
    return lines + unused


def _device_lines(backend, weight_uploads_before):
    """Memory allocations, weight copies, the time table and the book's activities of one
    device's backend."""
    lines = list(backend.last_allocation or ["(no data set was bound to the device)"])
    lines.append(f"Weight copies to the device: {backend.weight_uploads - weight_uploads_before}")
    points = getattr(backend.timer, "line_points", 0)
    if points:
        lines.append(f"Line search trial points formed on the device (x + t d, no copy): {points}")
    return lines


def _time_lines(backend):
    timer = backend.timer
    # an untimed evaluation replayed from a graph runs its gradients beside the deltas
    lines = [f"Evaluations timed: {timer.evaluations} (all launches of a timed evaluation on "
             "one stream, so that each activity has a time of its own)"]
    timings = backend.timings()
    lines += timing_lines(timings, timer.total_seconds)
    lines.append("")
    fused = None
    if getattr(backend, "fused_pool", False) and len(backend.labels) > 2:
        fused = backend.labels[1]
    return lines + book_activity_lines(timings, fused,
                                       getattr(backend, "fused_pool_gradient", False))


def cuda_log_lines(backend, arch, params, weight_uploads_before=0):
    """The four sections of one part, for what ``backend`` did since its timings were reset.

    A backend over several devices (``backend.backends``, see multi.py) gets section 1 for every
    device and, after section 2, a section per device with its memory allocations and its time;
    its ``weight_uploads`` and ``weight_uploads_before`` are then one count per device."""
    devices = getattr(backend, "backends", None)
    if devices is None:
        lines = _section("1. Device and capabilities") + _report(backend) + _kernel_line(backend)
    else:
        lines = _section("1. Devices and capabilities") + _devices_report(devices, backend.indices)
        lines += _kernel_line(devices[0])
        lines.append("Each evaluation splits the cases: "
                     + ", ".join(f"device {i} cases {a + 1} to {b}" for i, a, b in backend.shards)
                     + "; the partial sums are added in this order")
        if backend.minibatch_device is not None:
            lines.append(f"Mini-batch descent: every case on device {backend.minibatch_device}, "
                         f"the steps there alone")
    lines += product_lines((devices or [backend])[0])
    lines += _section("2. Architecture and training parameters")
    lines += arch.report()
    lines.append("Training parameters:")
    lines += _param_lines(backend, params)
    if devices is None:
        lines += _section("3. Device memory allocations")
        lines += _device_lines(backend, weight_uploads_before)
        lines += _section("4. Device time by layer and activity (CUDA events)")
        return lines + _time_lines(backend)
    before = weight_uploads_before or [0] * len(devices)
    cases = {i: (a, b) for i, a, b in backend.shards}
    for number, (index, part, earlier) in enumerate(zip(backend.indices, devices, before),
                                                    start=3):
        a, b = cases.get(index, (0, 0))
        what = f"cases {a + 1} to {b}" if b > a else "no cases"
        lines += _section(f"{number}. Device {index} ({what}): memory allocations and time by "
                          f"layer and activity (CUDA events)")
        lines += _device_lines(part, earlier)
        lines.append("")
        lines += _time_lines(part)
    return lines


def _title_line():
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    return f"CUDA.LOG, convnet {__version__}, {stamp}"


class CudaLog:
    """A session's CUDA.LOG: started (emptied) by the first part, appended to by every part."""

    def __init__(self, path):
        self.path = path
        self.parts = 0

    def add(self, heading, backend, arch, params, weight_uploads_before=0):
        """Append one part: ``heading`` (the command and its control-file line), then the four
        sections for what ``backend`` did since its timings were last reset; ``params``: the
        convnet.params.Params in force, its seed filled in."""
        lines = [] if self.parts else [_title_line()]
        rule = "=" * max(20, len(heading))
        lines += ["", rule, heading, rule]
        lines += cuda_log_lines(backend, arch, params, weight_uploads_before)
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        with open(self.path, "a" if self.parts else "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        self.parts += 1
        return self.path


def write_cuda_log(path, backend, arch, params):
    """Write a CUDA.LOG of one part at path (its folder is made if needed)."""
    return CudaLog(path).add("Device evaluations", backend, arch, params)
