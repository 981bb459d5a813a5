"""The DISPLAY commands: each checks that its picture can be made (also under `convnet check`),
then draws it into the output folder and records it in results.json."""

from .. import memory


def display_training_images(session, cmd):
    data = session._need_data(cmd, labels=False)
    if data.bands not in (1, 3):
        raise cmd.error(f"DISPLAY TRAINING IMAGES shows 1 or 3 bands; these images have {data.bands}")
    _require_picture(cmd, data.rows, data.cols, data.bands)
    if session.check_only:
        return
    from .grids import training_images
    a = cmd.args
    path = session._output_path(a["file"])
    training_images(data, a["first"], a["rows"], a["columns"], path)
    session._wrote(path)
    session.record.picture(path, "DISPLAY TRAINING IMAGES", cmd, session.out)


def display_filter_images(session, cmd):
    session._need_model(cmd)
    arch = session.model_arch
    if not arch.layers or not arch.layers[0].kind.shares_weights:
        raise cmd.error("DISPLAY FILTER IMAGES needs a model whose first hidden layer is convolutional")
    if arch.bands not in (1, 3):
        raise cmd.error(f"DISPLAY FILTER IMAGES shows 1 or 3 bands; the model's input has {arch.bands}")
    spec = arch.layers[0].spec
    _require_picture(cmd, spec.filter_v, spec.filter_h, arch.bands)
    if session.check_only:
        return
    from .grids import filter_images
    a = cmd.args
    path = session._output_path(a["file"])
    filter_images(session.model, a["first"], a["rows"], a["columns"], a["individual"], path)
    session._wrote(path)
    session.record.picture(path, "DISPLAY FILTER IMAGES", cmd, session.out)


def display_activation_images(session, cmd):
    session._need_model(cmd)
    data = session._need_data(cmd, labels=False)
    a = cmd.args
    if not session.model_arch.layers:
        raise cmd.error("DISPLAY ACTIVATION IMAGES needs a model with a hidden layer")
    if a["case"] > data.n_cases:
        raise cmd.error(f"DISPLAY ACTIVATION IMAGES: case {a['case']} is past the last case "
                        f"({data.n_cases})")
    data.check_matches(session.model_arch.rows, session.model_arch.cols, session.model_arch.bands,
                       session.model_arch.n_classes)
    first = session.model_arch.layers[0]
    _require_picture(cmd, first.height, first.width, 1)
    if session.check_only:
        return
    from .grids import activation_images
    path = session._output_path(a["file"])
    activation_images(session.model, data, a["first"], a["rows"], a["columns"], a["case"], path)
    session._wrote(path)
    session.record.picture(path, "DISPLAY ACTIVATION IMAGES", cmd, session.out)


def _require_picture(cmd, tile_rows, tile_cols, bands):
    """Refuse a DISPLAY grid whose picture cannot fit in memory."""
    from .grids import GridGeometry
    geometry = GridGeometry(tile_rows, tile_cols, cmd.args["rows"], cmd.args["columns"])
    memory.require_picture(geometry, bands)
