"""Typed parameters: every ``NAME = value`` of the control language, its default and its range.

This is the one home of the parameters. The control-language registry (control.py) builds its
``NAME = value`` entries from ``PARAMETER_DEFS``; the session keeps the values a control file set
(keyed by phrase, as the logs print them) and hands everything below it a frozen :class:`Params`,
so no module below the session reads the parser or a dict of control-file phrases.

    params = Params.from_phrases(session_values)
    params.training.maxiters, params.device.max_batch, params.series.window
"""

from dataclasses import dataclass, field, fields
from typing import Any, Optional, Tuple


@dataclass(frozen=True)
class ParamDef:
    """One parameter: its phrase in control files, where it lives in :class:`Params` (group and
    attribute), the type and range of its value, its default (None: decided at run time, see
    ``default_note``) and its meaning in words for the keyword reference."""

    phrase: str
    group: str                       # "training", "device", "series", "validation", "images"
                                     # or "" (the Params itself)
    attr: str
    value_type: str                  # "int", "float", "choice" or "devices"
    meaning: str
    default: Any = None
    default_note: str = ""
    minimum: Any = None
    maximum: Any = None
    exclusive_min: bool = False
    exclusive_max: bool = False
    choices: Optional[Tuple[str, ...]] = None
    aliases: Tuple[str, ...] = ()


ANNEAL_SCALES = ("FLAT", "FANIN")
# TRAIN METHOD: the book's annealing then conjugate gradients, or mini-batch gradient descent
BOOK_METHOD_NAME = "ANNEAL CG"
# (SGD CG, ADAM CG: the mini-batch steps, then conjugate gradients from where they ended)
TRAIN_METHODS = (BOOK_METHOD_NAME, "SGD", "ADAM", "SGD CG", "ADAM CG")
LR_SCHEDULES = ("CONSTANT", "STEP", "COSINE", "ONE CYCLE")
# CUDA PRECISION: float32 accuracy (the default), or one TF32 product on the tensor cores
FLOAT32, TF32 = "FLOAT32", "TF32"
# LEARNING RATE when not set, by method (the criterion is a mean per case and class, so SGD's
# rate is about n_classes times the usual one for a mean per case; Adam's steps do not scale)
DEFAULT_LEARNING_RATES = {"SGD": 0.5, "ADAM": 0.002}

# The largest whole numbers a control file may give, so that a size, count or stride out of all
# proportion is a range error at its line in `check` and not an overflow deep in a run.
MAX_COUNT = 2**31 - 1      # cases, case numbers, iterations, records: 32-bit device indices
MAX_SIDE = 65535           # rows, columns, bands, slices, filter and pooling widths, strides
MAX_CLASSES = 1000         # classes of MAKE IMAGE (the confusion matrix has this squared)
MAX_GRID = 1000            # rows and columns of pictures in a DISPLAY grid
MAX_THREADS = 4096
MAX_SEED = 2**63 - 1

PARAMETER_DEFS = (
    ParamDef("MAX BATCH", "device", "max_batch", "int", "cases per device batch", minimum=1,
             maximum=MAX_COUNT,
             default_note="as many as fit in device memory"),
    ParamDef("MAX HID GRAD", "device", "max_hid_grad", "int",
             "hidden neurons per device gradient launch", 65535, minimum=1, maximum=65535),
    ParamDef("MAX MEM GRAD", "device", "max_mem_grad", "int",
             "megabytes of device convolution-gradient scratch", 2047, minimum=1, maximum=2047),
    ParamDef("ANNEAL ITERS", "training", "anneal_iters", "int", "annealing criterion evaluations",
             100, minimum=0, maximum=MAX_COUNT),
    ParamDef("ANNEAL RANGE", "training", "anneal_range", "float",
             "approximate range of the random starting weights, the same for every weight "
             "unless ANNEAL SCALE = FANIN", 0.1, minimum=0.0, exclusive_min=True),
    ParamDef("ANNEAL SCALE", "training", "anneal_scale", "choice",
             "FLAT (the book's meaning): every starting weight is drawn within ANNEAL RANGE; "
             "FANIN: a layer whose neurons have n inputs gets ANNEAL RANGE * sqrt(300 / n), so "
             "that every layer's net inputs start about equally spread (benchmarks/NOTES.md "
             "compares the two)", "FLAT", choices=ANNEAL_SCALES),
    ParamDef("MAXITERS", "training", "maxiters", "int", "conjugate-gradient iterations at most",
             1000, minimum=0, maximum=MAX_COUNT, aliases=("MAX ITERS",)),
    ParamDef("TOL", "training", "tol", "float",
             "convergence test of the refinement: after each conjugate-gradient iteration the "
             "relative improvement (f_before - f_after) / abs(f_before) of the criterion is "
             "compared with TOL; when it is below, the next iteration restarts along the negative "
             "gradient, and when that iteration's improvement is below TOL too, refinement ends. "
             "Refinement also ends at MAXITERS iterations, when the gradient vanishes, or when the "
             "negative gradient gives no lower point", 0.00005, minimum=0.0, exclusive_min=True),
    ParamDef("WPEN", "training", "wpen", "float", "weight penalty", 0.0, minimum=0.0),
    ParamDef("TRAIN METHOD", "training", "method", "choice",
             "how TRAIN trains: ANNEAL CG, the book's annealing then conjugate gradients on "
             "every case; SGD, annealing (ANNEAL ITERS, at least one random start) then "
             "mini-batch gradient descent with momentum; ADAM, the same with Adam's steps; SGD CG "
             "and ADAM CG, those steps and then conjugate gradients from where they ended "
             "(MAXITERS, TOL)",
             BOOK_METHOD_NAME, choices=TRAIN_METHODS),
    ParamDef("BATCH SIZE", "training", "batch_size", "int",
             "cases per mini-batch of SGD and ADAM (at most the training cases; an epoch takes "
             "whole batches of the shuffled cases, the few left over wait for a later epoch)",
             64, minimum=1, maximum=MAX_COUNT),
    ParamDef("EPOCHS", "training", "epochs", "int", "passes of SGD and ADAM over the training "
             "cases", 10, minimum=1, maximum=MAX_COUNT),
    ParamDef("LEARNING RATE", "training", "learning_rate", "float",
             "step size of SGD and ADAM at the top of the schedule", minimum=0.0,
             exclusive_min=True,
             default_note=", ".join(f"{method} {rate}"
                                    for method, rate in DEFAULT_LEARNING_RATES.items())),
    ParamDef("LR SCHEDULE", "training", "lr_schedule", "choice",
             "how the learning rate changes over the steps: CONSTANT; STEP, times LR STEP FACTOR "
             "every LR STEP EPOCHS epochs; COSINE, down to zero along a half cosine; ONE CYCLE, up "
             "from a 25th of it over the first 30 % of the steps, then down along a half cosine",
             "CONSTANT", choices=LR_SCHEDULES),
    ParamDef("LR STEP EPOCHS", "training", "lr_step_epochs", "int",
             "epochs between the learning rate's drops (LR SCHEDULE = STEP)", 10, minimum=1,
             maximum=MAX_COUNT),
    ParamDef("LR STEP FACTOR", "training", "lr_step_factor", "float",
             "what each drop multiplies the learning rate by (LR SCHEDULE = STEP)", 0.1,
             minimum=0.0, maximum=1.0, exclusive_min=True),
    ParamDef("AUGMENT SHIFT", "training", "augment_shift", "int",
             "SGD and ADAM move each training case of an epoch by a random whole number of "
             "pixels from -n to n, down and across separately, drawn anew every epoch from the "
             "run's seed (a pixel moved in from outside repeats the nearest edge pixel); 0: the "
             "cases as they are", 0, minimum=0, maximum=MAX_COUNT),
    ParamDef("AVERAGE EPOCHS", "training", "average_epochs", "int",
             "SGD and ADAM end with the mean of the weights at the ends of their last n epochs "
             "(stochastic weight averaging; all of them when there are fewer) instead of the "
             "last epoch's weights; 0: the last epoch's", 0, minimum=0, maximum=MAX_COUNT),
    ParamDef("MOMENTUM", "training", "momentum", "float",
             "SGD's momentum: the step is the gradient plus MOMENTUM times the step before", 0.9,
             minimum=0.0, maximum=1.0, exclusive_max=True),
    ParamDef("NESTEROV", "training", "nesterov", "choice",
             "YES: SGD's momentum looks ahead (Nesterov's form)", "NO", choices=("YES", "NO")),
    ParamDef("ADAM BETA1", "training", "beta1", "float",
             "ADAM's decay of its running mean of the gradient", 0.9, minimum=0.0, maximum=1.0,
             exclusive_max=True),
    ParamDef("ADAM BETA2", "training", "beta2", "float",
             "ADAM's decay of its running mean of the squared gradient", 0.999, minimum=0.0,
             maximum=1.0, exclusive_max=True),
    ParamDef("ADAM EPSILON", "training", "epsilon", "float",
             "ADAM's guard against dividing by a vanishing squared gradient", 1e-8, minimum=0.0,
             exclusive_min=True),
    ParamDef("VALIDATION INTERVAL", "validation", "interval", "int",
             "steps between validation checks during TRAIN: every n refinement iterations (or "
             "epochs of a method that counts epochs), and at the end of every phase; used when "
             "VALIDATION CASES holds cases out or TARGET ERROR is set", 1, minimum=1,
             maximum=MAX_COUNT),
    ParamDef("KEEP BEST", "validation", "keep_best", "choice",
             "YES: at the end of TRAIN restore the weights of the validation check with the "
             "lowest validation misclassification (needs VALIDATION CASES)", "NO",
             choices=("YES", "NO")),
    ParamDef("EARLY STOP", "validation", "early_stop", "int",
             "end TRAIN after this many validation checks in a row without a lower validation "
             "misclassification; 0: never (needs VALIDATION CASES when not 0)", 0, minimum=0,
             maximum=MAX_COUNT),
    ParamDef("TARGET ERROR", "validation", "target_error", "float",
             "a misclassification percent: TRAIN records the seconds and evaluations until the "
             "validation misclassification (the training one without VALIDATION CASES) first "
             "reached it", default_note="none", minimum=0.0, maximum=100.0, exclusive_min=True,
             exclusive_max=True),
    ParamDef("CUDA", "", "cuda", "choice", "use the GPU: YES, NO or AUTO", "AUTO",
             choices=("YES", "NO", "AUTO")),
    ParamDef("CUDA DEVICES", "device", "cuda_devices", "devices",
             "GPUs that share every evaluation, each with its shard of the cases",
             default_note="GPU 0 alone"),
    ParamDef("CUDA PRECISION", "device", "precision", "choice",
             "the GPU's products: FLOAT32 keeps float32 accuracy (float32 arithmetic, or split "
             "TF32 on the tensor cores); TF32 takes one tensor-core product of operands rounded "
             "to 11 significant bits wherever the tensor cores serve: faster, about 1e-3 "
             "relative error a product; the host computes in float64 either way", FLOAT32,
             choices=(FLOAT32, TF32)),
    ParamDef("THREADS", "", "threads", "int", "host threads", default_note="all cores",
             minimum=1, maximum=MAX_THREADS),
    ParamDef("RANDOM SEED", "", "seed", "int", "seed of every random choice", minimum=0,
             maximum=MAX_SEED),
    ParamDef("SERIES COLUMN", "series", "column", "int", "1-based column of the series", 1,
             minimum=1, maximum=MAX_SIDE),
    ParamDef("SERIES WINDOW", "series", "window", "int", "window length = image width", 16,
             minimum=2, maximum=MAX_SIDE),
    ParamDef("SERIES RESOLUTION", "series", "resolution", "int", "image height", 16, minimum=2,
             maximum=MAX_SIDE),
    ParamDef("SERIES SHIFT", "series", "shift", "int", "records between windows", 1, minimum=1,
             maximum=MAX_COUNT),
    ParamDef("SERIES FRAC FULL", "series", "frac_full", "float",
             "fraction of windows scaled to full height", 0.2, minimum=0.0, maximum=1.0),
    ParamDef("IMAGE ROWS", "images", "rows", "int",
             "READ IMAGES and CLASSIFY resize every image to this many rows (set IMAGE COLUMNS "
             "too)", default_note="images keep their size, which must be one for all",
             minimum=1, maximum=MAX_SIDE),
    ParamDef("IMAGE COLUMNS", "images", "cols", "int",
             "READ IMAGES and CLASSIFY resize every image to this many columns (set IMAGE ROWS "
             "too)", default_note="images keep their size, which must be one for all",
             minimum=1, maximum=MAX_SIDE),
)

# Every parameter's value before a control file sets it (None: decided at run time).
DEFAULTS = {definition.phrase: definition.default for definition in PARAMETER_DEFS}


ALL_DEVICES = "ALL"


def parse_devices(text):
    """'0,1' or 'all' (any case, blanks ignored) -> the canonical '0,1' or 'ALL'.

    Raises ValueError with a message for anything else (an empty list, a repeated device, a
    negative or non-integer index)."""
    compact = "".join(str(text).split())
    if compact.upper() == ALL_DEVICES:
        return ALL_DEVICES
    parts = compact.split(",")
    if not compact or any(not (part.isascii() and part.isdigit()) for part in parts):
        raise ValueError(f"expected device numbers separated by commas (0,1) or ALL, "
                         f"not '{text}'")
    numbers = [int(part) for part in parts]
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise ValueError(f"device {repeated[0]} is named twice in '{text}'")
    return ",".join(str(n) for n in numbers)


def _default(phrase):
    return field(default=DEFAULTS[phrase])


class _Group:
    """A group of parameters (its ``GROUP`` names it in PARAMETER_DEFS)."""

    GROUP = ""

    def phrases(self):
        """{phrase: value} of this group, in the registry's order."""
        return {definition.phrase: getattr(self, definition.attr)
                for definition in PARAMETER_DEFS if definition.group == self.GROUP}


@dataclass(frozen=True)
class TrainingParams(_Group):
    """What TRAIN reads: the method (TRAIN METHOD), annealing (ANNEAL ITERS, RANGE, SCALE),
    refinement (MAXITERS, TOL), the weight penalty (WPEN), and the mini-batch methods' settings
    (BATCH SIZE, EPOCHS, LEARNING RATE and its schedule, AVERAGE EPOCHS, AUGMENT SHIFT,
    MOMENTUM, NESTEROV, Adam's)."""

    GROUP = "training"

    anneal_iters: int = _default("ANNEAL ITERS")
    anneal_range: float = _default("ANNEAL RANGE")
    anneal_scale: str = _default("ANNEAL SCALE")
    maxiters: int = _default("MAXITERS")
    tol: float = _default("TOL")
    wpen: float = _default("WPEN")
    method: str = _default("TRAIN METHOD")
    batch_size: int = _default("BATCH SIZE")
    epochs: int = _default("EPOCHS")
    learning_rate: Optional[float] = _default("LEARNING RATE")
    lr_schedule: str = _default("LR SCHEDULE")
    lr_step_epochs: int = _default("LR STEP EPOCHS")
    lr_step_factor: float = _default("LR STEP FACTOR")
    augment_shift: int = _default("AUGMENT SHIFT")
    average_epochs: int = _default("AVERAGE EPOCHS")
    momentum: float = _default("MOMENTUM")
    nesterov: str = _default("NESTEROV")
    beta1: float = _default("ADAM BETA1")
    beta2: float = _default("ADAM BETA2")
    epsilon: float = _default("ADAM EPSILON")

    @property
    def rate(self):
        """LEARNING RATE, or the method's default when it is not set."""
        if self.learning_rate is not None:
            return float(self.learning_rate)
        return DEFAULT_LEARNING_RATES.get(self.minibatch_rule, DEFAULT_LEARNING_RATES["SGD"])

    @property
    def minibatch_rule(self):
        """SGD or ADAM: the update rule of the method's mini-batch steps (its first word)."""
        return self.method.split()[0]


@dataclass(frozen=True)
class DeviceParams(_Group):
    """What the device backend reads: MAX BATCH (None: as many as fit), MAX HID GRAD, MAX MEM
    GRAD, CUDA DEVICES (None: GPU 0 alone; else '0,1' or 'ALL') and CUDA PRECISION."""

    GROUP = "device"

    max_batch: Optional[int] = _default("MAX BATCH")
    max_hid_grad: int = _default("MAX HID GRAD")
    max_mem_grad: int = _default("MAX MEM GRAD")
    cuda_devices: Optional[str] = _default("CUDA DEVICES")
    precision: str = _default("CUDA PRECISION")


@dataclass(frozen=True)
class SeriesParams(_Group):
    """How READ SERIES images a series (the keyword settings, SERIES DIFFLOG and the like, are
    the reader's own SeriesSettings fields)."""

    GROUP = "series"

    column: int = _default("SERIES COLUMN")
    window: int = _default("SERIES WINDOW")
    resolution: int = _default("SERIES RESOLUTION")
    shift: int = _default("SERIES SHIFT")
    frac_full: float = _default("SERIES FRAC FULL")


@dataclass(frozen=True)
class ValidationParams(_Group):
    """What TRAIN's validation checks read (train/validation.py): VALIDATION INTERVAL, KEEP
    BEST, EARLY STOP and TARGET ERROR (None: no target). The held-out cases themselves are the
    data's (VALIDATION CASES)."""

    GROUP = "validation"

    interval: int = _default("VALIDATION INTERVAL")
    keep_best: str = _default("KEEP BEST")
    early_stop: int = _default("EARLY STOP")
    target_error: Optional[float] = _default("TARGET ERROR")

    @property
    def needs_held_out_cases(self):
        """Whether a setting in force means nothing without validation cases."""
        return self.keep_best == "YES" or self.early_stop > 0


@dataclass(frozen=True)
class ImageParams(_Group):
    """The size READ IMAGES and CLASSIFY resize images to (None: as read)."""

    GROUP = "images"

    rows: Optional[int] = _default("IMAGE ROWS")
    cols: Optional[int] = _default("IMAGE COLUMNS")

    @property
    def size(self):
        """(rows, cols) to resize to, or None when neither is set."""
        if self.rows is None and self.cols is None:
            return None
        if self.rows is None or self.cols is None:
            raise ValueError("set both IMAGE ROWS and IMAGE COLUMNS to resize images (only "
                             f"IMAGE {'ROWS' if self.rows else 'COLUMNS'} is set)")
        return self.rows, self.cols


_GROUPS = {"training": TrainingParams, "device": DeviceParams, "series": SeriesParams,
           "validation": ValidationParams, "images": ImageParams}


@dataclass(frozen=True)
class Params:
    """Every parameter in force, typed; made by the session with :meth:`from_phrases`."""

    training: TrainingParams = field(default_factory=TrainingParams)
    device: DeviceParams = field(default_factory=DeviceParams)
    series: SeriesParams = field(default_factory=SeriesParams)
    validation: ValidationParams = field(default_factory=ValidationParams)
    images: ImageParams = field(default_factory=ImageParams)
    cuda: str = _default("CUDA")
    threads: Optional[int] = _default("THREADS")
    seed: Optional[int] = _default("RANDOM SEED")

    @classmethod
    def from_phrases(cls, values):
        """Params from {phrase: value} (a control file's settings); a phrase not given, or given
        as None, takes its default. Unknown phrases are an error (a registry mistake)."""
        unknown = set(values) - set(DEFAULTS)
        if unknown:
            raise KeyError(f"not a parameter: {', '.join(sorted(unknown))}")
        groups = {name: {} for name in _GROUPS}
        top = {}
        for definition in PARAMETER_DEFS:
            value = values.get(definition.phrase)
            value = definition.default if value is None else value
            (groups[definition.group] if definition.group else top)[definition.attr] = value
        return cls(**{name: _GROUPS[name](**given) for name, given in groups.items()}, **top)

    def phrases(self):
        """{phrase: value} in the registry's order: what the logs and results.json print."""
        return {definition.phrase: getattr(getattr(self, definition.group) if definition.group
                                           else self, definition.attr)
                for definition in PARAMETER_DEFS}

    def replace(self, **changes):
        """A copy with some phrases changed: ``params.replace(**{"CUDA DEVICES": "0,1"})``."""
        return Params.from_phrases(dict(self.phrases(), **changes))


def group_fields(group):
    """The attribute names of one group, for tests and docs."""
    return [f.name for f in fields(_GROUPS[group])]
