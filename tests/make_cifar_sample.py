"""Write data/cifar-format-sample.bin: small GENERATED images in the exact CIFAR-10 binary format.

These are not CIFAR-10 pictures. Each record is one label byte (0-9) and 3072 pixel bytes (the red,
green and blue 32 x 32 planes, each row by row). The class decides the shape drawn (0 horizontal
bar, 1 vertical bar, 2 square, 3 disc, 4 diagonal band, 5 cross, 6 ring, 7 checkerboard, 8 triangle,
9 hollow frame); its position, size and colours and the background vary from image to image, with
noise on every pixel. Labels cycle 0, 1, ..., 9, 0, 1, ...

Everything comes from an integer hash of (image, pixel), not from a library random generator, so
the file is the same byte for byte on every machine and numpy version.

    python tests/make_cifar_sample.py [OUTPUT] [--images N]

(defaults: data/cifar-format-sample.bin, 200 images)
"""

import argparse
import os

import numpy as np

SIDE = 32
N_IMAGES = 200
DEFAULT_OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data",
                              "cifar-format-sample.bin")
_MASK = np.uint64(0xFFFFFFFF)


def hash32(x):
    """A 32-bit integer hash (values 0 .. 2**32 - 1) of non-negative integers, elementwise."""
    x = np.asarray(x, dtype=np.uint64) & _MASK
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & _MASK
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & _MASK
    x ^= x >> np.uint64(16)
    return x


def _draw(image, key):
    """A few hashed integers for one image: uniform in 0..n-1 for each n asked."""
    def pick(slot, n):
        return int(hash32(np.uint64(image * 64 + slot + key))) % n
    return pick


def shape_mask(label, pick):
    """Boolean 32 x 32 mask of the class's shape, placed and sized at random."""
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    cy, cx = 10 + pick(1, 12), 10 + pick(2, 12)
    r = 5 + pick(3, 5)
    t = 2 + pick(4, 3)
    if label == 0:
        return np.abs(yy - cy) < t
    if label == 1:
        return np.abs(xx - cx) < t
    if label == 2:
        return (np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= r)
    if label == 3:
        return (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    if label == 4:
        return np.abs((yy - cy) - (xx - cx)) < t
    if label == 5:
        return ((np.abs(yy - cy) < t) | (np.abs(xx - cx) < t)) & \
            (np.abs(yy - cy) <= r + 3) & (np.abs(xx - cx) <= r + 3)
    if label == 6:
        d2 = (yy - cy) ** 2 + (xx - cx) ** 2
        return (d2 <= (r + 2) ** 2) & (d2 >= (r - 1) ** 2)
    if label == 7:
        cell = 3 + pick(5, 3)
        return ((yy // cell + xx // cell) % 2) == 0
    if label == 8:
        return (yy - cy + r >= 0) & (yy - cy <= r) & (np.abs(xx - cx) <= (yy - cy + r) // 2)
    inner = (np.abs(yy - cy) <= r - t) & (np.abs(xx - cx) <= r - t)
    return (np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= r) & ~inner


def make_records(n_images=N_IMAGES):
    """The file's bytes: ``n_images`` records of 3073 bytes."""
    out = bytearray()
    pixel_index = np.arange(3 * SIDE * SIDE, dtype=np.uint64)
    for image in range(n_images):
        label = image % 10
        pick = _draw(image, 0x5EED)
        mask = shape_mask(label, pick)
        back = np.array([pick(10 + b, 110) for b in range(3)], dtype=np.int64)
        fore = np.array([120 + pick(20 + b, 136) for b in range(3)], dtype=np.int64)
        noise = (hash32(pixel_index + np.uint64(image) * np.uint64(3 * SIDE * SIDE) +
                        np.uint64(0xC1FA)) % np.uint64(41)).astype(np.int64) - 20
        planes = np.where(mask[None, :, :], fore[:, None, None], back[:, None, None])
        planes = np.clip(planes + noise.reshape(3, SIDE, SIDE), 0, 255).astype(np.uint8)
        out.append(label)
        out += planes.tobytes()       # red plane, green plane, blue plane; each row by row
    return bytes(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", default=DEFAULT_OUTPUT)
    parser.add_argument("--images", type=int, default=N_IMAGES)
    args = parser.parse_args(argv)
    data = make_records(args.images)
    with open(args.output, "wb") as f:
        f.write(data)
    print(f"wrote {args.images} generated CIFAR-10-format records ({len(data)} bytes) to "
          f"{os.path.normpath(args.output)}")


if __name__ == "__main__":
    main()
