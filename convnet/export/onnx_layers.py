"""The ONNX nodes of each layer kind (named by the kinds in convnet/architecture/kinds.py).

Every hidden layer takes and gives a float32 tensor N x depth x height x width, which is the
host's (depth, height, width) order of activations with the case in front, so no layer
rearranges its input. ``emit(graph, x, weights)`` appends the layer's nodes to ``graph`` and
returns its output's name; ``weights`` are the layer's own weights in the book's host order.
The arithmetic follows convnet/host/reference.py exactly (same windows, padding, strides and
activation); only the summation order and float32 differ.
"""

import numpy as np


class _Nodes:
    def __init__(self, layer):
        self.layer = layer
        self.prefix = "output" if layer.is_output else f"layer{layer.index + 1}"

    def weight_sets(self, weights):
        """The weights as one row per weight set, the bias last in each row."""
        return np.asarray(weights, dtype=np.float64).reshape(-1, self.layer.n_prior_weights)


class FullyConnectedNodes(_Nodes):
    """Equation 1-1: every neuron sees the whole prior layer ((depth, height, width) order)."""

    def net_input(self, graph, x, weights):
        """N x depth net inputs (before any activation): Flatten then Gemm."""
        p = self.prefix
        sets = self.weight_sets(weights)
        flat = graph.node("Flatten", [x], f"{p}_flat", axis=1)
        return graph.node("Gemm", [flat, graph.weights(f"{p}_weights", sets[:, :-1]),
                                   graph.weights(f"{p}_bias", sets[:, -1])],
                          f"{p}_net", transB=1)

    def emit(self, graph, x, weights):
        p = self.prefix
        active = graph.node("Tanh", [self.net_input(graph, x, weights)], f"{p}_tanh")
        return graph.node("Reshape", [active, graph.shape(f"{p}_shape",
                                                          [0, self.layer.depth, 1, 1])], p)


class ConvolutionalNodes(_Nodes):
    """Equation 1-6: one filter per slice at every position; ONNX Conv is the same
    cross-correlation, with the book's zero padding on both sides and its strides."""

    def emit(self, graph, x, weights):
        L, s, p = self.layer, self.layer.spec, self.prefix
        sets = self.weight_sets(weights)
        kernels = sets[:, :-1].reshape(L.depth, L.prior_depth, s.filter_v, s.filter_h)
        net = graph.node("Conv", [x, graph.weights(f"{p}_weights", kernels),
                                  graph.weights(f"{p}_bias", sets[:, -1])], f"{p}_net",
                         kernel_shape=[s.filter_v, s.filter_h],
                         pads=[s.pad_v, s.pad_h, s.pad_v, s.pad_h],
                         strides=[s.stride_v, s.stride_h])
        return graph.node("Tanh", [net], p)


class LocalNodes(_Nodes):
    """Equation 1-5: every neuron has its own weights. The prior layer is zero-padded and each
    position's window gathered (an exact copy: Pad, Flatten, Gather), then every position
    multiplies its window by its own weights (a batched MatMul over positions)."""

    def window_indices(self):
        """(positions, window) indices into the padded prior layer flattened (slice, row, col);
        positions in (row, col) order, a window in the weight order [slice][row][col]."""
        L, s = self.layer, self.layer.spec
        padded_h, padded_w = L.prior_height + 2 * s.pad_v, L.prior_width + 2 * s.pad_h
        rows = s.stride_v * np.arange(L.height)[:, None] + np.arange(s.filter_v)[None, :]
        cols = s.stride_h * np.arange(L.width)[:, None] + np.arange(s.filter_h)[None, :]
        slices = np.arange(L.prior_depth)
        index = ((slices[None, None, :, None, None] * padded_h
                  + rows[:, None, None, :, None]) * padded_w
                 + cols[None, :, None, None, :])
        return index.reshape(L.height * L.width, -1).astype(np.int64)

    def emit(self, graph, x, weights):
        L, s, p = self.layer, self.layer.spec, self.prefix
        positions = L.height * L.width
        sets = self.weight_sets(weights).reshape(L.depth, positions, -1)
        kernels = sets[:, :, :-1].transpose(1, 2, 0)                   # position, window, slice
        bias = sets[:, :, -1].T.reshape(positions, 1, L.depth)         # position, 1, slice
        if s.pad_v or s.pad_h:
            x = graph.node("Pad", [x, graph.shape(f"{p}_pads", [0, 0, s.pad_v, s.pad_h,
                                                                  0, 0, s.pad_v, s.pad_h])],
                           f"{p}_padded")
        flat = graph.node("Flatten", [x], f"{p}_flat", axis=1)
        windows = graph.node("Gather", [flat, graph.shape(f"{p}_windows", self.window_indices())],
                             f"{p}_windows", axis=1)                   # N, position, window
        by_position = graph.node("Transpose", [windows], f"{p}_by_position", perm=[1, 0, 2])
        product = graph.node("MatMul", [by_position, graph.weights(f"{p}_weights", kernels)],
                             f"{p}_product")                           # position, N, slice
        net = graph.node("Add", [product, graph.weights(f"{p}_bias", bias)], f"{p}_net")
        active = graph.node("Tanh", [net], f"{p}_tanh")
        by_slice = graph.node("Transpose", [active], f"{p}_by_slice", perm=[1, 2, 0])
        return graph.node("Reshape", [by_slice, graph.shape(
            f"{p}_shape", [0, L.depth, L.height, L.width])], p)


class _PoolNodes(_Nodes):
    """Each window of each slice, no padding, no activation (the book's pooling layers); ONNX's
    pooling with no pads and ceil_mode 0 gives the same windows and the same field size."""

    op = ""

    def emit(self, graph, x, weights):
        s = self.layer.spec
        return graph.node(self.op, [x], self.prefix, kernel_shape=[s.width_v, s.width_h],
                          strides=[s.stride_v, s.stride_h])


class AveragePoolNodes(_PoolNodes):
    op = "AveragePool"


class MaxPoolNodes(_PoolNodes):
    op = "MaxPool"
