"""Reading a whole data file into memory, with errors that name it; pixel bytes to tones."""

import zlib

import numpy as np

from ..errors import ConvnetError
from ..memory import require

GZIP_MAGIC = b"\x1f\x8b"
GUNZIP_PIECE = 64 << 20      # bytes decompressed between two memory checks
READ_PIECE = 64 << 20        # bytes read between two memory checks


def read_bytes(path, what):
    """The bytes of ``path``; ``what`` names the file in messages (e.g. "MNIST image file")."""
    try:
        with open(path, "rb") as f:
            pieces, total = [], 0
            while True:                  # in pieces: a device such as /dev/zero never ends
                piece = f.read(READ_PIECE)
                if not piece:
                    return b"".join(pieces)
                total += len(piece)
                require(2 * total, f"{what} '{path}' (at least {total} bytes)")
                pieces.append(piece)
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
        return _gunzip_within_memory(data, path, what)
    except (OSError, EOFError, zlib.error) as e:
        detail = str(e) or type(e).__name__
        raise ConvnetError(f"{what} '{path}' starts like a gzip file but cannot be "
                           f"decompressed (corrupt or truncated: {detail})") from None


def _gunzip_within_memory(data, path, what):
    """gzip.decompress in pieces, refusing (ConvnetError) once the output would not fit in memory:
    a small file can expand a thousandfold."""
    pieces, total, rest = [], 0, data
    while rest:
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending = rest
        while not member.eof:
            piece = member.decompress(pending, GUNZIP_PIECE)
            pending = member.unconsumed_tail
            total += len(piece)
            require(2 * total, f"{what} '{path}' decompressed (at least {total} bytes)")
            pieces.append(piece)
            if not piece and not pending:
                raise EOFError("the compressed data ends before its end-of-stream marker")
        rest = member.unused_data
        if rest and not rest.startswith(GZIP_MAGIC):
            if rest.strip(b"\0"):           # zero padding after the last member is allowed
                raise OSError("data after the last gzip member is not a gzip member")
            break
    return b"".join(pieces)


def pixel_tones(pixels):
    """Bytes 0..255 to float64 tones in -1..1 (0 -> -1, 255 -> +1, linear): the book's input range,
    in which zero padding is mid-grey (ch. 1, half-width and padding)."""
    return np.asarray(pixels, dtype=np.float64) * (2.0 / 255.0) - 1.0
