"""The host timing table in CONVNET.LOG after each TRAIN (the host counterpart of CUDA.LOG's).

``format_timing_table(timings)`` takes what ``backend.timings()`` returns, a list of
``(layer label, activity, calls, total seconds)``, and gives the table's lines: one row per layer,
and for each activity (forward, delta, gradient, then any other in the order first met) the number
of calls, the total milliseconds and the milliseconds per call. An empty list gives no lines.

Example (two activity groups shown)::

    Host timing by layer and activity (calls, total ms summed over threads, ms per call)
                                      -- forward --                    -- delta --
    Layer                         calls    total ms   ms/call     calls    total ms   ms/call
    Layer 1 (convolutional)          42     118.205    2.8144        41      95.000    2.3171
    Output (SoftMax)                 42       3.000    0.0714                               -
    Total                            84     121.205    1.4429        41      95.000    2.3171
    Total timed: 216.205 ms
"""

KNOWN_ACTIVITIES = ("forward", "delta", "gradient")

TITLE = "Host timing by layer and activity (calls, total ms summed over threads, ms per call)"

_CELL = 32          # width of one activity's column group: calls, total ms, ms per call
_HEAD = f"{'calls':>8} {'total ms':>11} {'ms/call':>9}"


def _cell(calls, seconds):
    if calls is None:
        return " " * (_CELL - 1) + "-"
    ms = seconds * 1000.0
    per = ms / calls if calls else 0.0
    return f"{calls:>8d} {ms:>11.3f} {per:>9.4f}"


def format_timing_table(timings):
    """Lines of the host timing table (see the module docstring); [] when there is nothing timed."""
    rows = {}            # label -> {activity: [calls, seconds]}, in first-met order
    activities = []
    for label, activity, calls, seconds in timings or ():
        activity = str(activity)
        if activity not in activities:
            activities.append(activity)
        cell = rows.setdefault(str(label), {}).setdefault(activity, [0, 0.0])
        cell[0] += int(calls)
        cell[1] += float(seconds)
    if not rows:
        return []
    ordered = [a for a in KNOWN_ACTIVITIES if a in activities]
    ordered += [a for a in activities if a not in KNOWN_ACTIVITIES]
    label_width = max(24, max(len(label) for label in rows) + 2, len("Total") + 2)
    lines = [TITLE,
             " " * label_width + "".join(("-- " + a + " --").center(_CELL) for a in ordered),
             "Layer".ljust(label_width) + "".join(_HEAD.rjust(_CELL) for _ in ordered)]
    totals = {a: [0, 0.0] for a in ordered}
    for label, cells in rows.items():
        parts = []
        for a in ordered:
            if a in cells:
                calls, seconds = cells[a]
                totals[a][0] += calls
                totals[a][1] += seconds
                parts.append(_cell(calls, seconds))
            else:
                parts.append(_cell(None, 0.0))
        lines.append(label.ljust(label_width) + "".join(p.rjust(_CELL) for p in parts))
    lines.append("Total".ljust(label_width)
                 + "".join(_cell(*totals[a]).rjust(_CELL) for a in ordered))
    seconds = sum(t[1] for t in totals.values())
    lines.append(f"Total timed: {seconds * 1000.0:.3f} ms")
    return [line.rstrip() for line in lines]
