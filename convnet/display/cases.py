"""Small pictures of single cases (a TEST's most wrong ones), one PNG each, at their own size.

Tones -1..1 map linearly to 0..255 (the readers' mapping backwards); 1 band is grey, 3 bands RGB,
and any other number of bands shows its first band in grey. Each file is written under a
temporary name and renamed into place.
"""

import os
import tempfile

import numpy as np
from PIL import Image

from ..errors import ConvnetError


def case_image(planes):
    """A Pillow image of one case's (bands, rows, cols) tones."""
    pixels = np.clip(np.rint((np.asarray(planes, dtype=np.float64) + 1.0) * 127.5), 0, 255)
    pixels = pixels.astype(np.uint8)
    if pixels.shape[0] == 3:
        return Image.fromarray(np.ascontiguousarray(np.transpose(pixels, (1, 2, 0))), "RGB")
    return Image.fromarray(np.ascontiguousarray(pixels[0]), "L")


def save_case(planes, path):
    """Write one case's picture at ``path`` (its folder made as needed)."""
    folder = os.path.dirname(os.path.abspath(path))
    temporary = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".case.", suffix=".png", dir=folder)
        with os.fdopen(fd, "wb") as f:
            case_image(planes).save(f, format="PNG")
        os.chmod(temporary, 0o666 & ~_umask())      # mkstemp's files are private
        os.replace(temporary, path)
        temporary = None
    except OSError as e:
        raise ConvnetError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        if temporary is not None:
            try:
                os.unlink(temporary)
            except OSError:
                pass
    return path


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
