"""A trained model as an ONNX model whose output is the class probabilities.

``onnx_model(arch, weights, class_names=None)`` is a pure function from the architecture and the
weights in the book's host order to an ``onnx.ModelProto``; ``export_onnx(path, ...)`` writes one
(atomically). The control file's ``EXPORT ONNX "f"`` and ``convnet export MODEL -o f`` both come
here.

The input convention, also stored in the model's metadata_props (:func:`metadata`):

* input ``image``: float32, N x bands x rows x columns (NCHW), ``image[case, band, row, column]``,
  values scaled to -1..1 as the readers scale them (MNIST pixel p: p / 127.5 - 1);
* output ``probabilities``: float32, N x classes, each row the SoftMax of the output layer, in the
  order of the ``class_names`` metadata (JSON list; "0".."n-1" unless the model names them).

This is the host's order of an image (band, row, column) with the case in front, so an image read
by convnet goes in as it is. An image in the book's depth-fastest device order (row, column,
band), as a flat vector ``v``, is ``v.reshape(rows, columns, bands).transpose(2, 0, 1)``.

The exported model computes in float32 with ONNX Runtime's summation order; it agrees with the
host path (float64) to about 1e-6 in every probability on the nets the tests try.
"""

import json
import os

import numpy as np

from .._version import __version__
from ..errors import ConvnetError
from . import require_onnx

OPSET = 17                 # the operator set the graph uses (Conv, Gather, Softmax on axis 1, ...)
IR_VERSION = 8             # the file format version of that opset's ONNX release
INPUT = "image"
OUTPUT = "probabilities"
LAYOUT = "N x bands x rows x columns (NCHW), float32: image[case, band, row, column]"


def default_class_names(n_classes):
    return [str(i) for i in range(n_classes)]


def checked_class_names(arch, class_names):
    """The class names to store: ``class_names`` as strings, one per class, or "0".."n-1"."""
    if class_names is None:
        return default_class_names(arch.n_classes)
    names = [str(name) for name in class_names]
    if len(names) != arch.n_classes:
        raise ConvnetError(f"{len(names)} class names for a model of {arch.n_classes} classes")
    return names


def metadata(arch, class_names):
    """The model's metadata_props: how to prepare its input and read its output."""
    return {
        "producer": f"convnet {__version__}",
        "input_name": INPUT, "output_name": OUTPUT,
        "input_layout": LAYOUT,
        "input_range": "-1..1",
        "bands": str(arch.bands), "rows": str(arch.rows), "columns": str(arch.cols),
        "classes": str(arch.n_classes),
        "class_names": json.dumps(class_names),
        "output": "class probabilities (SoftMax), N x classes, in class_names order",
        "layers": json.dumps(arch.control_lines()),
    }


def onnx_model(arch, weights, class_names=None):
    """The ONNX model of ``arch`` with ``weights`` (1-D, the book's host order); checked with
    onnx.checker. ConvnetError for weights or class names that do not fit the architecture."""
    onnx = require_onnx()
    from onnx import TensorProto, helper
    from .graph import Graph
    weights = np.asarray(weights, dtype=np.float64).reshape(-1)
    if weights.size != arch.n_weights:
        raise ConvnetError(f"{weights.size} weights for a model of {arch.n_weights}")
    names = checked_class_names(arch, class_names)
    graph = Graph()
    x = INPUT
    for layer in arch.layers:
        x = layer.kind.onnx_layer(layer).emit(graph, x, weights[layer.weight_slice])
    out = arch.output
    logits = out.kind.onnx_layer(out).net_input(graph, x, weights[out.weight_slice])
    graph.node("Softmax", [logits], "output_softmax", output=OUTPUT, axis=1)
    image = helper.make_tensor_value_info(INPUT, TensorProto.FLOAT,
                                          ["N", arch.bands, arch.rows, arch.cols])
    probabilities = helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["N", arch.n_classes])
    body = helper.make_graph(graph.nodes, "convnet", [image], [probabilities],
                             graph.initializers, doc_string=" / ".join(arch.control_lines()))
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="convnet", producer_version=__version__,
                              doc_string="convnet model: class probabilities of images scaled "
                                         "to -1..1 (see metadata_props)")
    model.ir_version = IR_VERSION
    helper.set_model_props(model, metadata(arch, names))
    onnx.checker.check_model(model)
    return model


def export_onnx(path, arch, weights, class_names=None):
    """Write the ONNX model of ``arch`` and ``weights`` to ``path`` (atomically); returns the
    model. ConvnetError naming the file when it cannot be written."""
    from ..atomic import write_atomically
    model = onnx_model(arch, weights, class_names)
    write_atomically(path, model.SerializeToString(), what="ONNX file")
    return model


def export_model_file(model_path, out_path=None, overwrite=False):
    """``convnet export``: the model file ``model_path`` (SAVE MODEL's) as an ONNX file,
    ``out_path`` or the model file's name with .onnx; an existing file is replaced only with
    ``overwrite``, and the model file never. Returns the path written."""
    if out_path is None:
        out_path = os.path.splitext(model_path)[0] + ".onnx"
    if _same_file(model_path, out_path):
        raise ConvnetError("the ONNX file would replace the model file itself", file=out_path)
    if os.path.lexists(out_path) and not overwrite:
        raise ConvnetError("the file exists already (--overwrite replaces it)", file=out_path)
    require_onnx()
    from ..modelfile import read_model
    saved = read_model(model_path)
    # the model file's class names, where its format holds them
    export_onnx(out_path, saved.arch, saved.weights, getattr(saved, "class_names", None))
    return out_path


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:                     # either one missing: not the same existing file
        return os.path.abspath(a) == os.path.abspath(b)
