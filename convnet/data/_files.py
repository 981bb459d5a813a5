"""Reading a whole data file into memory, with errors that name it; pixel bytes to tones."""

import gzip
import zlib

import numpy as np

from ..errors import ConvnetError

GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path, what):
    """The bytes of ``path``; ``what`` names the file in messages (e.g. "MNIST image file")."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ConvnetError(f"{what} '{path}' not found") from None
    except IsADirectoryError:
        raise ConvnetError(f"{what} '{path}' is a folder, not a file") from None
    except OSError as e:
        raise ConvnetError(f"cannot read {what} '{path}': {e.strerror}") from None


def gunzip_if_gzip(data, path, what):
    """Decompress ``data`` when it starts with the gzip magic bytes (1f 8b), else return it."""
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        detail = str(e) or type(e).__name__
        raise ConvnetError(f"{what} '{path}' starts like a gzip file but cannot be "
                           f"decompressed (corrupt or truncated: {detail})") from None


def pixel_tones(pixels):
    """Bytes 0..255 to float64 tones in -1..1 (0 -> -1, 255 -> +1, linear): the book's input range,
    in which zero padding is mid-grey (ch. 1, half-width and padding)."""
    return np.asarray(pixels, dtype=np.float64) * (2.0 / 255.0) - 1.0
