"""READ IMAGES and the images CLASSIFY reads: PNG, JPEG, BMP and GIF files through Pillow.

A folder of training images holds one subfolder per class; the class names are the subfolder
names, sorted (class 1 is the first). The number of bands comes from the first image (the first
file, by name, of the first class): a grey
image ('L', '1', 16-bit grey, a palette of greys) gives 1 band, anything else 3 (RGB). Every other
image is converted to those bands (a colour image to grey by luminance, a grey image to three equal
planes). Transparent parts are laid over black. Pixels map linearly to -1..1 (0 -> -1, 255 -> +1),
as the MNIST and CIFAR-10 readers do.

A photo's EXIF orientation is applied (the picture as it stands). Every image must have the size
of the first unless a size is given (IMAGE ROWS and IMAGE
COLUMNS), to which every image is resized (bilinear). Files whose names do not end in an image
suffix are skipped (and counted), as are names starting with a dot; a file with an image suffix
that cannot be read is an error naming it.

The cases are ordered so that every class is spread evenly over the whole set: the k-th of a
class's n files (sorted by name) sits at (k + 1/2) / n of the way through, ties going to the
lower class. So any range of cases that KEEP CASES keeps holds the classes in about their overall
shares.

Errors are ConvnetErrors naming the file or folder; the session adds the control file's line.
"""

import glob
import os
from contextlib import contextmanager

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import ConvnetError
from ..memory import images_bytes, require
from ._files import pixel_tones
from .dataset import Dataset

SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif")
GREY_MODES = ("1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L")
ORIENTATION_TAG = 0x0112                   # EXIF: how a camera held the picture
TURNED_A_QUARTER = (5, 6, 7, 8)            # orientations whose rows are the picture's columns
PATTERN_CHARACTERS = "*?["


def is_image_name(name):
    """Whether a file name has one of the image suffixes (any case) and is not hidden."""
    return not name.startswith(".") and name.lower().endswith(SUFFIXES)


def image_bands(image):
    """1 for a grey image (a palette of greys included), else 3."""
    if image.mode in GREY_MODES:
        return 1
    if image.mode == "P":
        rgb = np.asarray(image.convert("RGB"))
        return 1 if np.all(rgb[..., 0] == rgb[..., 1]) and np.all(rgb[..., 1] == rgb[..., 2]) \
            else 3
    return 3


def _flattened(image):
    """The image without transparency (laid over black), in 'L', 'I' or 'RGB'."""
    if image.mode == "P":
        image = image.convert("RGBA")
    if image.mode in ("LA", "La", "RGBA", "RGBa", "PA"):
        rgba = image.convert("RGBA")
        black = Image.new("RGBA", rgba.size, (0, 0, 0, 255))
        image = Image.alpha_composite(black, rgba).convert("RGB")
    if image.mode.startswith("I;16"):
        image = image.convert("I")
    return image


def _planes(image, bands):
    """(bands, rows, cols) tones in -1..1."""
    image = _flattened(image)
    if image.mode == "I":                       # 16-bit grey
        grey = np.asarray(image, dtype=np.float64) / 65535.0 * 255.0
        planes = grey[None] if bands == 1 else np.repeat(grey[None], 3, axis=0)
        return pixel_tones(planes)
    pixels = np.asarray(image.convert("L" if bands == 1 else "RGB"))
    planes = pixels[None] if bands == 1 else np.transpose(pixels, (2, 0, 1))
    return pixel_tones(planes)


def read_image(path, bands=None, size=None):
    """One image file as (bands, rows, cols) tones; ``bands`` None: the image's own (1 or 3);
    ``size`` (rows, cols) resizes it. ConvnetError naming the file when it cannot be read."""
    with _opened(path) as image:
        image.load()
        image = ImageOps.exif_transpose(image)      # a photo as its camera meant it
        bands = bands or image_bands(image)
        if size is not None and (image.height, image.width) != tuple(size):
            image = _flattened(image).resize((size[1], size[0]), Image.Resampling.BILINEAR)
        return _planes(image, bands)


@contextmanager
def _opened(path):
    """The image file opened, and closed after use; any failure to read it, then or while it is
    used, is a ConvnetError naming the file."""
    try:
        with Image.open(path) as image:
            yield image
    except FileNotFoundError:
        raise ConvnetError(f"{path}: no such image file") from None
    except UnidentifiedImageError:
        raise ConvnetError(f"{path}: not an image Pillow can read (PNG, JPEG, BMP or GIF)") \
            from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise ConvnetError(f"{path}: cannot read the image ({_reason(e)})") from None


def _reason(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def image_size(path):
    """(rows, cols) of an image file from its header, as the picture stands (EXIF orientation)."""
    with _opened(path) as image:
        if image.getexif().get(ORIENTATION_TAG) in TURNED_A_QUARTER:
            return image.width, image.height
        return image.height, image.width


# ------------------------------------------------------------------------------ finding files
def class_folders(folder):
    """[(class name, [image paths sorted])] of an image folder, and the count of other files
    skipped. ConvnetError when the folder is missing or has no class subfolder with images."""
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.exists(folder) else "not found"
        raise ConvnetError(f"image folder '{folder}' {what}")
    names = sorted(n for n in os.listdir(folder)
                   if not n.startswith(".") and os.path.isdir(os.path.join(folder, n)))
    if not names:
        raise ConvnetError(f"image folder '{folder}' has no class subfolders (one subfolder per "
                           "class, named after it, holding that class's images)")
    classes, skipped = [], 0
    for name in names:
        sub = os.path.join(folder, name)
        entries = sorted(e for e in os.listdir(sub) if os.path.isfile(os.path.join(sub, e)))
        files = [os.path.join(sub, e) for e in entries if is_image_name(e)]
        skipped += len(entries) - len(files)
        if not files:
            raise ConvnetError(f"image folder '{folder}': class subfolder '{name}' holds no "
                               f"images ({', '.join(SUFFIXES)})")
        classes.append((name, files))
    if len(classes) < 2:
        raise ConvnetError(f"image folder '{folder}' has only one class subfolder ('{names[0]}'); "
                           "at least 2 classes are needed")
    return classes, skipped


def spread_order(counts):
    """(class, index within class) of every case, each class spread evenly (module notes)."""
    keys = [((k + 0.5) / n, c, k) for c, n in enumerate(counts) for k in range(n)]
    return [(c, k) for _, c, k in sorted(keys)]


def input_files(path):
    """The image files a folder, a file pattern or a file names: a folder gives every image file
    beneath it (sorted), a pattern (``*``, ``?``, ``[``) its matching files, a file itself.
    Anything else gives []. (Also what a cluster ships for such an input.)"""
    if os.path.isdir(path):
        found = []
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            found += [os.path.join(folder, f) for f in sorted(files) if is_image_name(f)]
        return found
    if os.path.isfile(path):
        return [path]
    if any(c in path for c in PATTERN_CHARACTERS):
        return sorted(f for f in glob.glob(path) if os.path.isfile(f))
    return []


# ------------------------------------------------------------------------------ reading
def read_folder(folder, size=None):
    """READ IMAGES: a Dataset from source "IMAGES" with class names and case names (the files).

    ``size``: (rows, cols) every image is resized to, or None (every image must have the first
    one's size). Returns (dataset, number of other files skipped)."""
    classes, skipped = class_folders(folder)
    order = spread_order([len(files) for _, files in classes])
    paths = [classes[c][1][k] for c, k in order]
    first = classes[0][1][0]                    # the first file of the first class
    with _opened(first) as image:
        bands = image_bands(image)
    rows, cols = size if size is not None else image_size(first)
    require(images_bytes(len(paths), bands, rows, cols),
            f"image folder '{folder}': {len(paths)} images of {rows} x {cols}")
    inputs = np.empty((len(paths), bands, rows, cols))
    for n, path in enumerate(paths):
        if size is None:
            _require_size(path, image_size(path), (rows, cols), first)
        inputs[n] = read_image(path, bands, size)
    labels = np.array([c for c, _ in order], dtype=np.int64)
    dataset = Dataset(inputs, labels, len(classes), "IMAGES",
                      class_names=tuple(name for name, _ in classes), case_names=tuple(paths))
    return dataset, skipped


def _require_size(path, found, wanted, first):
    if tuple(found) != tuple(wanted):
        raise ConvnetError(f"{path}: the image is {found[0]} x {found[1]} (rows x columns) but "
                           f"{first} is {wanted[0]} x {wanted[1]}; every image must have one "
                           "size, or set IMAGE ROWS and IMAGE COLUMNS to resize them")


def read_for_model(paths, rows, cols, bands, resize=False):
    """The images CLASSIFY reads, as (n, bands, rows, cols) tones for a model of that shape:
    converted to its bands, and resized to its size when ``resize``, else refused when another
    size."""
    require(images_bytes(len(paths), bands, rows, cols), f"{len(paths)} images of {rows} x {cols}")
    inputs = np.empty((len(paths), bands, rows, cols))
    for n, path in enumerate(paths):
        found = image_size(path)
        if not resize and tuple(found) != (rows, cols):
            raise ConvnetError(f"{path}: the image is {found[0]} x {found[1]} (rows x columns), "
                               f"the model's images are {rows} x {cols}; resize it (IMAGE ROWS "
                               "and IMAGE COLUMNS, or convnet classify --resize)")
        inputs[n] = read_image(path, bands, (rows, cols) if resize else None)
    return inputs
