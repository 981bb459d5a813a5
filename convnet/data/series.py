"""READ SERIES: a univariate time series turned into images by a moving window (SPEC 2.2).

Reading
    One observation per line. Fields are separated by blanks, tabs or commas: a comma with blanks
    around it is one separator, and so is a run of blanks, so ``1, 2,3 4`` has four fields while
    ``1,,3`` has three (the second empty). Blank lines are skipped. With SERIES HEADER the file's
    first line is skipped. The value is taken from column SERIES COLUMN (1-based); other columns
    may hold anything (dates, names).

Transform (SERIES RAWDATA | RAWLOG | DIFFDATA | DIFFLOG)
    RAWDATA: the values; RAWLOG: their natural logs; DIFFDATA: each value minus the one before;
    DIFFLOG: each log minus the log before. A differenced series is one value shorter.

Cases
    Window placements start at the first value and advance by SERIES SHIFT. A placement is a case
    only when a value follows its window (the target needs it), so a transformed series of L values
    gives (L - WINDOW - 1) // SHIFT + 1 cases; values left over at the end by a SHIFT above 1 are
    not used.

Target
    The value right after the window. With SERIES TARGET DIFF on a raw series (RAWDATA, RAWLOG) it
    is that value minus the window's last value. A differenced series is already made of
    differences, so there TARGET DIFF changes nothing (the target is the next difference).

Classes (0-based here; the manual's class 1 is our 0)
    Thresholds t_1 <= t_2 ...: ZERO uses (0), MEDIAN the median of the targets, THIRDS their 1/3 and
    2/3 quantiles. A case's class is the number of thresholds its target exceeds, so a target equal
    to a threshold goes to the lower class (ZERO: 0 = target <= 0, 1 = target > 0).

Scale
    Each window's range (max - min) is computed; q is the (1 - FRAC FULL) quantile of the ranges.
    Quantiles (q, the median, the thirds) interpolate linearly between order statistics (position
    p * (n - 1) in the sorted values, as numpy.quantile does by default).

Image (RESOLUTION rows by WINDOW columns, 1 band)
    A window is drawn on a vertical span of max(q, its own range), centred on its mid-range, so the
    span runs from lo = (max + min) / 2 - span / 2 to lo + span. The span is cut into RESOLUTION
    equal bands; a value v falls in band floor((v - lo) * RESOLUTION / span), the top value in the
    highest band. Band 0 is the bottom row of the image (row index RESOLUTION - 1), so higher
    values are higher in the picture. Column 0 lights its value's band; every later column lights
    the bands from the previous value's band to its own, both included, so the path is connected.
    Path pixels are -1.0, the rest +1.0 (the book draws the path black on white; the readers'
    range is -1..1 and -1 is shown black). When the span is zero (a flat window and q = 0) the path is
    drawn in band RESOLUTION // 2.

Scale and thresholds travel with the data (:class:`SeriesInfo`, ``Dataset.series``; a flat dict of
numbers and strings through ``to_dict`` / ``from_dict`` for a saved model). They are computed from
the cases present, again after KEEP CASES. When a trained model's SeriesInfo is
given (a test series read after CLEAR), the images and classes are made with it instead, and KEEP
CASES then keeps it too.

Errors
    Problems tied to a line of the series file (a non-numeric or missing field, the log of a
    non-positive value) are ConvnetErrors with ``file`` = the series file and ``line`` = its line
    number. Problems with the file as a whole (missing, empty, too short for the window) and bad
    settings carry no file or line, and name the series file in the message; the session adds the
    control file's location.
"""

import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ConvnetError
from ..memory import require, series_bytes
from ._files import read_bytes
from .dataset import Dataset

TRANSFORMS = ("RAWDATA", "RAWLOG", "DIFFDATA", "DIFFLOG")
CLASS_MODES = ("ZERO", "MEDIAN", "THIRDS")
N_CLASSES = {"ZERO": 2, "MEDIAN": 2, "THIRDS": 3}

SERIES_INFO_VERSION = 1
PATH_TONE, BACKGROUND_TONE = -1.0, 1.0       # black path on white, as the book draws it

_SPLIT = re.compile(r"\s*,\s*|\s+")


@dataclass
class SeriesSettings:
    """The SERIES settings in force for one READ SERIES (defaults of SPEC 2.2)."""

    column: int = 1              # SERIES COLUMN, 1-based
    window: int = 16             # SERIES WINDOW, image width
    resolution: int = 16         # SERIES RESOLUTION, image height
    shift: int = 1               # SERIES SHIFT
    transform: str = "RAWDATA"   # SERIES RAWDATA | RAWLOG | DIFFDATA | DIFFLOG
    frac_full: float = 0.2       # SERIES FRAC FULL
    target_diff: bool = False    # SERIES TARGET DIFF (True) | TARGET NO DIFF (False)
    class_mode: str = "ZERO"     # SERIES CLASS ZERO | MEDIAN | THIRDS
    header: bool = False         # SERIES HEADER (True) | NO HEADER (False)

    @property
    def differenced(self):
        """True for DIFFDATA and DIFFLOG."""
        return self.transform in ("DIFFDATA", "DIFFLOG")

    @property
    def effective_target_diff(self):
        """Whether the target is a difference taken here (only on a raw series)."""
        return bool(self.target_diff) and not self.differenced

    @property
    def n_classes(self):
        """2 for ZERO and MEDIAN, 3 for THIRDS."""
        return N_CLASSES[self.class_mode]

    def validate(self):
        """Raise ConvnetError for a setting outside its range."""
        checks = [
            ("SERIES COLUMN", self.column, 1), ("SERIES WINDOW", self.window, 2),
            ("SERIES RESOLUTION", self.resolution, 2), ("SERIES SHIFT", self.shift, 1),
        ]
        for name, value, least in checks:
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < least:
                raise ConvnetError(f"{name} must be a whole number of at least {least}, "
                                   f"not {value!r}")
        try:
            frac = float(self.frac_full)
        except (TypeError, ValueError):
            frac = float("nan")
        if not 0.0 <= frac <= 1.0:
            raise ConvnetError(f"SERIES FRAC FULL must lie in 0..1, not {self.frac_full!r}")
        if self.transform not in TRANSFORMS:
            raise ConvnetError(f"unknown series transform {self.transform!r} "
                               f"(one of {', '.join(TRANSFORMS)})")
        if self.class_mode not in CLASS_MODES:
            raise ConvnetError(f"unknown SERIES CLASS {self.class_mode!r} "
                               f"(one of {', '.join(CLASS_MODES)})")


@dataclass
class SeriesInfo:
    """How a series was imaged and classed: what a trained model keeps and SAVE MODEL stores.

    q is the scale (the window range drawn on the full image height); thresholds are the class
    boundaries (ascending; a target above k of them is in class k). n_cases is the number of cases
    they were computed from (for information).
    """

    transform: str
    target_diff: bool            # as applied: True only for a raw series with TARGET DIFF
    class_mode: str
    window: int
    resolution: int
    frac_full: float
    q: float
    thresholds: tuple
    n_cases: int

    @property
    def n_classes(self):
        """Number of classes: one more than the number of thresholds."""
        return len(self.thresholds) + 1

    def to_dict(self):
        """A flat dict of numbers and strings (for SAVE MODEL); inverse of :meth:`from_dict`."""
        table = {
            "version": SERIES_INFO_VERSION,
            "transform": self.transform,
            "target": "DIFF" if self.target_diff else "NO DIFF",
            "class_mode": self.class_mode,
            "window": int(self.window),
            "resolution": int(self.resolution),
            "frac_full": float(self.frac_full),
            "q": float(self.q),
            "n_thresholds": len(self.thresholds),
            "n_cases": int(self.n_cases),
        }
        for k, t in enumerate(self.thresholds, start=1):
            table[f"threshold_{k}"] = float(t)
        return table

    @classmethod
    def from_dict(cls, table):
        """Rebuild from :meth:`to_dict`'s output (ConvnetError when something is missing or bad).

        The field-by-field form (``dataclasses.asdict``: ``target_diff`` a bool, ``thresholds`` a
        list) is accepted too.
        """
        if not isinstance(table, dict):
            raise ConvnetError(f"the saved series information is not a table of values: {table!r}")
        if "version" not in table and "thresholds" in table and "target_diff" in table:
            table = cls._from_fields(table)
        def get(key, value_type):
            if key not in table:
                raise ConvnetError(f"the saved series information has no '{key}'")
            value = table[key]
            try:
                if value_type is str:
                    if not isinstance(value, str):
                        raise ValueError
                    return value
                if value_type is int:
                    if isinstance(value, bool) or int(value) != value:
                        raise ValueError
                    return int(value)
                out = float(value)
                if not math.isfinite(out):
                    raise ValueError
                return out
            except (TypeError, ValueError):
                raise ConvnetError(f"the saved series information has a bad '{key}': {value!r}") \
                    from None

        version = get("version", int)
        if version != SERIES_INFO_VERSION:
            raise ConvnetError(f"the saved series information is version {version}; "
                               f"this program reads version {SERIES_INFO_VERSION}")
        transform, target, mode = get("transform", str), get("target", str), get("class_mode", str)
        if transform not in TRANSFORMS:
            raise ConvnetError(f"the saved series information has an unknown transform "
                               f"{transform!r}")
        if target not in ("DIFF", "NO DIFF"):
            raise ConvnetError(f"the saved series information has an unknown target {target!r}")
        if mode not in CLASS_MODES:
            raise ConvnetError(f"the saved series information has an unknown class mode {mode!r}")
        n_thr = get("n_thresholds", int)
        if n_thr != N_CLASSES[mode] - 1:
            raise ConvnetError(f"the saved series information has {n_thr} thresholds "
                               f"for CLASS {mode}")
        thresholds = tuple(get(f"threshold_{k}", float) for k in range(1, n_thr + 1))
        return cls(transform=transform, target_diff=(target == "DIFF"), class_mode=mode,
                   window=get("window", int), resolution=get("resolution", int),
                   frac_full=get("frac_full", float), q=get("q", float), thresholds=thresholds,
                   n_cases=get("n_cases", int))


    @staticmethod
    def _from_fields(table):
        """The field-by-field form turned into the :meth:`to_dict` form."""
        thresholds, target_diff = table["thresholds"], table["target_diff"]
        if not isinstance(thresholds, (list, tuple)) or not isinstance(target_diff, bool):
            raise ConvnetError("the saved series information has a bad 'thresholds' or "
                               "'target_diff'")
        flat = {k: v for k, v in table.items() if k not in ("thresholds", "target_diff")}
        flat.update(version=SERIES_INFO_VERSION, target="DIFF" if target_diff else "NO DIFF",
                    n_thresholds=len(thresholds))
        flat.update({f"threshold_{k}": t for k, t in enumerate(thresholds, start=1)})
        return flat


@dataclass
class SeriesCases:
    """The windows and targets behind a series data set (kept so KEEP CASES can image them again).

    windows: (n, WINDOW) float64; targets: (n,) float64; lines: (n,) the series-file line of each
    case's target value; own_scaling: False when the images were made with a given SeriesInfo.
    """

    windows: np.ndarray
    targets: np.ndarray
    lines: np.ndarray
    settings: SeriesSettings
    path: str
    own_scaling: bool = True

    def subset(self, start, stop):
        """Cases start..stop-1 (0-based, Python slice)."""
        return SeriesCases(self.windows[start:stop].copy(), self.targets[start:stop].copy(),
                           self.lines[start:stop].copy(), self.settings, self.path,
                           self.own_scaling)

    def imaged(self, scaling=None):
        """Images, classes and SeriesInfo of these cases (see :func:`image_cases`)."""
        return image_cases(self, scaling)


# ---------------------------------------------------------------------------------- reading
def _read_text(path):
    return read_bytes(path, "series file").decode("utf-8", errors="replace")


def split_fields(text):
    """Split one line into fields on blanks, tabs and commas (see the module notes)."""
    text = text.strip()
    if not text:
        return []
    return _SPLIT.split(text)


def read_values(path, column, header=False, log=False):
    """The numbers in ``column`` (1-based) of the series file, and the line number of each.

    With ``log`` the natural log of each value is returned (a non-positive value is an error
    naming its line).
    """
    text = _read_text(path)
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.splitlines()
    values, numbers = [], []
    for number, line in enumerate(lines, start=1):
        if header and number == 1:
            continue
        fields = split_fields(line)
        if not fields:
            continue
        if len(fields) < column:
            raise ConvnetError(f"this line has {len(fields)} field{'s' if len(fields) != 1 else ''}"
                               f" but SERIES COLUMN is {column}", path, number)
        field = fields[column - 1]
        try:
            value = float(field)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value):
            if not field:
                msg = f"empty field in column {column}"
            elif value is not None:
                msg = f"value '{field}' in column {column} is not a finite number"
            else:
                msg = f"non-numeric value '{field}' in column {column}"
            if number == 1 and not header:
                msg += " (if the file starts with a header line, use SERIES HEADER)"
            raise ConvnetError(msg, path, number)
        if log:
            if value <= 0.0:
                raise ConvnetError(f"cannot take the log of {field} (column {column}): "
                                   "RAWLOG and DIFFLOG need positive values", path, number)
            value = math.log(value)
        values.append(value)
        numbers.append(number)
    return np.array(values, dtype=np.float64), np.array(numbers, dtype=np.int64)


def make_cases(values, lines, settings, path):
    """Transform the values and cut them into windows and targets (a SeriesCases)."""
    if settings.differenced:
        series = np.diff(values)
        lines = lines[1:]
    else:
        series = values
    window, shift = settings.window, settings.shift
    length = series.size
    if length < window + 1:
        after = " after differencing" if settings.differenced else ""
        raise ConvnetError(
            f"series file '{path}': {length} value{'s' if length != 1 else ''}{after} is too short "
            f"for SERIES WINDOW = {window} (a window needs {window} values and one more for its "
            "target)")
    n_windows = (length - window - 1) // shift + 1
    starts = np.arange(n_windows) * shift
    windows = series[starts[:, None] + np.arange(window)[None, :]]
    nxt = series[starts + window]
    if settings.effective_target_diff:
        targets = nxt - series[starts + window - 1]
    else:
        targets = nxt.copy()
    return SeriesCases(np.ascontiguousarray(windows), targets, lines[starts + window], settings,
                       path)


# ---------------------------------------------------------------------------------- imaging
def compute_scaling(cases):
    """The scale q and the class thresholds computed from these cases (a SeriesInfo)."""
    settings = cases.settings
    ranges = cases.windows.max(axis=1) - cases.windows.min(axis=1)
    scale = float(np.quantile(ranges, 1.0 - float(settings.frac_full)))
    if settings.class_mode == "ZERO":
        thresholds = (0.0,)
    elif settings.class_mode == "MEDIAN":
        thresholds = (float(np.quantile(cases.targets, 0.5)),)
    else:
        thresholds = tuple(float(t) for t in np.quantile(cases.targets, [1.0 / 3.0, 2.0 / 3.0]))
    return SeriesInfo(transform=settings.transform, target_diff=settings.effective_target_diff,
                      class_mode=settings.class_mode, window=settings.window,
                      resolution=settings.resolution,
                      frac_full=float(settings.frac_full), q=scale, thresholds=thresholds,
                      n_cases=cases.targets.size)


def window_bands(windows, scale, resolution):
    """Band (0 = bottom) of every value of every window: an int array shaped like ``windows``."""
    mx = windows.max(axis=1)
    mn = windows.min(axis=1)
    span = np.maximum(mx - mn, scale)
    lo = 0.5 * (mx + mn) - 0.5 * span
    flat = span <= 0.0
    safe = np.where(flat, 1.0, span)
    pos = np.floor((windows - lo[:, None]) * resolution / safe[:, None])
    pos[flat] = resolution // 2
    return np.clip(pos, 0, resolution - 1).astype(np.int64)


def image_windows(windows, scale, resolution):
    """Draw windows (n, width) as images (n, 1, resolution, width): path -1.0, background
    +1.0 (the scale q: see the module notes)."""
    windows = np.asarray(windows, dtype=np.float64)
    n_windows, width = windows.shape
    bands = window_bands(windows, scale, resolution)
    below = np.empty_like(bands)
    above = np.empty_like(bands)
    below[:, 0] = above[:, 0] = bands[:, 0]
    below[:, 1:] = np.minimum(bands[:, :-1], bands[:, 1:])
    above[:, 1:] = np.maximum(bands[:, :-1], bands[:, 1:])
    levels = np.arange(resolution)[None, :, None]                     # (1, r, 1)
    lit = (levels >= below[:, None, :]) & (levels <= above[:, None, :])  # (n, r, width), band order
    images = np.where(lit[:, ::-1, :], PATH_TONE, BACKGROUND_TONE)    # top row = highest band
    return images.reshape(n_windows, 1, resolution, width)


def classify(targets, thresholds):
    """Class of each target: the number of thresholds it exceeds (int64, 0-based)."""
    thr = np.asarray(thresholds, dtype=np.float64)
    return np.searchsorted(thr, np.asarray(targets, dtype=np.float64), side="left").astype(np.int64)


def image_cases(cases, scaling=None):
    """Images, classes and SeriesInfo of these cases (scale and thresholds from them, or given)."""
    info = compute_scaling(cases) if scaling is None else scaling
    inputs = image_windows(cases.windows, info.q, cases.settings.resolution)
    classes = classify(cases.targets, info.thresholds)
    return inputs, classes, info


def _check_scaling(scaling, settings, path):
    words = []
    if scaling.transform != settings.transform:
        words.append(f"SERIES {scaling.transform} (here {settings.transform})")
    if scaling.target_diff != settings.effective_target_diff:
        was = "DIFF" if scaling.target_diff else "NO DIFF"
        now = "DIFF" if settings.effective_target_diff else "NO DIFF"
        words.append(f"SERIES TARGET {was} (here {now})")
    if scaling.class_mode != settings.class_mode:
        words.append(f"SERIES CLASS {scaling.class_mode} (here {settings.class_mode})")
    if words:
        raise ConvnetError(
            f"series file '{path}': the trained model's series scale and thresholds were made with "
            + ", ".join(words) + "; use the same SERIES settings to image data for this model")


def read_series(path, settings=None, scaling=None):
    """READ SERIES: read a series file and return its images as a Dataset from source "SERIES".

    ``settings`` is a SeriesSettings (defaults when None). ``scaling`` is a trained model's
    SeriesInfo (or its dict form, as SAVE MODEL stores it): when given, the images and classes are made with its scale and thresholds instead
    of ones computed from these cases. The Dataset's ``series`` is the SeriesInfo used and its
    ``series_cases`` the windows and targets.
    """
    settings = SeriesSettings() if settings is None else settings
    settings.validate()
    if isinstance(scaling, dict):
        scaling = SeriesInfo.from_dict(scaling)
    if scaling is not None:
        _check_scaling(scaling, settings, path)
    values, lines = read_values(path, settings.column, settings.header,
                                log=settings.transform in ("RAWLOG", "DIFFLOG"))
    if values.size == 0:
        raise ConvnetError(f"series file '{path}' holds no values"
                           + (" after its header line" if settings.header else ""))
    cases = make_cases(values, lines, settings, path)
    cases.own_scaling = scaling is None
    n_cases = cases.targets.size
    require(series_bytes(n_cases, settings.resolution, settings.window),
            f"series file '{path}': {n_cases} images of {settings.resolution} rows "
            "(SERIES RESOLUTION) x "
            f"{settings.window} columns")
    inputs, classes, info = image_cases(cases, scaling)
    return Dataset(inputs, classes, info.n_classes, "SERIES", series=info, series_cases=cases)
