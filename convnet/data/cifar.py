"""READ C10 IMAGE: CIFAR-10 binary batches.

A batch is a sequence of 3073-byte records: one label byte (0-9), then 3072 pixel bytes: the
1024 red values of the 32 x 32 image in row-major order, then the 1024 green, then the 1024 blue.
Pixels are mapped linearly to -1..1 (0 -> -1, 255 -> +1); images are 3 bands of 32 x 32; 10 classes.
Reading a second batch appends its images to those already read.

Errors are ConvnetErrors that name the file in their message and carry no file or line; the
session adds the control file's location.
"""

import numpy as np

from ..errors import ConvnetError
from ..memory import images_bytes, require
from ._files import pixel_tones, read_bytes
from .dataset import Dataset

RECORD = 3073
SIDE = 32
BANDS = 3
N_CLASSES = 10


def read_c10(path, existing=None):
    """Read one CIFAR-10 batch file; with ``existing`` (a C10 Dataset) append to it.

    Returns a new Dataset from source "C10".
    """
    what = "CIFAR-10 file"
    if existing is not None and existing.source != "C10":
        raise ConvnetError(f"{what} '{path}': other data is already present; "
                           "CIFAR-10 batches can only be added to CIFAR-10 data")
    data = read_bytes(path, what)
    if not data:
        raise ConvnetError(f"{what} '{path}' is empty")
    if len(data) % RECORD:
        raise ConvnetError(f"{what} '{path}' has {len(data)} bytes, not a multiple of {RECORD} "
                           f"(a record is 1 label byte and 3072 pixel bytes); "
                           f"is it truncated or not a CIFAR-10 batch?")
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD)
    labels = records[:, 0].astype(np.int64)
    bad = np.flatnonzero(labels >= N_CLASSES)
    if bad.size:
        first = int(bad[0])
        raise ConvnetError(f"{what} '{path}': record {first + 1} has label {labels[first]}, "
                           "outside 0-9"
                           + (f" ({bad.size} bad labels in all)" if bad.size > 1 else ""))
    total = records.shape[0] + (existing.n_cases if existing is not None else 0)
    require(images_bytes(total, BANDS, SIDE, SIDE), f"{what} '{path}': {total} images")
    inputs = pixel_tones(records[:, 1:].reshape(-1, BANDS, SIDE, SIDE))
    if existing is not None:
        inputs = np.concatenate([existing.inputs, inputs])
        labels = np.concatenate([existing.classes, labels])
    return Dataset(inputs, labels, N_CLASSES, "C10")
