"""The DISPLAY commands: each checks that its picture can be made (also under `convnet check`),
then, when ``path`` is given, draws it there and returns what it made (an Artifact) for the
session to record. A check passes no path and gets None."""

from .. import memory
from ..logs.record import Artifact


def display_training_images(cmd, data, path=None):
    """DISPLAY TRAINING IMAGES of ``data``."""
    if data.bands not in (1, 3):
        raise cmd.error(f"DISPLAY TRAINING IMAGES shows 1 or 3 bands; these images have {data.bands}")
    _require_picture(cmd, data.rows, data.cols, data.bands)
    if path is None:
        return None
    from .grids import training_images
    args = cmd.args
    training_images(data, args["first"], args["rows"], args["columns"], path)
    return Artifact(path, "DISPLAY TRAINING IMAGES")


def display_filter_images(cmd, arch, model=None, path=None):
    """DISPLAY FILTER IMAGES of the model with architecture ``arch`` (``model``: its weights)."""
    if not arch.layers or not arch.layers[0].kind.shares_weights:
        raise cmd.error("DISPLAY FILTER IMAGES needs a model whose first hidden layer is convolutional")
    if arch.bands not in (1, 3):
        raise cmd.error(f"DISPLAY FILTER IMAGES shows 1 or 3 bands; the model's input has {arch.bands}")
    spec = arch.layers[0].spec
    _require_picture(cmd, spec.filter_v, spec.filter_h, arch.bands)
    if path is None:
        return None
    from .grids import filter_images
    args = cmd.args
    filter_images(model, args["first"], args["rows"], args["columns"], args["individual"], path)
    return Artifact(path, "DISPLAY FILTER IMAGES")


def display_activation_images(cmd, arch, data, model=None, path=None):
    """DISPLAY ACTIVATION IMAGES: the first hidden layer of ``model`` for one case of ``data``."""
    args = cmd.args
    if not arch.layers:
        raise cmd.error("DISPLAY ACTIVATION IMAGES needs a model with a hidden layer")
    if args["case"] > data.n_cases:
        raise cmd.error(f"DISPLAY ACTIVATION IMAGES: case {args['case']} is past the last case "
                        f"({data.n_cases})")
    data.check_matches(arch.rows, arch.cols, arch.bands, arch.n_classes)
    first = arch.layers[0]
    _require_picture(cmd, first.height, first.width, 1)
    if path is None:
        return None
    from .grids import activation_images
    activation_images(model, data, args["first"], args["rows"], args["columns"], args["case"],
                      path)
    return Artifact(path, "DISPLAY ACTIVATION IMAGES")


def _require_picture(cmd, tile_rows, tile_cols, bands):
    """Refuse a DISPLAY grid whose picture cannot fit in memory."""
    from .grids import GridGeometry
    geometry = GridGeometry(tile_rows, tile_cols, cmd.args["rows"], cmd.args["columns"])
    memory.require_picture(geometry, bands)
