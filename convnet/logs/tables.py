"""What ``convnet log summary`` and ``convnet log compare`` print, from logs read back.

The logs are ``reader.LogFile`` objects (``reader.read_log``); this module only lays out their
runs: one row per TRAIN / TEST, or two TRAINs' facts and layers side by side.
"""

from ..errors import ConvnetError

def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def _first_criterion(run):
    """The criterion of a TRAIN's first phase (annealing in the book's method)."""
    return run.phases[0].criterion if run.phases else None


def _last_steps(run):
    """The steps of a TRAIN's last phase (refinement iterations in the book's method)."""
    return run.phases[-1].last_step if run.phases else None


def _status(run):
    if run.error:
        return "error: " + run.error
    if run.interrupted:
        return "interrupted"
    if run.misclassification is None:
        return "incomplete"
    return "ok"


def _table(head, body, right):
    widths = [max(len(head[j]), *(len(b[j]) for b in body)) if body else len(head[j])
              for j in range(len(head))]
    out = []
    for cells in [head] + body:
        parts = [c.rjust(w) if right[j] else c.ljust(w)
                 for j, (c, w) in enumerate(zip(cells, widths))]
        out.append("  ".join(parts).rstrip())
    return out


def summary_lines(logs):
    """``convnet log summary``: one row per TRAIN / TEST of every log, in order."""
    head = ["log", "run", "command", "weights", "device", "phase 1 crit", "final crit", "steps",
            "misclass %", "seconds", "status"]
    right = [False, True, False, True, False, True, True, True, True, True, False]
    body = []
    for log in logs:
        for run in log.runs:
            body.append([log.path, str(run.index), run.command, _fmt(run.weights, "d"),
                         run.device or "-", _fmt(_first_criterion(run), ".6g"),
                         _fmt(run.final_criterion, ".6g"),
                         _fmt(_last_steps(run), "d") if run.command == "TRAIN" else "-",
                         _fmt(run.misclassification, ".4f"), _fmt(run.seconds, ".2f"),
                         _status(run)])
        if not log.runs:
            body.append([log.path, "-", "-", "-", "-", "-", "-", "-", "-", "-",
                         "error: " + log.error if log.error else "no TRAIN or TEST"])
    return _table(head, body, right)


def pick_train(log, number=None):
    """A log's TRAIN number ``number`` (1-based among its TRAINs; default the last) and the TEST
    that follows it (or None)."""
    trains = log.trains
    if not trains:
        raise ConvnetError("the log records no TRAIN", log.path)
    if number is None:
        train = trains[-1]
    elif 1 <= number <= len(trains):
        train = trains[number - 1]
    else:
        raise ConvnetError(f"the log has {len(trains)} TRAIN{'s' if len(trains) != 1 else ''}, "
                           f"so there is no TRAIN {number}", log.path)
    test = None
    for run in log.runs:
        if run.index > train.index:
            if run.command == "TRAIN":
                break
            if run.command == "TEST":
                test = run
                break
    return train, test


def compare_lines(log_a, log_b, number_a=None, number_b=None):
    """``convnet log compare``: architecture and results of two runs side by side."""
    (ta, sa), (tb, sb) = pick_train(log_a, number_a), pick_train(log_b, number_b)

    names = [p.name for p in ta.phases] + [p.name for p in tb.phases if ta.phase(p.name) is None]

    def facts(train, test):
        p = train.params
        return [
            ("input", "-" if train.rows is None
             else f"{train.rows} x {train.cols} x {train.bands}, {train.n_classes} classes"),
            ("weights", _fmt(train.weights, "d")),
            ("device", train.device or "-"),
            ("ANNEAL ITERS", p.get("ANNEAL ITERS", "-")),
            ("ANNEAL RANGE", p.get("ANNEAL RANGE", "-")),
            ("ANNEAL SCALE", p.get("ANNEAL SCALE", "-")),
            ("MAXITERS", p.get("MAXITERS", "-")),
            ("TOL", p.get("TOL", "-")),
            ("WPEN", p.get("WPEN", "-")),
        ] + _phase_facts(train, names) + [
            ("final criterion", _fmt(train.final_criterion, ".6g")),
            ("train misclassification %", _fmt(train.misclassification, ".4f")),
            ("test misclassification %", _fmt(test.misclassification, ".4f") if test else "-"),
            ("train seconds", _fmt(train.seconds, ".2f")),
            ("status", _status(train)),
        ]

    fa, fb = facts(ta, sa), facts(tb, sb)
    return _side_by_side(log_a, log_b, ta, tb, fa, fb)


def _phase_facts(train, names):
    """(label, value) of each phase named: its criterion and its steps."""
    out = []
    for name in names:
        phase = train.phase(name)
        unit = phase.unit if phase is not None else "step"
        out.append((f"{name} criterion", _fmt(phase and phase.criterion, ".6g")))
        out.append((f"{name} {unit}s", _fmt(phase and phase.last_step, "d")))
    return out


def _side_by_side(log_a, log_b, ta, tb, fa, fb):
    """The lines of ``convnet log compare`` from the two runs' facts and layers."""
    label_w = max(len(k) for k, _ in fa)
    arch_a, arch_b = ta.layers, tb.layers
    col_w = max([len(log_a.path) + 12, 24] + [len(v) for _, v in fa]
                + [len(line) for line in arch_a])
    out = [f"{'':{label_w}}   {('A: ' + log_a.path + f' (TRAIN {ta.index})'):{col_w}}  "
           f"B: {log_b.path} (TRAIN {tb.index})"]
    for (k, va), (_, vb) in zip(fa, fb):
        mark = "   " if va == vb else " * "
        out.append(f"{k:{label_w}}{mark}{va:{col_w}}  {vb}".rstrip())
    out.append("")
    for i in range(max(len(arch_a), len(arch_b))):
        la = arch_a[i] if i < len(arch_a) else ""
        lb = arch_b[i] if i < len(arch_b) else ""
        mark = "   " if la == lb else " * "
        label = "layers" if i == 0 else ""
        out.append(f"{label:{label_w}}{mark}{la:{col_w}}  {lb}".rstrip())
    out.append("")
    out.append("(* marks a difference)")
    return out
