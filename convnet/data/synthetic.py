"""MAKE IMAGE: random-tone images for trying out a model and its speed.

Tones are uniform in [-1, 1) (the readers' range); classes are drawn uniformly from 0..classes-1. The generator is
used in this order: all tones first (cases, bands, rows, cols in C order), then all classes, so a
seeded generator gives the same data every time.
"""

from ..errors import ConvnetError
from .dataset import Dataset


def make_image(rows, cols, bands, n_classes, n_cases, rng):
    """A Dataset from source "MAKE": ``n_cases`` random images of rows x cols x bands, random classes.

    ``rng`` is a numpy.random.Generator.
    """
    for name, value, least in (("rows", rows, 1), ("columns", cols, 1), ("bands", bands, 1),
                               ("classes", n_classes, 2), ("cases", n_cases, 1)):
        if int(value) != value or value < least:
            raise ConvnetError(f"MAKE IMAGE: {name} must be a whole number of at least {least}, "
                               f"not {value}")
    inputs = rng.random((int(n_cases), int(bands), int(rows), int(cols))) * 2.0 - 1.0
    classes = rng.integers(0, int(n_classes), size=int(n_cases))
    return Dataset(inputs, classes, int(n_classes), "MAKE")
