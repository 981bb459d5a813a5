"""What the device computes, as tables and launch plans (numpy only, no GPU needed).

Every layer with weights is computed by two "gather" matrix products (kernels/gemm.cu):

``gemm_nn`` (activation and delta backpropagation), for each *group* g, case m and column n:

    C[m, n] = sum over k < K_g of  A(m, k) * B[boff[k] + b_add + n]
    A(m, k) = in[m * lda + aoff[k]]  if aoff[k] >= 0;   1 if aoff[k] == -2 (bias);   0 if -1 (padding)

then an epilogue (tanh, none, or times the prior layer's tanh derivative) writes
``out[m * ldo + o_add + n]``.

* Activation (Equations 1-1, 1-5, 1-6): a group is one position (row, col) of this layer
  (FC and the output layer: one group); k runs over the filter window (row, col, prior slice) and
  the bias; n is this layer's slice.
* Delta backpropagation (Equation 1-19): a group is one position of the PRIOR layer; k runs over
  the (this-layer neuron, slice) pairs whose window covers that position; n is the prior slice
  (FC and output: one group, k is this layer's neuron, n the prior neuron).

``gemm_tn`` (weight gradient, Equation 1-18), for weight row k and column n:

    partial[p][k][c] = sum over (group g, case m) in p's share of  A_g(m, k) * delta[m, g * D + n]

with A_g the activation table above. A convolutional layer sums its groups into the same
weights (the "flattening" of the convolution gradient); every layer's sums over cases are split
into fixed chunks of CHUNK cases whose float32 partial sums are added in float64, chunk after
chunk, by the flatten kernel, so the order of every addition depends on nothing but the
architecture and the number of cases: MAX BATCH (at least CHUNK), MAX HID GRAD and MAX MEM GRAD
change which launch does the work, never the result.

``simulate`` below runs exactly these tables with numpy in float64; the tests hold it to the
reference vectors, so a table error is found without a GPU.
"""

import numpy as np

from .layout import WeightLayout, image_to_device

# Cases per partial sum of the weight gradient, and the unit at which batches are cut when the
# data are split into several (MAX BATCH < number of cases).
CHUNK = 256
# Positions of a convolutional layer summed into one partial: at most CONV_GROUP (with CHUNK
# cases, 4096 terms), fewer when the data are too few to give the gradient launch about
# CONV_BLOCKS blocks. The choice depends on the architecture and the number of cases only.
CONV_GROUP = 16
CONV_BLOCKS = 1024
ROW_TILE = 128

A_ZERO = -1
A_ONE = -2


class TableBuilder:
    """Concatenates int32 tables; every layer's descriptors hold absolute indices into it."""

    def __init__(self):
        self.parts = []
        self.size = 0

    def add(self, arr):
        arr = np.asarray(arr, dtype=np.int64)
        start = self.size
        self.parts.append(arr)
        self.size += arr.size
        return start

    def array(self):
        if not self.parts:
            return np.zeros(1, dtype=np.int32)
        out = np.concatenate(self.parts)
        if out.size and (out.max() >= 2**31 or out.min() < -2**31):
            raise ValueError("device index table exceeds 32-bit range")
        return out.astype(np.int32)


class DenseRows:
    """The form of a one-group product whose A columns are consecutive floats of each case's row
    (a0, a0 + 1, ...; then the bias when `bias`) and whose B rows lie b_step floats apart, the
    first at b_add: the dense variants of gemm_nn (gemm_async.cu) copy such rows 16 bytes at a
    time."""

    def __init__(self, a0, b_step, bias):
        self.a0 = a0
        self.b_step = b_step
        self.bias = bias


class GemmGroups:
    """Descriptors of one gemm_nn launch: per group (a_start, b_start, K, b_add, o_add); dense:
    a DenseRows where the tables have that form (fully connected and output layers)."""

    def __init__(self, desc, n_cols, max_k, dense=None):
        self.desc = np.asarray(desc, dtype=np.int64).reshape(-1, 5)
        self.n_groups = self.desc.shape[0]
        self.n_cols = n_cols            # N
        self.max_k = max_k
        self.dense = dense


def _window_offsets(layer):
    """Forward gather offsets: (G, K) int64, window rows (fr, fc, prior slice) then the bias."""
    s = layer.spec
    ph, pw, pd = layer.prior_height, layer.prior_width, layer.prior_depth
    fv, fh = s.filter_v, s.filter_h
    h, w = layer.height, layer.width
    oh, ow = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    r0 = (oh * s.stride_v - s.pad_v).ravel()
    c0 = (ow * s.stride_h - s.pad_h).ravel()
    fr, fc, sl = np.meshgrid(np.arange(fv), np.arange(fh), np.arange(pd), indexing="ij")
    fr, fc, sl = fr.ravel(), fc.ravel(), sl.ravel()
    r = r0[:, None] + fr[None, :]
    c = c0[:, None] + fc[None, :]
    valid = (r >= 0) & (r < ph) & (c >= 0) & (c < pw)
    off = np.where(valid, (r * pw + c) * pd + sl[None, :], A_ZERO)
    bias = np.full((h * w, 1), A_ONE)
    return np.hstack([off, bias])


def _backprop_pairs(layer):
    """For every prior position: the list of (this position, tap) whose window covers it."""
    s = layer.spec
    ph, pw = layer.prior_height, layer.prior_width
    h, w = layer.height, layer.width
    fv, fh = s.filter_v, s.filter_h
    pairs = [[] for _ in range(ph * pw)]
    for oh in range(h):
        for fr in range(fv):
            r = oh * s.stride_v - s.pad_v + fr
            if r < 0 or r >= ph:
                continue
            for ow in range(w):
                for fc in range(fh):
                    c = ow * s.stride_h - s.pad_h + fc
                    if 0 <= c < pw:
                        pairs[r * pw + c].append((oh * w + ow, fr * fh + fc))
    return pairs


class LayerPlan:
    """Shapes of one layer (hidden or output) on the device. Each layer kind names its plan class
    (convnet.architecture.kinds): :class:`GatherLayerPlan` or :class:`PoolLayerPlan`."""

    def __init__(self, layer, lay, tables):
        self.layer = layer
        self.index = layer.index
        self.is_output = layer.is_output
        self.kind = layer.kind
        self.lay = lay
        self.nhid = layer.n_neurons
        self.n_prior = layer.n_prior
        self.depth = layer.depth
        self.fwd = None
        self.bwd = None
        self.grad = None


class PoolLayerPlan(LayerPlan):
    """A pooling layer: no weights and no tables; its kernels read the layer's shape."""


class GatherLayerPlan(LayerPlan):
    """A layer with weights (FC, LOCAL, CONV and the output layer): the gather tables of its
    activation, delta and weight-gradient products."""

    def __init__(self, layer, lay, tables):
        super().__init__(layer, lay, tables)
        cols = lay.cols
        # ---- activation
        if self.kind.whole_prior:
            aoff = np.concatenate([np.arange(self.n_prior), [A_ONE]])
            K = aoff.size
            a0 = tables.add(aoff)
            b0 = tables.add(np.arange(K) * cols)
            self.fwd = GemmGroups([[a0, b0, K, 0, 0]], self.depth, K, DenseRows(0, cols, True))
            self.fwd_aoff = aoff.reshape(1, K)
        else:
            off = _window_offsets(layer)
            G, K = off.shape
            a0 = tables.add(off.ravel())
            b0 = tables.add(np.arange(K) * cols)
            g = np.arange(G)
            desc = np.stack([a0 + g * K, np.full(G, b0), np.full(G, K),
                             np.zeros(G, np.int64) if self.kind.shares_weights else g * self.depth,
                             g * self.depth], axis=1)
            self.fwd = GemmGroups(desc, self.depth, K)
            self.fwd_aoff = off
        self.rows = lay.rows
        self.groups = self.fwd.n_groups
        # ---- delta backpropagation into the prior layer (never into the input image)
        if self.index > 0:
            d = self.depth
            if self.kind.whole_prior:
                a0 = tables.add(np.arange(d))
                b0 = tables.add(np.arange(d) * lay.bwd_ld)
                self.bwd = GemmGroups([[a0, b0, d, 0, 0]], self.n_prior, d,
                                      DenseRows(0, lay.bwd_ld, False))
            else:
                pd = layer.prior_depth
                taps = layer.spec.filter_v * layer.spec.filter_h
                dd = np.arange(d)
                desc, max_k = [], 0
                for gi, plist in enumerate(_backprop_pairs(layer)):
                    K = len(plist) * d
                    max_k = max(max_k, K)
                    pos = np.array([p for p, _ in plist], dtype=np.int64)
                    tap = np.array([t for _, t in plist], dtype=np.int64)
                    ao = (pos[:, None] * d + dd[None, :]).ravel()
                    if self.kind.shares_weights:
                        bo = ((tap[:, None] * d + dd[None, :]) * pd).ravel()
                    else:
                        bo = (((pos[:, None] * taps + tap[:, None]) * d + dd[None, :]) * pd).ravel()
                    desc.append([tables.add(ao), tables.add(bo), K, 0, gi * pd])
                self.bwd = GemmGroups(desc, pd, max_k)
        # ---- weight gradient
        self.grad = GradPlan(self.rows, self.depth, self.groups, self.kind)


class GradPlan:
    """How the weight gradient of one layer is split into partial sums."""

    def __init__(self, rows, n_cols, groups, kind):
        self.rows = rows
        self.n_cols = n_cols                    # slices (FC: neurons)
        self.groups = groups                    # positions (FC: 1)
        self.kind = kind
        # a weight set per position (LOCAL): the partial sums keep every position's columns
        self.local_cols = not (kind.shares_weights or kind.whole_prior)

    @classmethod
    def of(cls, layer, rows):
        """The GradPlan of a layer with `rows` weight rows (its layout's), from its shape."""
        groups = 1 if layer.kind.whole_prior else layer.height * layer.width
        return cls(rows, layer.depth, groups, layer.kind)

    def slots_for(self, n_total):
        """(groups per slot, slots) for a data set of n_total cases."""
        groups = self.groups
        if not self.kind.shares_weights:
            return 1, groups        # a slot per position (LOCAL), or the one group (FC)
        tiles = -(-self.rows // ROW_TILE)
        per_slot = max(1, min(CONV_GROUP, groups,
                              groups * self.n_chunks(n_total) * tiles // CONV_BLOCKS))
        return per_slot, -(-groups // per_slot)

    def n_chunks(self, n_cases):
        return -(-n_cases // CHUNK)

    def n_partials(self, n_cases, slots):
        """Partial sums one launch over n_cases produces (LOCAL: each covers every position)."""
        if self.local_cols:
            return self.n_chunks(n_cases)
        return self.n_chunks(n_cases) * slots

    def scratch_floats(self, n_cases, n_slices, slots):
        width = n_slices * (self.groups if self.local_cols else 1)
        return self.n_partials(n_cases, slots) * self.rows * width

    def neurons_per_slice(self):
        return self.groups          # visual field size (1 for FC)


def split_batches(n_cases, max_batch):
    """The (start, stop) of every batch. One batch when MAX BATCH covers the data; otherwise
    batches of a multiple of CHUNK cases (so the gradient's partial sums are the same whatever
    MAX BATCH is), or, when MAX BATCH < CHUNK, the book's equal split."""
    if n_cases <= 0:
        return []
    if max_batch >= n_cases:
        return [(0, n_cases)]
    if max_batch >= CHUNK:
        size = max_batch // CHUNK * CHUNK
        return [(i, min(i + size, n_cases)) for i in range(0, n_cases, size)]
    n_sub = -(-n_cases // max_batch)
    out, start = [], 0
    for i in range(n_sub):
        n = (n_cases - start) // (n_sub - i)
        out.append((start, start + n))
        start += n
    return out


def gradient_launch_slices(gp, max_batch, max_hid_grad, max_mem_grad_mb, slots):
    """Slices of this layer's gradient per launch, as the book splits it: divide the depth by the
    smallest divisor that keeps the neurons of a launch within MAX HID GRAD and its partial-sum
    scratch within MAX MEM GRAD; at least one slice (a whole visual field) per launch."""
    depth = gp.n_cols
    field = gp.neurons_per_slice()
    limit_bytes = max_mem_grad_mb * 1024 * 1024
    divisor = 1
    while True:
        per = depth // divisor
        if per < 1:
            return 1
        if per * field <= max_hid_grad and gp.scratch_floats(max_batch, per, slots) * 4 <= limit_bytes:
            return per
        divisor += 1


# --------------------------------------------------------------------------- the whole model
class ModelPlan:
    """Every layer's tables, concatenated into one int32 array for the device."""

    def __init__(self, arch):
        self.arch = arch
        self.layout = WeightLayout(arch)
        self.tables_builder = TableBuilder()
        self.layers = []
        for layer in arch.all_layers:
            lay = self.layout.layers.get(layer.index)
            self.layers.append(layer.kind.device_plan(layer, lay, self.tables_builder))
        self.tables = self.tables_builder.array()
        self.n_classes = arch.n_classes
        self.n_inputs = arch.n_inputs
        self.hidden = self.layers[:-1]
        self.output = self.layers[-1]
        self.max_nhid = max([lp.nhid for lp in self.layers])


# --------------------------------------------------------------------------- numpy executable spec
def _gemm_nn(A, tables, groups, B, out, epilogue, act_prior=None):
    n = A.shape[0]
    N = groups.n_cols
    cols = np.arange(N)
    for a_start, b_start, K, b_add, o_add in groups.desc:
        if K:
            ao = tables[a_start:a_start + K]
            Ag = np.where(ao[None, :] >= 0, A[:, np.maximum(ao, 0)], np.where(ao == A_ONE, 1.0, 0.0)[None, :])
            bo = tables[b_start:b_start + K]
            Bg = B[bo[:, None] + b_add + cols[None, :]]
            C = Ag @ Bg
        else:
            C = np.zeros((n, N))
        if epilogue == "tanh":
            C = np.tanh(C)
        elif epilogue == "deriv":
            a = act_prior[:, o_add:o_add + N]
            C = C * (1.0 - a * a)
        out[:, o_add:o_add + N] = C


def _pool_forward(prev, lp, layer):
    s = layer.spec
    n = prev.shape[0]
    ph, pw, pd = layer.prior_height, layer.prior_width, layer.prior_depth
    x = prev.reshape(n, ph, pw, pd)
    h, w = layer.height, layer.width
    out = np.empty((n, h, w, pd))
    ids = np.empty((n, h, w, pd), dtype=np.int64)
    for oh in range(h):
        for ow in range(w):
            r0, c0 = oh * s.stride_v, ow * s.stride_h
            win = x[:, r0:r0 + s.width_v, c0:c0 + s.width_h, :].reshape(n, -1, pd)
            if not lp.kind.keeps_winners:
                out[:, oh, ow, :] = win.mean(axis=1)
            else:
                j = np.argmax(win, axis=1)          # first maximum in row-then-column order
                out[:, oh, ow, :] = np.take_along_axis(win, j[:, None, :], axis=1)[:, 0, :]
                ids[:, oh, ow, :] = (r0 + j // s.width_h) * pw + c0 + j % s.width_h
    return out.reshape(n, -1), ids.reshape(n, -1)


def _pool_backward(delta, ids, lp, layer):
    s = layer.spec
    n = delta.shape[0]
    ph, pw, pd = layer.prior_height, layer.prior_width, layer.prior_depth
    h, w = layer.height, layer.width
    d = delta.reshape(n, h, w, pd)
    out = np.zeros((n, ph, pw, pd))
    if not lp.kind.keeps_winners:
        for oh in range(h):
            for ow in range(w):
                r0, c0 = oh * s.stride_v, ow * s.stride_h
                out[:, r0:r0 + s.width_v, c0:c0 + s.width_h, :] += \
                    d[:, oh, ow, None, None, :] / (s.width_v * s.width_h)
    else:
        idv = ids.reshape(n, h, w, pd)
        flat = out.reshape(n, ph * pw, pd)
        for oh in range(h):
            for ow in range(w):
                for c in range(pd):
                    np.add.at(flat[:, :, c], (np.arange(n), idv[:, oh, ow, c]), d[:, oh, ow, c])
    return out.reshape(n, -1)


def simulate(plan, weights, inputs, classes, wpen=0.0):
    """The device algorithm in float64 numpy: (criterion, host-order gradient, outputs, activations)."""
    lay = plan.layout
    fwd, bwd = lay.to_device(weights, dtype=np.float64)
    tables = plan.tables.astype(np.int64)
    x = image_to_device(inputs, np.float64)
    n = x.shape[0]
    acts, winners = _simulate_forward(plan, fwd, tables, x)
    logits = acts[-1]
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    ll = -np.log(p[np.arange(n), classes] + 1e-30).sum()
    ncls = plan.n_classes
    delta = p.copy()
    delta[np.arange(n), classes] -= 1.0
    grad_dev = _simulate_backward(plan, bwd, tables, x, acts, winners, delta)
    grad = lay.to_host(grad_dev) / (n * ncls)
    mask = plan.arch.penalty_mask()
    w = np.asarray(weights, dtype=np.float64)
    nw = plan.arch.n_weights
    crit = ll / (n * ncls) + wpen / nw * float(np.sum(mask * w * w))
    grad += 2.0 * wpen / nw * mask * w
    return crit, grad, p, acts


def _simulate_forward(plan, fwd, tables, x):
    """Every layer's activations, and the max-pooling layers' winners (None elsewhere)."""
    n = x.shape[0]
    acts, winners = [], []
    prev = x
    for lp in plan.layers:
        layer = lp.layer
        if not lp.kind.has_weights:
            a, i = _pool_forward(prev, lp, layer)
        else:
            a = np.empty((n, lp.nhid))
            B = fwd[lp.lay.fwd_offset:lp.lay.fwd_offset + lp.lay.fwd_size]
            _gemm_nn(prev, tables, lp.fwd, B, a, "none" if lp.is_output else "tanh")
            i = None
        acts.append(a)
        winners.append(i)
        prev = a
    return acts, winners


def _simulate_backward(plan, bwd, tables, x, acts, winners, delta):
    """The weight gradient in the device forward order (not yet divided by the cases and
    classes), from the output layer's delta."""
    n = x.shape[0]
    grad_dev = np.zeros(plan.layout.n_fwd)
    for li in range(len(plan.layers) - 1, -1, -1):
        lp = plan.layers[li]
        A = x if li == 0 else acts[li - 1]
        if lp.kind.has_weights:
            _simulate_weight_gradient(lp, tables, A, delta, grad_dev)
        if li == 0:
            break
        prior = plan.layers[li - 1]
        new = np.empty((n, prior.nhid))
        if not lp.kind.has_weights:
            new = _pool_backward(delta, winners[li], lp, lp.layer)
            if prior.kind.applies_tanh:
                new *= 1.0 - acts[li - 1] ** 2
        else:
            B = bwd[lp.lay.bwd_offset:lp.lay.bwd_offset + lp.lay.bwd_size]
            _gemm_nn(delta, tables, lp.bwd, B, new,
                     "deriv" if prior.kind.applies_tanh else "none", acts[li - 1])
        delta = new
    return grad_dev


def _simulate_weight_gradient(lp, tables, A, delta, grad_dev):
    """Add one layer's weight gradient (A: its inputs) into grad_dev."""
    gmat = grad_dev[lp.lay.fwd_offset:lp.lay.fwd_offset + lp.lay.fwd_size].reshape(lp.lay.rows, lp.lay.cols)
    for g, (a_start, _, K, _, _) in enumerate(lp.fwd.desc):
        ao = tables[a_start:a_start + K]
        Ag = np.where(ao[None, :] >= 0, A[:, np.maximum(ao, 0)], np.where(ao == A_ONE, 1.0, 0.0)[None, :])
        if lp.kind.whole_prior:
            Dg = delta
        else:
            Dg = delta[:, g * lp.depth:(g + 1) * lp.depth]
        col0 = g * lp.depth if lp.grad.local_cols else 0
        gmat[:, col0:col0 + lp.depth] += Ag.T @ Dg
