"""CUDA.LOG: what the device path did, in four sections (SPEC section 5, book p.172).

    1. the device and its capabilities
    2. the architecture and the training parameters
    3. device memory allocations, the gradient partial-sum scratch and how MAX BATCH,
       MAX HID GRAD and MAX MEM GRAD split the launches
    4. device time by layer and activity, measured with CUDA events: launches, total ms and
       ms per launch; the rows add up to the measured total

``write_cuda_log(path, backend, arch, params)`` writes the file; ``cuda_log_lines`` gives its lines.
"""

import datetime
import os

from .. import __version__

# Activities in the order the table shows them; any other follows in the order first met.
ACTIVITY_ORDER = ("weight copy", "forward", "softmax", "delta", "gradient", "gradient fetch",
                  "log likelihood")

DEVICE_PARAMS = ("MAX BATCH", "MAX HID GRAD", "MAX MEM GRAD")


def _section(title):
    return ["", title, "-" * len(title)]


def _param_lines(backend, params):
    params = dict(params or {})
    out = []
    mb = backend.max_batch
    out.append(f"   MAX BATCH = {'automatic (as many cases as fit in a quarter of free device memory)' if mb is None else mb}")
    out.append(f"   MAX HID GRAD = {backend.max_hid_grad}")
    out.append(f"   MAX MEM GRAD = {backend.max_mem_grad} MB")
    for key in sorted(params):
        if key in DEVICE_PARAMS:
            continue
        value = params[key]
        if value is None:
            continue
        out.append(f"   {key} = {value}")
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


def cuda_log_lines(backend, arch, params):
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    lines = [f"CUDA.LOG, convnet {__version__}, {stamp}"]
    lines += _section("1. Device and capabilities")
    try:
        lines += backend.rt.report()
    except Exception as e:              # the report is informative only
        lines.append(f"(device report failed: {e})")
    lines.append("Products of FC, LOCAL and CONV layers: float32 fused multiply-adds")
    lines += _section("2. Architecture and training parameters")
    lines += arch.report()
    lines.append("Training parameters:")
    lines += _param_lines(backend, params)
    lines += _section("3. Device memory allocations")
    if backend.last_allocation:
        lines += backend.last_allocation
    else:
        lines.append("(no data set was bound to the device)")
    lines.append(f"Weight copies to the device: {backend.weight_uploads}")
    lines += _section("4. Device time by layer and activity (CUDA events)")
    timer = backend.timer
    lines.append(f"Evaluations timed: {timer.evaluations}")
    lines += timing_lines(backend.timings(), timer.total_seconds)
    return lines


def write_cuda_log(path, backend, arch, params):
    """Write CUDA.LOG at path (its folder is made if needed)."""
    lines = cuda_log_lines(backend, arch, params)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path
