"""Predictions: a model's class and class probabilities for image files, written as CSV.

CLASSIFY (a control file) and ``convnet classify`` (the command line) both come here. The CSV has
a heading row, then one row per image in the order given: ``path``, ``predicted`` (the class
name, or its number from 1 when the model's classes have no names), then the probability of every
class, one column per class headed ``p(<class>)``. It is written to a temporary file beside its
place and renamed over it, so it is never seen half written.
"""

import csv
import io

import numpy as np

from .data.dataset import class_label
from .data.images import input_files, read_for_model
from .errors import ConvnetError
from .logs.record import PREDICTIONS, Artifact
from .logs.results import write_atomic

CASES_PER_PASS = 1024        # images evaluated at a time (bounds the work areas)


def image_paths(names):
    """The image files of folders, file patterns and files, in order (a file once). A name that
    gives no image is an error naming it."""
    paths, seen = [], set()
    for name in names:
        found = input_files(name)
        if not found:
            raise ConvnetError(f"'{name}': no image files there (a folder, a file pattern such "
                               "as \"digits/*.png\", or an image file)")
        for path in found:
            if path not in seen:
                seen.add(path)
                paths.append(path)
    return paths


def probabilities(model, inputs):
    """SoftMax outputs (n, n_classes) of ``model`` for ``inputs``, a pass at a time."""
    parts = [model.predict(inputs[start:start + CASES_PER_PASS])
             for start in range(0, inputs.shape[0], CASES_PER_PASS)]
    return np.concatenate(parts)


def classify(model, paths, resize=False):
    """Probabilities (n, n_classes) for the image files ``paths`` (read for the model's shape:
    its bands; resized to its size when ``resize``, else refused when another size)."""
    arch = model.arch
    inputs = read_for_model(paths, arch.rows, arch.cols, arch.bands, resize)
    return probabilities(model, inputs)


def predictions_csv(paths, outputs, class_names, n_classes):
    """The CSV text of the module notes."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    labels = [class_label(class_names, n) for n in range(n_classes)]
    writer.writerow(["path", "predicted"] + [f"p({label})" for label in labels])
    for path, row in zip(paths, outputs):
        writer.writerow([path, labels[int(np.argmax(row))]] + [f"{p:.6g}" for p in row])
    return text.getvalue()


def write_predictions(path, paths, outputs, class_names, n_classes):
    """Write the predictions CSV at ``path`` atomically; returns its Artifact."""
    try:
        write_atomic(path, predictions_csv(paths, outputs, class_names, n_classes))
    except OSError as e:
        raise ConvnetError(f"cannot write {path}: {e.strerror or e}") from None
    return Artifact(path, f"predictions for {len(paths)} image{'s' if len(paths) != 1 else ''}",
                    PREDICTIONS)
