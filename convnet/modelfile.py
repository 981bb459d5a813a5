"""SAVE MODEL / LOAD MODEL: a small, versioned, pickle-free binary file (docs/MODEL_FORMAT.md).

Layout, all numbers little-endian:

    offset  size  content
    0       8     magic b"CONVNETM"
    8       4     format version, uint32 (this module writes and reads version 1)
    12      4     header length H in bytes, uint32
    16      H     header: UTF-8 JSON object (architecture, image size, classes, class names when
                  the model has them, series info, extras)
    16+H    8     number of weights N, uint64
    24+H    8*N   the weights, float64, the book's host order
    24+H+8N 4     CRC-32 (zlib) of every byte before it, uint32

The file is written to a temporary file in the destination folder, flushed to disk and then renamed
over the destination, so a crash leaves either the old file or the new one, never half of one.
Every problem reading a file (missing, truncated, not a model file, unknown version, damaged,
inconsistent) raises ConvnetError naming the file.
"""

import dataclasses
import datetime
import json
import math
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, NamedTuple, Optional, Tuple

import numpy as np

from ._version import __version__
from .architecture import Architecture
from .atomic import write_atomically
from .errors import ConvnetError

MAGIC = b"CONVNETM"
FORMAT_VERSION = 1
_HEAD = struct.Struct("<8sII")      # magic, version, header length
_COUNT = struct.Struct("<Q")
_CRC = struct.Struct("<I")
MAX_HEADER = 64 * 1024 * 1024


@dataclass
class SavedModel:
    """Everything a model file holds.

    arch: the Architecture (layers, image size, bands, classes); weights: 1-D float64 in host order;
    series: the time-series imaging and class thresholds the model was trained with, or None;
    extra: any other JSON values stored by the saver; header: the whole decoded JSON header;
    class_names: the name of each class (a tuple of n_classes strings), or None when the classes
    are known by number only (files saved without names, and every file older than names).
    """

    arch: Architecture
    weights: np.ndarray
    series: Optional[Dict[str, Any]] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    header: Dict[str, Any] = field(default_factory=dict)
    class_names: Optional[Tuple[str, ...]] = None


def _jsonable(value):
    """Turn series info / extras into plain JSON values (objects with a to_dict() method, dataclasses,
    numpy scalars and arrays too)."""
    if callable(getattr(value, "to_dict", None)):
        value = value.to_dict()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}             # JSON has no inf / nan
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in a model file")


def _from_json(value):
    """Undo the inf / nan encoding of _jsonable."""
    if isinstance(value, dict):
        if set(value) == {"float"} and isinstance(value["float"], str):
            return float(value["float"])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def encode_model(arch, weights, series_info=None, extra=None, class_names=None):
    """The bytes of a model file (see the module notes); ``class_names`` (n_classes strings) are
    stored only when given, so a model without names has the header it always had."""
    weights = np.ascontiguousarray(weights, dtype="<f8").reshape(-1)
    if weights.size != arch.n_weights:
        raise ValueError(f"{weights.size} weights for a model of {arch.n_weights}")
    header = {
        "format": "convnet model",
        "program_version": __version__,
        "saved": datetime.datetime.now().isoformat(timespec="seconds"),
        "rows": arch.rows, "cols": arch.cols, "bands": arch.bands, "n_classes": arch.n_classes,
        "layers": arch.control_lines(),
        "n_weights": int(arch.n_weights),
        "series": _jsonable(series_info) if series_info is not None else None,
        "extra": _jsonable(extra) if extra is not None else {},
    }
    if class_names is not None:
        if len(class_names) != arch.n_classes:
            raise ValueError(f"{len(class_names)} class names for {arch.n_classes} classes")
        header["class_names"] = [str(name) for name in class_names]
    head = json.dumps(header, indent=1, allow_nan=False).encode("utf-8")
    body = (_HEAD.pack(MAGIC, FORMAT_VERSION, len(head)) + head + _COUNT.pack(weights.size)
            + weights.tobytes())
    return body + _CRC.pack(zlib.crc32(body) & 0xFFFFFFFF)


def save_model(path, model, series_info=None, extra=None, class_names=None):
    """Write ``model`` (anything with .arch and .weights) to ``path`` atomically.

    series_info: the series scaling and class thresholds (a dict or dataclass of JSON-like values,
    numpy values allowed) or None; extra: a dict of other JSON-like values to keep (e.g. training
    results); class_names: the name of each class, or None. Raises ConvnetError naming the file when
    it cannot be written.
    """
    write_atomically(path, encode_model(model.arch, model.weights, series_info, extra,
                                         class_names), what="model file")


def decode_model(data, path="<model>"):
    """Parse the bytes of a model file into a SavedModel; ConvnetError (naming ``path``) if bad."""
    def bad(msg):
        return ConvnetError(msg, file=path)

    if len(data) < len(MAGIC) or data[:len(MAGIC)] != MAGIC:
        raise bad("not a convnet model file (it does not start with the model file signature)")
    if len(data) < _HEAD.size:
        raise bad("the model file is truncated")
    _, version, head_len = _HEAD.unpack_from(data, 0)
    if version != FORMAT_VERSION:
        raise bad(f"model file format version {version} is not supported (this convnet reads "
                  f"version {FORMAT_VERSION})")
    if head_len > MAX_HEADER:
        raise bad("the model file is damaged (impossible header length)")
    pos = _HEAD.size + head_len
    if len(data) < pos + _COUNT.size:
        raise bad("the model file is truncated")
    (n_weights,) = _COUNT.unpack_from(data, pos)
    pos += _COUNT.size
    expected = pos + 8 * n_weights + _CRC.size
    if len(data) < expected:
        raise bad("the model file is truncated")
    if len(data) > expected:
        raise bad("the model file has extra bytes after its end (damaged)")
    (crc,) = _CRC.unpack_from(data, expected - _CRC.size)
    if zlib.crc32(data[:expected - _CRC.size]) & 0xFFFFFFFF != crc:
        raise bad("the model file is damaged (checksum mismatch)")
    try:
        header = json.loads(data[_HEAD.size:_HEAD.size + head_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise bad("the model file is damaged (unreadable header)") from None
    if not isinstance(header, dict):
        raise bad("the model file is damaged (header is not an object)")
    try:
        rows, cols, bands, n_classes = (int(header[k]) for k in ("rows", "cols", "bands", "n_classes"))
        layers = header["layers"]
        if not isinstance(layers, list) or not all(isinstance(s, str) for s in layers):
            raise TypeError
        stated = int(header["n_weights"])
    except (KeyError, TypeError, ValueError):
        raise bad("the model file's header lacks the architecture or image size") from None
    try:
        arch = Architecture.from_lines(layers, rows, cols, bands, n_classes)
    except ConvnetError as e:
        raise bad(f"the model file holds an impossible architecture: {e.message}") from None
    if not (stated == n_weights == arch.n_weights):
        raise bad(f"the model file is inconsistent: its architecture has {arch.n_weights} weights, "
                  f"the header says {stated} and the file holds {n_weights}")
    start = _HEAD.size + head_len + _COUNT.size
    weights = np.frombuffer(data, dtype="<f8", count=n_weights, offset=start).astype(np.float64)
    if not np.all(np.isfinite(weights)):
        raise bad("the model file holds weights that are not finite numbers")
    series = header.get("series")
    extra = header.get("extra") or {}
    return SavedModel(arch, weights, _from_json(series) if series is not None else None,
                      _from_json(extra), header, _class_names(header, arch.n_classes, bad))


def _class_names(header, n_classes, bad):
    """The header's class names as a tuple, None when it has none; ``bad`` makes the error."""
    names = header.get("class_names")
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad("the model file is damaged (class_names is not a list of names)")
    if len(names) != n_classes:
        raise bad(f"the model file is inconsistent: {len(names)} class names for "
                  f"{n_classes} classes")
    return tuple(names)


def read_model(path):
    """Read a model file into a SavedModel (ConvnetError naming the file on any problem)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ConvnetError("the model file does not exist", file=path) from None
    except OSError as e:
        raise ConvnetError(f"cannot read the model file: {e.strerror or e}", file=path) from None
    return decode_model(data, path)


class LoadedModel(NamedTuple):
    """What LOAD MODEL needs: unpacks as (arch, weights, series) or reads as attributes."""

    arch: Architecture
    weights: np.ndarray
    series: Optional[Dict[str, Any]]


def load_model(path):
    """Read a model file: returns LoadedModel(arch, weights, series dict or None)."""
    saved = read_model(path)
    return LoadedModel(saved.arch, saved.weights, saved.series)


def model_location(filename, beside, in_out, pending=False):
    """(path, which place) of the model file LOAD MODEL names: ``beside`` the control file first,
    then ``in_out``, the run's output folder (where SAVE MODEL writes). ``pending``: a check that
    knows a SAVE MODEL earlier in the session will write it. ConvnetError naming both places when
    it is in neither."""
    if os.path.isabs(filename):
        return beside, "as named"
    if os.path.exists(beside):
        return beside, "beside the control file"
    if os.path.exists(in_out):
        return in_out, "in the output folder"
    if not pending:
        raise ConvnetError(f"model file '{filename}' not found: looked for {beside} (beside the "
                           f"control file) and {in_out} (the output folder, where SAVE MODEL "
                           "writes)")
    return beside, "beside the control file"
