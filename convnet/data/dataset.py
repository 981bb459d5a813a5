"""The data set every command works on: images, classes and, for a series, how it was imaged.

A :class:`Dataset` is immutable in practice: every operation (``keep_cases``, reading MNIST labels)
returns a new one.

Errors
------
Every problem is a :class:`convnet.errors.ConvnetError`. Problems with the data set as a whole
(a case range outside the data, a test set that does not fit the model) carry no file or line:
the session that runs the control file fills in the control line that asked for them.
"""

import numpy as np

from ..errors import ConvnetError

# Where a data set came from: the command that made or read it.
SOURCES = ("MAKE", "MNIST", "C10", "SERIES", "IMAGES")

_SOURCE_WORDS = {"MAKE": "MAKE IMAGE", "MNIST": "MNIST", "C10": "CIFAR-10", "SERIES": "series",
                 "IMAGES": "image folder"}


def _plural(count, word):
    return f"{count} {word}" + ("" if count == 1 else "s")


def _names(names, count, what):
    """A tuple of ``count`` strings, or None."""
    if names is None:
        return None
    names = tuple(str(n) for n in names)
    if len(names) != count:
        raise ValueError(f"{what} must have {count} entries, not {len(names)}")
    return names


def class_label(class_names, number):
    """How a 0-based class is shown: its name, else its number from 1 (the book's)."""
    return class_names[number] if class_names else str(number + 1)


class Dataset:
    """Images with their classes.

    Parameters
    ----------
    inputs : array (n_cases, bands, rows, cols)
        Stored as float64, C-contiguous.
    classes : array (n_cases,) of 0-based class numbers, or None
        None only for MNIST images whose labels have not been read yet.
    n_classes : int
        Number of classes (at least 2).
    source : str
        Where the data came from: ``"MAKE"``, ``"MNIST"``, ``"C10"``, ``"SERIES"`` or ``"IMAGES"``.
    series : convnet.data.series.SeriesInfo or None
        For series data: the scale and class thresholds these images were made with. This is what
        a trained model keeps (and SAVE MODEL stores) to image and class a test series.
    series_cases : convnet.data.series.SeriesCases or None
        For series data: the windows and targets behind the images, so that KEEP CASES can image
        the kept cases again with a scale and thresholds computed from them alone.
    class_names : tuple of str, or None
        The name of each class (an image folder's class subfolders); None means the classes are
        known by their numbers alone (shown 1..n_classes in the logs).
    case_names : tuple of str, or None
        Where each case came from (an image folder's files), or None.

    ``held_out`` is (first, last), 1-based and inclusive, of the cases VALIDATION CASES holds out
    of training, or None; every operation that makes a new data set ends the hold-out.
    """

    def __init__(self, inputs, classes, n_classes, source, series=None, series_cases=None,
                 class_names=None, case_names=None):
        if source not in SOURCES:
            raise ValueError(f"unknown data source {source!r}")
        inputs = np.ascontiguousarray(inputs, dtype=np.float64)
        if inputs.ndim != 4:
            raise ValueError(f"inputs must be (cases, bands, rows, cols), not shape {inputs.shape}")
        n_classes = int(n_classes)
        if n_classes < 2:
            raise ValueError(f"at least 2 classes are needed, not {n_classes}")
        if classes is not None:
            classes = np.ascontiguousarray(classes, dtype=np.int64)
            if classes.shape != (inputs.shape[0],):
                raise ValueError(f"classes must have shape ({inputs.shape[0]},), "
                                 f"not {classes.shape}")
            if classes.size and (classes.min() < 0 or classes.max() >= n_classes):
                raise ValueError(f"classes must lie in 0..{n_classes - 1}")
        self.inputs = inputs
        self.classes = classes
        self.n_classes = n_classes
        self.source = source
        self.series = series
        self.series_cases = series_cases
        self.class_names = _names(class_names, n_classes, "class_names")
        self.case_names = _names(case_names, inputs.shape[0], "case_names")
        self.held_out = None

    # ------------------------------------------------------------------ shape
    @property
    def n_cases(self):
        """Number of images."""
        return self.inputs.shape[0]

    @property
    def bands(self):
        """Bands (colour planes) per image: 1 for gray and series images, 3 for CIFAR-10."""
        return self.inputs.shape[1]

    @property
    def rows(self):
        """Image height."""
        return self.inputs.shape[2]

    @property
    def cols(self):
        """Image width."""
        return self.inputs.shape[3]

    @property
    def targets(self):
        """For series data, each case's target value (the thing its class comes from); else None."""
        return None if self.series_cases is None else self.series_cases.targets

    def describe(self):
        """One line for the log, e.g. ``MNIST: 3000 cases of 28 x 28, 1 band, 10 classes``."""
        labels = "" if self.classes is not None else " (labels not read yet)"
        return (f"{_SOURCE_WORDS[self.source]}: {_plural(self.n_cases, 'case')} of {self.rows} x "
                f"{self.cols}, {_plural(self.bands, 'band')}, {self.n_classes} classes{labels}")

    def __repr__(self):
        return f"<Dataset {self.describe()}>"

    # ------------------------------------------------------------------ operations
    def keep_cases(self, first, last):
        """Return a new data set holding cases ``first``..``last`` (1-based, inclusive).

        For series data the scale q and the class thresholds are computed again from the kept
        cases, and the kept windows are imaged and classed with them, unless the images were made
        with a trained model's scale and thresholds (a test series): those are kept as they are.
        """
        first, last = self._case_range("KEEP CASES", first, last)
        if self.source == "MNIST" and self.classes is None:
            raise ConvnetError(f"KEEP CASES {first} {last}: read the MNIST labels first "
                               "(READ MNIST LABELS), then keep cases")
        if self.series_cases is not None:
            cases = self.series_cases.subset(first - 1, last)
            scaling = None if cases.own_scaling else self.series
            inputs, classes, info = cases.imaged(scaling)
            return Dataset(inputs, classes, info.n_classes, self.source, info, cases)
        classes = None if self.classes is None else self.classes[first - 1:last].copy()
        cases = None if self.case_names is None else self.case_names[first - 1:last]
        return Dataset(self.inputs[first - 1:last].copy(), classes, self.n_classes, self.source,
                       self.series, None, self.class_names, cases)

    def _case_range(self, command, first, last):
        """(first, last) as ints, refused (naming ``command``) unless 1 <= first <= last <= cases."""
        first, last = int(first), int(last)
        if first < 1 or last < first or last > self.n_cases:
            raise ConvnetError(
                f"{command} {first} {last}: the data has {_plural(self.n_cases, 'case')}, "
                f"so the range must lie within 1..{self.n_cases} with First <= Last")
        return first, last

    def hold_out(self, first, last):
        """A data set of these same cases with cases ``first``..``last`` (1-based, inclusive)
        held out for validation: at least one case must remain to train on."""
        first, last = self._case_range("VALIDATION CASES", first, last)
        if last - first + 1 >= self.n_cases:
            raise ConvnetError(f"VALIDATION CASES {first} {last} holds out all "
                               f"{_plural(self.n_cases, 'case')}: none would be left to train on")
        held = Dataset(self.inputs, self.classes, self.n_classes, self.source, self.series,
                       self.series_cases, self.class_names, self.case_names)
        held.held_out = (first, last)
        return held

    def split_held_out(self):
        """(training cases, validation cases) as two data sets: the cases outside ``held_out``
        and those inside it, each in its order (validation None when nothing is held out)."""
        if self.held_out is None:
            return self, None
        first, last = self.held_out
        inside = np.zeros(self.n_cases, dtype=bool)
        inside[first - 1:last] = True
        return self._cases(~inside), self._cases(inside)

    def _cases(self, mask):
        classes = None if self.classes is None else self.classes[mask]
        cases = None if self.case_names is None else \
            tuple(name for name, kept in zip(self.case_names, mask) if kept)
        return Dataset(self.inputs[mask], classes, self.n_classes, self.source, self.series, None,
                       self.class_names, cases)

    def check_matches(self, rows, cols, bands, n_classes):
        """Raise ConvnetError unless these images fit a model made for the given shape and classes.

        Used before testing a trained (or loaded) model on the current data.
        """
        mine = (self.rows, self.cols, self.bands, self.n_classes)
        theirs = (int(rows), int(cols), int(bands), int(n_classes))
        if mine == theirs:
            return
        differ = []
        if mine[:2] != theirs[:2]:
            differ.append(f"images are {self.rows} x {self.cols}, the model's are {rows} x {cols}")
        if mine[2] != theirs[2]:
            differ.append(f"images have {_plural(self.bands, 'band')}, the model's "
                          f"{_plural(int(bands), 'band')}")
        if mine[3] != theirs[3]:
            differ.append(f"data has {self.n_classes} classes, the model {n_classes}")
        raise ConvnetError("the data does not fit the trained model: " + "; ".join(differ))
