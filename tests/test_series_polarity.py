"""A series is drawn as the book draws it: the path black on white, in data and in pictures."""

import numpy as np
from PIL import Image

from convnet.session import run

VALUES = [1, 2, 4, 3.5, 5, 4, 6, 7, 5, 8]


def test_series_path_is_minus_one_and_shown_black_on_white(tmp_path):
    (tmp_path / "s.txt").write_text("".join(f"{v}\n" for v in VALUES))
    ctl = tmp_path / "series.ctl"
    ctl.write_text('SERIES WINDOW = 4\nSERIES RESOLUTION = 6\nREAD SERIES "s.txt"\n'
                   'DISPLAY TRAINING IMAGES 1 1 1 "first.png"\n')
    session = run([str(ctl)], out=str(tmp_path / "out"), device="cpu", seed=1)
    image = session.dataset.inputs[0, 0]                       # (6 rows, 4 columns)
    assert set(np.unique(image).tolist()) == {-1.0, 1.0}
    path = image == -1.0
    assert path.sum(axis=0).min() >= 1                         # every column holds the path
    assert (~path).sum() > path.sum()                          # and most of it is background
    with Image.open(tmp_path / "out" / "first.png") as im:
        pixels = np.asarray(im.convert("L"))
    # read each cell back at the image's own size (the grid enlarges by whole pixels)
    scale = (pixels.shape[1] - 4) // 4
    shown = pixels[2:2 + 6 * scale:scale, 2:2 + 4 * scale:scale]
    assert np.array_equal(shown == 0, path)                    # the path is black
    assert np.all(shown[~path] == 255)                         # everything else white
