"""Statistics of a sweep: the runs of each combination of swept values, grouped, with the mean,
the sample standard deviation and a 95 % confidence interval of the mean (Student's t) of every
measure, and the best combination.

The measures are a batch row's, which come from each run's results.json: the final criterion of
the last TRAIN, its training misclassification, the first TEST after it, and the validation
checks' error where the TRAIN has them. Only the runs that ended without error count.
The best combination has the lowest mean test error when every combination has one, else the
lowest mean final criterion (as the batch page chooses its best run).
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

# (row attribute, words) of every measure
MEASURES = (("final_criterion", "final criterion"),
            ("train_misclassification", "train error %"),
            ("test_misclassification", "test error %"),
            ("validation_misclassification", "validation error %"))

# Two-sided 95 % quantiles of Student's t by degrees of freedom; between two entries the smaller
# number of degrees (a wider interval) is used, beyond the last the normal quantile.
T95 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646,
       8: 2.3060, 9: 2.2622, 10: 2.2281, 11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448,
       15: 2.1314, 16: 2.1199, 17: 2.1098, 18: 2.1009, 19: 2.0930, 20: 2.0860, 21: 2.0796,
       22: 2.0739, 23: 2.0687, 24: 2.0639, 25: 2.0595, 26: 2.0555, 27: 2.0518, 28: 2.0484,
       29: 2.0452, 30: 2.0423, 40: 2.0211, 50: 2.0086, 60: 2.0003, 80: 1.9901, 100: 1.9840,
       120: 1.9799}
Z95 = 1.9600


def t95(degrees):
    """The two-sided 95 % quantile of Student's t with ``degrees`` degrees of freedom."""
    if degrees < 1:
        raise ValueError("Student's t needs at least 1 degree of freedom")
    if degrees > max(T95):
        return Z95
    return T95[max(d for d in T95 if d <= degrees)]


@dataclass
class Stat:
    """n values: their mean, sample standard deviation and 95 % interval of the mean (None where
    one value cannot say)."""

    n: int
    mean: float
    std: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None

    @property
    def half_width(self):
        return None if self.low is None else (self.high - self.low) / 2


def describe(values):
    """The Stat of some numbers (None when there are none)."""
    x = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return None
    mean = float(x.mean())
    if x.size == 1:
        return Stat(1, mean)
    std = float(x.std(ddof=1))
    half = t95(x.size - 1) * std / math.sqrt(x.size)
    return Stat(int(x.size), mean, std, mean - half, mean + half)


@dataclass
class Group:
    """The runs of one combination of one control file: its values and the Stat of each measure
    over the runs that ended without error."""

    file: str
    values: Dict[str, str]
    rows: List = field(default_factory=list)
    stats: Dict[str, Optional[Stat]] = field(default_factory=dict)

    @property
    def ok_runs(self):
        return sum(1 for r in self.rows if r.ok)

    def label(self):
        return ", ".join(f"{k} = {v}" for k, v in self.values.items()) or "(seeds only)"


def groups(rows):
    """The combinations of the sweep rows (rows with a combination number), in order of first
    appearance; [] when no row belongs to a sweep."""
    found = {}
    for row in rows:
        if row is None or row.combination is None:
            continue
        key = (row.file, tuple(row.swept.items()))
        found.setdefault(key, Group(row.file, dict(row.swept))).rows.append(row)
    for group in found.values():
        done = [r for r in group.rows if r.ok]
        group.stats = {key: describe(getattr(r, key) for r in done) for key, _ in MEASURES}
    return list(found.values())


def best_group(found):
    """(index of the best group or None, what 'best' means in words)."""
    scored = [(i, g) for i, g in enumerate(found) if g.ok_runs]
    if scored and all(g.stats["test_misclassification"] for _, g in scored):
        key, words = "test_misclassification", "the lowest mean test error"
    else:
        key, words = "final_criterion", "the lowest mean final criterion"
    means = [(g.stats[key].mean, i) for i, g in scored if g.stats[key] is not None]
    return (min(means)[1] if means else None), words


def measures_present(found):
    """The measures some group has a value of."""
    return [(key, words) for key, words in MEASURES if any(g.stats.get(key) for g in found)]


def swept_names(found):
    """Every swept name of the groups, in the order they first appear."""
    names = []
    for g in found:
        names += [n for n in g.values if n not in names]
    return names


def group_columns(found):
    """The heading of groups.csv: the file, every swept name, runs, then each measure's mean,
    std, ci95_low and ci95_high, and best."""
    names = swept_names(found)
    head = ["file", *names, "runs", "ok_runs"]
    for key, _ in measures_present(found):
        head += [f"{key}_{part}" for part in ("mean", "std", "ci95_low", "ci95_high")]
    return head + ["best"], names


def group_records(found):
    """groups.csv's rows (lists of text, in group_columns order)."""
    head, names = group_columns(found)
    best, _ = best_group(found)
    records = []
    for i, g in enumerate(found):
        cells = [g.file, *(g.values.get(n, "") for n in names), str(len(g.rows)), str(g.ok_runs)]
        for key, _ in measures_present(found):
            s = g.stats.get(key)
            cells += ["" if s is None or v is None else format(v, ".6g")
                      for v in ((None, None, None, None) if s is None else
                                (s.mean, s.std, s.low, s.high))]
        records.append(cells + ["yes" if i == best else ""])
    return head, records


def table_lines(found):
    """The printed table of the groups: values, runs and mean +- CI half-width of each measure."""
    best, words = best_group(found)
    present = measures_present(found)
    head = ["combination", "runs"] + [w for _, w in present]
    body = []
    for i, g in enumerate(found):
        cells = [g.label() + (" (best)" if i == best else ""), f"{g.ok_runs}/{len(g.rows)}"]
        for key, _ in present:
            s = g.stats.get(key)
            cells.append("-" if s is None else f"{s.mean:.4g}" + (
                "" if s.half_width is None else f" +- {s.half_width:.2g}"))
        body.append(cells)
    widths = [max(len(r[j]) for r in [head] + body) for j in range(len(head))]
    lines = ["  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])])
             for r in [head] + body]
    return lines + [f"mean +- half-width of the 95 % interval (Student's t); best: {words}"]
