"""Host <-> device orders of weights and activations (book chapter 3, SPEC section 6).

Host order (book chapter 2) is what the rest of the program sees: layer by layer, the output layer
last; within a layer, neuron by neuron, the prior activations in (depth, height, width) order then
the bias.

Device order ("forward" layout) keeps, for every layer with weights, a matrix of ``rows`` x ``cols``
float32 values, ``rows = n_prior_weights`` (the bias is the last row) and one row holding the
weight of that input for every neuron (LOCAL: all neurons, in (height, width, depth) order) or every
slice (CONV, FC and the output layer) side by side, padded with zeros to a multiple of 32 floats so
that the layer's depth changes fastest and every row begins on a 128-byte boundary:

    row (in_row, in_col, in_slice) of the filter window (FC: of the whole prior layer), bias last
    column: LOCAL (height, width, depth) of this layer; CONV / FC / output: depth

Activations on the device are (case, height, width, depth), depth fastest; the input image is
(case, row, col, band).

A second device copy of the non-bias weights (the "backward" layout) serves the backpropagation of
delta, where the sum runs over this layer's neurons for a fixed prior neuron:

    CONV:       [tap][slice][prior slice]              tap = filter row * filter width + filter col
    LOCAL:      [position][tap][slice][prior slice]    position = row * width + col of this layer
    FC, output: [neuron][prior neuron (height, width, depth)]

Everything here is numpy; nothing needs a GPU.
"""

import numpy as np



def pad32(n):
    """Equation 3-1: n bumped up to a multiple of 32 (128 bytes of float)."""
    return (n + 31) // 32 * 32


class LayerLayout:
    """Where one layer's weights live in the device forward and backward vectors."""

    def __init__(self, layer, fwd_offset, bwd_offset):
        self.layer = layer
        self.kind = layer.kind
        self.rows = layer.n_prior_weights
        # one column per weight set: every neuron (LOCAL) or every slice (FC, CONV)
        self.n_cols = layer.n_weights // layer.n_prior_weights
        self.cols = pad32(self.n_cols)
        self.fwd_offset = fwd_offset
        self.fwd_size = self.rows * self.cols
        self.bwd_offset = bwd_offset
        self.bwd_size = (self.rows - 1) * self.n_cols
        # bwd_ld: length of one backward row (the prior slices, or the prior neurons for FC)
        if self.kind.whole_prior:
            self.bwd_ld = layer.n_prior
        else:
            self.bwd_ld = layer.prior_depth


def _layer_maps(layer, lay):
    """For every host weight of this layer: (device forward index, device backward index or -1)."""
    npw = layer.n_prior_weights
    ph, pw, pd = layer.prior_height, layer.prior_width, layer.prior_depth
    fwd = np.empty(layer.n_weights, dtype=np.int64)
    bwd = np.full(layer.n_weights, -1, dtype=np.int64)
    if lay.kind.whole_prior:
        n = layer.depth
        # host q = (s * ph + r) * pw + c  ->  device row (r * pw + c) * pd + s
        s, r, c = np.meshgrid(np.arange(pd), np.arange(ph), np.arange(pw), indexing="ij")
        dev_row = ((r * pw + c) * pd + s).ravel()          # in host q order
        for i in range(n):
            base = i * npw
            fwd[base:base + npw - 1] = dev_row * lay.cols + i
            fwd[base + npw - 1] = (npw - 1) * lay.cols + i
            bwd[base:base + npw - 1] = i * lay.bwd_ld + dev_row
        return fwd, bwd
    fv, fh = layer.spec.filter_v, layer.spec.filter_h
    taps = fv * fh
    # host filter index (s * fv + fr) * fh + fc  ->  device row (fr * fh + fc) * pd + s
    s, fr, fc = np.meshgrid(np.arange(pd), np.arange(fv), np.arange(fh), indexing="ij")
    dev_row = ((fr * fh + fc) * pd + s).ravel()
    tap = (fr * fh + fc).ravel()
    sl = s.ravel()
    h, w, d = layer.height, layer.width, layer.depth
    if lay.kind.shares_weights:
        for i in range(d):
            base = i * npw
            fwd[base:base + npw - 1] = dev_row * lay.cols + i
            fwd[base + npw - 1] = (npw - 1) * lay.cols + i
            bwd[base:base + npw - 1] = (tap * d + i) * pd + sl
        return fwd, bwd
    # a weight set per neuron (LOCAL): host neuron j = (i * h + oh) * w + ow; device column (oh * w + ow) * d + i
    i, oh, ow = np.meshgrid(np.arange(d), np.arange(h), np.arange(w), indexing="ij")
    pos = (oh * w + ow).ravel()                      # in host neuron order j
    col = pos * d + i.ravel()
    f = fwd.reshape(d * h * w, npw)
    b = bwd.reshape(d * h * w, npw)
    f[:, :npw - 1] = dev_row[None, :] * lay.cols + col[:, None]
    f[:, npw - 1] = (npw - 1) * lay.cols + col
    b[:, :npw - 1] = ((pos[:, None] * taps + tap[None, :]) * d + i.ravel()[:, None]) * pd + sl[None, :]
    return fwd, bwd


def layer_layouts(arch):
    """({layer index: LayerLayout} of the layers with weights, forward size, backward size):
    the shapes of the device layouts, without their index maps."""
    layouts = {}
    fwd_off = bwd_off = 0
    for layer in arch.all_layers:
        if not layer.kind.has_weights:
            continue
        lay = LayerLayout(layer, fwd_off, bwd_off)
        layouts[layer.index] = lay
        fwd_off += lay.fwd_size
        bwd_off += lay.bwd_size
    return layouts, fwd_off, bwd_off


class WeightLayout:
    """Index maps between the host weight vector and the device forward / backward vectors."""

    def __init__(self, arch):
        self.arch = arch
        # layer index -> LayerLayout (layers with weights only)
        self.layers, self.n_fwd, self.n_bwd = layer_layouts(arch)
        fwd_parts, bwd_parts = [], []
        for index, lay in self.layers.items():
            f, b = _layer_maps(lay.layer, lay)
            fwd_parts.append(f + lay.fwd_offset)
            bwd_parts.append(np.where(b >= 0, b + lay.bwd_offset, -1))
        self.n_weights = arch.n_weights
        self.fwd_index = np.concatenate(fwd_parts) if fwd_parts else np.zeros(0, np.int64)
        self.bwd_index = np.concatenate(bwd_parts) if bwd_parts else np.zeros(0, np.int64)
        # device forward index -> host index (-1 for the zero padding)
        self.dev_to_host = np.full(self.n_fwd, -1, dtype=np.int64)
        self.dev_to_host[self.fwd_index] = np.arange(self.n_weights)

    # -------------------------------------------------------------------- numpy conversions
    def to_device(self, weights, dtype=np.float32):
        """(forward vector, backward vector) in device order from host-order weights."""
        w = np.asarray(weights, dtype=np.float64)
        fwd = np.zeros(self.n_fwd, dtype=dtype)
        fwd[self.fwd_index] = w
        bwd = np.zeros(self.n_bwd, dtype=dtype)
        keep = self.bwd_index >= 0
        bwd[self.bwd_index[keep]] = w[keep]
        return fwd, bwd

    def to_host(self, device_vector):
        """Host-order vector from a device forward-order vector (the padding is dropped)."""
        return np.asarray(device_vector, dtype=np.float64)[self.fwd_index]

    def layer_matrix(self, fwd_vector, layer_index):
        """One layer's forward matrix (rows x cols) viewed from a device forward vector."""
        lay = self.layers[layer_index]
        return fwd_vector[lay.fwd_offset:lay.fwd_offset + lay.fwd_size].reshape(lay.rows, lay.cols)


# ------------------------------------------------------------------------ activations
def image_to_device(inputs, dtype=np.float32):
    """(n, bands, rows, cols) host images -> (n, rows * cols * bands), band fastest."""
    x = np.asarray(inputs)
    n = x.shape[0]
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1), dtype=dtype).reshape(n, -1)


def activations_to_host(act, height, width, depth):
    """(n, height * width * depth) device activations -> (n, depth * height * width) host order."""
    a = np.asarray(act, dtype=np.float64)
    n = a.shape[0]
    return np.ascontiguousarray(a.reshape(n, height, width, depth).transpose(0, 3, 1, 2)).reshape(n, -1)
