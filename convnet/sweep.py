"""Sweeps: a control file that names values to try (``SWEEP NAME = v1, v2, ...``) and seeds per
combination (``SWEEP SEEDS = n``) stands for the whole grid of its values times its seeds.

A SWEEP of a parameter's name sets that parameter in each run (the SWEEP line becomes
``NAME = value`` at its own place, so line numbers stay those of the file); a SWEEP of any other
name defines a placeholder, and ``$NAME`` in a later line takes the run's value (plain text
substitution, inside file names too). Combinations are numbered from 1 in the order of the
SWEEP lines, the last one changing fastest. ``convnet batch`` runs every combination with every
seed; ``convnet run FILE --sweep-run N`` runs combination N alone.

Refused at their line: an empty list, a name swept twice, a placeholder used without a SWEEP,
a placeholder swept but never used, a swept parameter that another line also sets, SWEEP SEEDS
beside a RANDOM SEED line, and more than MAX_RUNS runs unless allowed (--allow-large-sweep).
"""

import itertools
import re
from dataclasses import dataclass, field
from typing import List, Optional

from .control import parse_line, parse_lines, read_control_lines, swept_parameter
from .errors import ConvnetError

MAX_RUNS = 10_000
PLACEHOLDER = re.compile(r"\$([A-Za-z_]\w*)")
LARGE_FLAG = "--allow-large-sweep"
# the commands expansion consumes: a session never receives them
EXPANDED_COMMANDS = frozenset({"SWEEP", "SWEEP SEEDS"})


@dataclass
class Axis:
    """One SWEEP line: the name (a parameter's canonical name or a placeholder), its values as
    written, whether it sets a parameter, and its line number."""

    name: str
    values: List[str]
    parameter: bool
    line: int


@dataclass
class Sweep:
    """The sweep of one control file: its axes, seeds per combination and its lines."""

    name: str
    lines: List[str]
    axes: List[Axis] = field(default_factory=list)
    seeds: int = 1
    seeds_line: Optional[int] = None

    @property
    def combinations(self):
        count = 1
        for axis in self.axes:
            count *= len(axis.values)
        return count

    @property
    def runs(self):
        return self.combinations * self.seeds

    def values(self, number):
        """{name: value} of combination ``number`` (1-based)."""
        words = list(itertools.product(*(a.values for a in self.axes)))[number - 1]
        return dict(zip((a.name for a in self.axes), words))

    def describe(self):
        """``6 combinations x 3 seeds = 18 runs``."""
        return (f"{self.combinations} combination{'s' if self.combinations != 1 else ''} x "
                f"{self.seeds} seed{'s' if self.seeds != 1 else ''} = {self.runs} run"
                f"{'s' if self.runs != 1 else ''}")


def values_text(values):
    """``WPEN = 0.001, WIDTH = 16``."""
    return ", ".join(f"{name} = {value}" for name, value in values.items())


def _is_sweep_line(text):
    words = text.split(None, 1)
    return bool(words) and words[0].upper() == "SWEEP"


def read_sweep(lines, name, allow_large=False):
    """The Sweep of a control file's lines, or None when it has no SWEEP line."""
    sweep = Sweep(name, list(lines))
    if not any(_is_sweep_line(t) for t in lines):
        _check_uses(sweep)          # a $NAME in a file that sweeps nothing has no value
        return None
    for number, text in enumerate(lines, start=1):
        if _is_sweep_line(text):
            _add(sweep, parse_line(text, name, number), number)
    _check_uses(sweep)
    if sweep.runs > MAX_RUNS and not allow_large:
        last = max([a.line for a in sweep.axes] + [sweep.seeds_line or 0])
        raise ConvnetError(f"this sweep makes {sweep.runs:,} runs ({sweep.describe()}), more "
                           f"than {MAX_RUNS:,}; add {LARGE_FLAG} to run it", name, last)
    return sweep


def _add(sweep, cmd, number):
    def err(message):
        return ConvnetError(message, sweep.name, number)
    if cmd.name == "SWEEP SEEDS":
        if sweep.seeds_line is not None:
            raise err(f"SWEEP SEEDS is given twice (first at line {sweep.seeds_line})")
        sweep.seeds, sweep.seeds_line = cmd.args["count"], number
        return
    name = cmd.args["name"]
    earlier = next((a for a in sweep.axes if a.name == name), None)
    if earlier is not None:
        raise err(f"SWEEP {name} is given twice (first at line {earlier.line})")
    sweep.axes.append(Axis(name, cmd.args["values"], cmd.args["parameter"], number))


def _code(text):
    """A line without its comment (a line that starts with //)."""
    return "" if text.strip().startswith("//") else text


def _check_uses(sweep):
    """Every placeholder used is swept, every one swept is used, no swept parameter is also set
    by a line of its own, and no RANDOM SEED beside SWEEP SEEDS."""
    placeholders = {a.name: a for a in sweep.axes if not a.parameter}
    parameters = {a.name: a for a in sweep.axes if a.parameter}
    used = set()
    for number, text in enumerate(sweep.lines, start=1):
        if _is_sweep_line(text):
            continue
        for match in PLACEHOLDER.finditer(_code(text)):
            key = match.group(1).upper()
            if key not in placeholders:
                raise ConvnetError(f"the placeholder ${match.group(1)} has no value: add a line "
                                   f"SWEEP {key} = value, value, ... before it", sweep.name, number)
            used.add(key)
        set_here = swept_parameter(_code(text))
        if set_here in parameters:
            raise ConvnetError(f"{set_here} is swept at line {parameters[set_here].line}; this "
                               "line would set it again (remove one of them)", sweep.name, number)
        if set_here == "RANDOM SEED" and sweep.seeds_line is not None:
            raise ConvnetError(f"RANDOM SEED would give every seed of SWEEP SEEDS (line "
                               f"{sweep.seeds_line}) the same runs (remove one of them)",
                               sweep.name, number)
    for axis in placeholders.values():
        if axis.name not in used:
            raise ConvnetError(f"SWEEP {axis.name}: no line uses ${axis.name} (and it is not a "
                               "parameter's name)", sweep.name, axis.line)


def expand(sweep, number):
    """The lines of combination ``number``: SWEEP lines of parameters set them, other SWEEP lines
    become comments, and every $NAME takes its value."""
    values = sweep.values(number)
    by_key = {name.upper(): value for name, value in values.items()}
    lines = []
    for text in sweep.lines:
        if _is_sweep_line(text):
            axis = next((a for a in sweep.axes if a.line == len(lines) + 1), None)
            if axis is not None and axis.parameter:
                lines.append(f"{axis.name} = {values[axis.name]}")
            else:
                lines.append(f"// {text.strip()}" + (f"  (this run: {values[axis.name]})"
                                                      if axis is not None else ""))
        else:
            lines.append(PLACEHOLDER.sub(lambda m: by_key[m.group(1).upper()], text)
                         if _code(text) else text)
    return lines


def parse_control(path, display_name=None, sweep_run=None):
    """A control file's commands and lines, ready to run: a sweep file's combination
    ``sweep_run`` (refused without one), any other file as written. Returns (commands, lines,
    (sweep, values) or None)."""
    name = display_name or path
    lines = read_control_lines(path, name)
    sweep = read_sweep(lines, name, allow_large=True)
    if sweep is None:
        return parse_lines(lines, path, name), lines, None
    _check_run_number(sweep, sweep_run)
    expanded = expand(sweep, sweep_run)
    return parse_lines(expanded, path, name), expanded, (sweep, sweep.values(sweep_run))


def _check_run_number(sweep, sweep_run):
    if sweep_run is None:
        first = min([a.line for a in sweep.axes] + [sweep.seeds_line or len(sweep.lines)])
        raise ConvnetError("this file sweeps values: `convnet batch FILE --out DIR` runs every "
                           "combination, `convnet run FILE --sweep-run N` runs combination N "
                           f"(1 to {sweep.combinations})", sweep.name, first)
    if not 1 <= sweep_run <= sweep.combinations:
        raise ConvnetError(f"--sweep-run {sweep_run}: the file has combinations 1 to "
                           f"{sweep.combinations}", sweep.name)


def check_sweep_run(path, sweep_run):
    """Refuse a sweep file without a combination to run (or with one it does not have)."""
    sweep = sweep_of(path, allow_large=True)
    if sweep is not None:
        _check_run_number(sweep, sweep_run)


def sweep_of(path, display_name=None, allow_large=False):
    """The Sweep of a control file (None when it sweeps nothing)."""
    name = display_name or path
    return read_sweep(read_control_lines(path, name), name, allow_large)


def run_seeds(sweep, seed):
    """The seeds each combination runs with: ``seed`` (default 1) and the next ones."""
    first = 1 if seed is None else seed
    return [first + k for k in range(sweep.seeds)]


def folder_name(values, seed):
    """A run's folder: ``WPEN=0.001_WIDTH=16_seed=2`` (filesystem-safe)."""
    parts = [f"{name}={value}" for name, value in values.items()] + [f"seed={seed}"]
    return re.sub(r"[^\w.+=-]+", "-", "_".join(p.replace(" ", "-") for p in parts))


def wants_gpu(path, device, sweep_run=None):
    """Whether a session is a CUDA session: --device decides, else the file's CUDA = setting
    (None: AUTO, a GPU if the cluster has one)."""
    if device != "auto":
        return device == "cuda"
    try:
        commands, _, _ = parse_control(path, sweep_run=sweep_run)
    except ConvnetError:
        return False
    values = {c.args["value"] for c in commands if c.name == "SET" and c.args["name"] == "CUDA"}
    if "YES" in values:
        return True
    if values == {"NO"}:
        return False
    return None
