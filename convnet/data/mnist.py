"""READ MNIST IMAGE / READ MNIST LABELS: IDX files, plain or gzip-compressed.

The IDX format: two zero bytes, a data-type byte (0x08 = unsigned byte, the only type MNIST uses and
the only one read here), a byte giving the number of dimensions, then each dimension as a big-endian
32-bit count, then the data. Image files are 3-dimensional (images, rows, columns; magic
0x00000803), label files 1-dimensional (magic 0x00000801). Gzip compression is recognised by the
file's first two bytes (1f 8b), not by its name. Any image size is accepted; pixels are mapped
linearly to -1..1 (0 -> -1, 255 -> +1), as the book's program does, so that zero padding is
mid-grey. There are always 10 classes (labels 0-9).

A file must hold exactly what its header describes: a shorter file is truncated, a longer one
is refused too.

Errors are ConvnetErrors that name the file in their message and carry no file or line (an IDX
file has no lines); the session adds the control file's location.
"""

import numpy as np

from ..errors import ConvnetError
from ..memory import images_bytes, require
from ._files import gunzip_if_gzip, pixel_tones, read_bytes
from .dataset import Dataset

N_CLASSES = 10
IMAGE_MAGIC = 0x00000803
LABEL_MAGIC = 0x00000801


def _parse_idx(data, path, what, ndims, magic):
    """Check the IDX header; return (dims, payload bytes)."""
    if len(data) < 4:
        raise ConvnetError(f"{what} '{path}' is too short to be an IDX file "
                           f"({len(data)} byte{'s' if len(data) != 1 else ''})")
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        hint = ""
        if found == (LABEL_MAGIC if magic == IMAGE_MAGIC else IMAGE_MAGIC):
            hint = " (this is an MNIST " + ("label" if magic == IMAGE_MAGIC else "image") + " file)"
        elif data[:2] != b"\x00\x00":
            hint = " (not an IDX file)"
        elif data[2] != 0x08:
            hint = f" (IDX data type 0x{data[2]:02x}; only unsigned bytes, 0x08, are read)"
        raise ConvnetError(f"{what} '{path}' has the wrong magic number 0x{found:08x}, "
                           f"expected 0x{magic:08x}{hint}")
    head = 4 + 4 * ndims
    if len(data) < head:
        raise ConvnetError(f"{what} '{path}' is truncated: it ends inside its header")
    dims = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(ndims)]
    need = int(np.prod(dims, dtype=np.int64))
    have = len(data) - head
    if have < need:
        raise ConvnetError(f"{what} '{path}' is truncated: its header promises "
                           f"{' x '.join(map(str, dims))} bytes ({need}) but only {have} follow")
    if have > need:
        raise ConvnetError(f"{what} '{path}' has {have - need} bytes more than its header "
                           f"({' x '.join(map(str, dims))}) describes")
    return dims, data[head:]


def read_images(path):
    """READ MNIST IMAGE: a Dataset from source "MNIST" with 10 classes and no classes yet (None)."""
    what = "MNIST image file"
    data = gunzip_if_gzip(read_bytes(path, what), path, what)
    (n_images, rows, cols), payload = _parse_idx(data, path, what, 3, IMAGE_MAGIC)
    if n_images == 0 or rows == 0 or cols == 0:
        raise ConvnetError(f"{what} '{path}' holds no pixels ({n_images} images of {rows} x "
                           f"{cols})")
    require(images_bytes(n_images, 1, rows, cols),
            f"{what} '{path}': {n_images} images of {rows} x {cols}")
    pixels = np.frombuffer(payload, dtype=np.uint8).reshape(n_images, 1, rows, cols)
    return Dataset(pixel_tones(pixels), None, N_CLASSES, "MNIST")


def read_labels(path, dataset):
    """READ MNIST LABELS: ``dataset`` (from read_images) with its classes; a new Dataset."""
    what = "MNIST label file"
    if dataset is None or dataset.source != "MNIST":
        raise ConvnetError(f"{what} '{path}': READ MNIST LABELS must follow READ MNIST IMAGE")
    data = gunzip_if_gzip(read_bytes(path, what), path, what)
    (n_labels,), payload = _parse_idx(data, path, what, 1, LABEL_MAGIC)
    if n_labels != dataset.n_cases:
        raise ConvnetError(f"{what} '{path}' holds {n_labels} labels but {dataset.n_cases} images "
                           "were read")
    labels = np.frombuffer(payload, dtype=np.uint8).astype(np.int64)
    bad = np.flatnonzero(labels >= N_CLASSES)
    if bad.size:
        first = int(bad[0])
        raise ConvnetError(f"{what} '{path}': label {labels[first]} of image {first + 1} is "
                           "outside 0-9"
                           + (f" ({bad.size} bad labels in all)" if bad.size > 1 else ""))
    return Dataset(dataset.inputs, labels, N_CLASSES, "MNIST")
