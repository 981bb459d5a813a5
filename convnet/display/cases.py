"""Small pictures of single cases (a TEST's most wrong ones), one PNG each, at their own size.

Tones -1..1 map linearly to 0..255 (the readers' mapping backwards); 1 band is grey, 3 bands RGB,
and any other number of bands shows its first band in grey. Each file is written under a
temporary name and renamed into place.
"""

import io

import numpy as np
from PIL import Image

from ..atomic import write_atomically


def case_image(planes):
    """A Pillow image of one case's (bands, rows, cols) tones."""
    pixels = np.clip(np.rint((np.asarray(planes, dtype=np.float64) + 1.0) * 127.5), 0, 255)
    pixels = pixels.astype(np.uint8)
    if pixels.shape[0] == 3:
        return Image.fromarray(np.ascontiguousarray(np.transpose(pixels, (1, 2, 0))), "RGB")
    return Image.fromarray(np.ascontiguousarray(pixels[0]), "L")


def save_case(planes, path):
    """Write one case's picture at ``path`` (its folder made as needed)."""
    picture = io.BytesIO()
    case_image(planes).save(picture, format="PNG")
    # a picture is cheap to draw again: no flush to disk for each of a TEST's worst cases
    write_atomically(path, picture.getvalue(), what="case picture", sync=False)
    return path
