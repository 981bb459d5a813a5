"""A small builder of an ONNX graph: nodes in order, named tensors and the constants they use."""

import numpy as np
from onnx import helper, numpy_helper


class Graph:
    """Nodes and initializers of one ONNX graph; every tensor gets a unique readable name."""

    def __init__(self):
        self.nodes = []
        self.initializers = []
        self._names = set()

    def _unique(self, stem):
        name, n = stem, 1
        while name in self._names:
            n += 1
            name = f"{stem}_{n}"
        self._names.add(name)
        return name

    def constant(self, stem, array):
        """A constant tensor (an initializer) holding ``array`` as it is (its dtype kept)."""
        name = self._unique(stem)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weights(self, stem, array):
        """A constant of model weights, stored as float32 (the exported model computes in
        float32)."""
        return self.constant(stem, np.asarray(array, dtype=np.float32))

    def shape(self, stem, dims):
        """A constant shape or index list (int64), as Reshape and Pad take them."""
        return self.constant(stem, np.asarray(dims, dtype=np.int64))

    def node(self, op, inputs, stem, output=None, **attributes):
        """Append one node; returns the name of its (single) output, ``output`` if given."""
        out = self._unique(output or stem)
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=self._unique(f"{stem}_op"),
                                           **attributes))
        return out
