"""Every kernel launch of the device path: grid and block shapes, shared memory, and the kernel's
parameters filled by name (kernel_args.py). The evaluator decides what runs when; this module
only knows how each kernel is started."""

import functools

import numpy as np

from . import tuning
from .kernel_args import (CONV_GRAD_POOLED, CONV_SMALL, GEMM_NN, GEMM_TN, GRAD_FINISH, GRAD_FLATTEN,
                          GRAD_FLATTEN_D, GRAD_SLOT_SUM, LINE_BLOCK, LINE_POINT, LINE_THREADS,
                          LL_SUM, MINIBATCH_ADVANCE, MINIBATCH_GATHER, MINIBATCH_GATHER_SHIFTED,
                          MINIBATCH_UPDATE, POOL_BACKWARD, POOL_BACKWARD_TILES, POOL_FORWARD,
                          POOL_FOUR, SOFTMAX_LL, VEC_DIRECTION, VEC_FINISH, VEC_NEG, VEC_STEP, VEC_SUMS, WEIGHTS_SCATTER)

EPI_NONE, EPI_TANH, EPI_DERIV = 0, 1, 2     # gemm_nn epilogue: none, tanh, times tanh'(prior)

MAX_GRID_Z = 65535
MAX_GRID_X = 2 ** 31 - 1
# conv_small: CONV layers with at most this many slices and a weight matrix of at most
# CONV_SMALL_FLOATS floats (slices padded to a multiple of 4) compute their activation directly.
CONV_SMALL_SLICES = 32
CONV_SMALL_FLOATS = 8192
CONV_SMALL_THREADS = 128


def conv_small_stage_row(depth):
    """Floats between the rows of a conv_small block's staged results (conv_small.cu): odd, so
    that a warp's stores of one slice fall in 32 different banks."""
    return depth | 1


# Pooling launches: about this many blocks, each thread looping over cases.
POOL_CASES_PER_THREAD = 8
# conv_grad_pooled: pooled neurons and prior activations a thread copies per case (conv_small.cu)
POOLED_GRAD_PER_Q = 6
POOLED_GRAD_PER_X = 4
POOLED_GRAD_THREADS = 576       # at most, so that two blocks fit a multiprocessor's registers
POOLED_GRAD_TAPS = 5            # the weight rows of a thread's run of a filter row
POOLED_GRAD_SUBS = 32           # conv_grad_pooled: partial sums per chunk of cases (each 8 cases)
ELEMENTWISE_THREADS = 256


def _blocks(n, threads=ELEMENTWISE_THREADS):
    return ((n + threads - 1) // threads, 1, 1)


def pool_lanes(depth):
    """Slices a pooling kernel's thread takes: four adjacent ones, read and written 16 bytes at a
    time (pool.cu's _x4 kernels), where the depth is a multiple of 4 (every case's rows then
    start on a 16-byte boundary); else one."""
    return 4 if depth % 4 == 0 else 1


def _pool_kernel(params, lanes):
    return params.family + (POOL_FOUR if lanes == 4 else "")


def _pool_grid(per_case, nb, lanes):
    """Grid x covers a case's neurons, `lanes` a thread; each thread does about
    POOL_CASES_PER_THREAD cases."""
    gx = (per_case // lanes + 255) // 256
    return gx, max(1, min(MAX_GRID_Z, -(-nb // POOL_CASES_PER_THREAD))), 1


def _pool_shape(layer, kind):
    s = layer.spec
    return dict(prior_height=layer.prior_height, prior_width=layer.prior_width,
                prior_depth=layer.prior_depth, height=layer.height, width=layer.width,
                width_v=s.width_v, width_h=s.width_h, stride_v=s.stride_v, stride_h=s.stride_h,
                is_max=kind.keeps_winners)


def _conv_shape(layer, src, lda, weights, ldw):
    s = layer.spec
    return dict(src=src, lda=lda, prior_height=layer.prior_height, prior_width=layer.prior_width,
                prior_depth=layer.prior_depth, height=layer.height, width=layer.width,
                filter_v=s.filter_v, filter_h=s.filter_h, pad_v=s.pad_v, pad_h=s.pad_h,
                stride_v=s.stride_v, stride_h=s.stride_h, weights=weights, ldw=ldw,
                depth=layer.depth)


def pool_forward(rt, lp, src, out, ids, nb):
    lanes = pool_lanes(lp.layer.prior_depth)
    rt.launch(_pool_kernel(POOL_FORWARD, lanes), _pool_grid(lp.nhid, nb, lanes), (256, 1, 1),
              *POOL_FORWARD.pack(src=src, **_pool_shape(lp.layer, lp.kind), out=out, ids=ids, nb=nb))


def pool_backward(rt, lp, prior_nhid, delta, ids, prior_act, out, nb):
    lanes = pool_lanes(lp.layer.prior_depth)
    rt.launch(_pool_kernel(POOL_BACKWARD, lanes), _pool_grid(prior_nhid, nb, lanes), (256, 1, 1),
              *POOL_BACKWARD.pack(delta=delta, ids=ids, **_pool_shape(lp.layer, lp.kind),
                                  prior_act=prior_act, out=out, nb=nb))


def windows_tile_exactly(layer):
    """Whether a pooling layer's windows tile its prior layer exactly: strides equal to the
    widths and each prior neuron in one window."""
    s = layer.spec
    return (s.stride_v == s.width_v and s.stride_h == s.width_h
            and layer.height * s.width_v == layer.prior_height
            and layer.width * s.width_h == layer.prior_width)


def windows_tile(layer, kind):
    """Whether a pooling layer is max pooling whose windows tile its prior layer exactly, so
    pool_backward_tiles can backpropagate its delta."""
    return kind.keeps_winners and windows_tile_exactly(layer)


def pool_backward_tiles(rt, lp, delta, ids, pooled, out, nb):
    """pool_backward for max pooling whose windows tile the prior layer: a thread per pooled
    neuron writes its window (pooled: this layer's activation when the prior one has a tanh)."""
    L = lp.layer
    lanes = pool_lanes(L.prior_depth)
    rt.launch(_pool_kernel(POOL_BACKWARD_TILES, lanes), _pool_grid(lp.nhid, nb, lanes), (256, 1, 1),
              *POOL_BACKWARD_TILES.pack(delta=delta, ids=ids, pooled=pooled,
                                        prior_width=L.prior_width, prior_depth=L.prior_depth,
                                        height=L.height, width=L.width, width_v=L.spec.width_v,
                                        width_h=L.spec.width_h, out=out, nb=nb))


def _covered(layer):
    """(prior rows, prior columns) a convolutional layer's windows cover, zero padding included."""
    s = layer.spec
    return (layer.height - 1) * s.stride_v + s.filter_v, (layer.width - 1) * s.stride_h + s.filter_h


@functools.lru_cache(maxsize=None)
def pooled_grad_row_stride(row, rows, taps):
    """Floats between the prior rows of conv_grad_pooled's shared copy: at least `row`, chosen
    so that the `taps` consecutive floats of a window's `rows` rows fall in as few of the 32
    banks twice as possible (for LeNet's 28-float rows and 5 x 5 windows, 37: every tap its own
    bank, where 28 puts two taps in one bank)."""
    def worst(stride):
        banks = np.bincount([(r * stride + t) % 32 for r in range(rows) for t in range(taps)],
                            minlength=32)
        return int(banks.max())
    return min(range(row, row + 32), key=lambda s: (worst(s), s))


def pooled_grad_items(filter_rows, row_taps):
    """conv_grad_pooled's threads of one slice: runs of a filter row's row_taps weight rows, and
    the bias row."""
    return filter_rows * -(-row_taps // POOLED_GRAD_TAPS) + 1


def conv_grad_pooled_shape(layer, pool_layer, n_cols):
    """(threads per block, blocks across the weights, shared-memory bytes, row stride) of
    conv_grad_pooled for n_cols slices, or None where it cannot take the layer: a thread per
    slice and run of POOLED_GRAD_TAPS weight rows of a filter row (or the bias row), at most
    POOLED_GRAD_THREADS to a block, each thread copying at most POOLED_GRAD_PER_Q of a case's
    pooled neurons and POOLED_GRAD_PER_X of its prior activations (extra threads only copy)."""
    s = layer.spec
    items = pooled_grad_items(s.filter_v, s.filter_h * layer.prior_depth) * n_cols
    blocks = -(-items // POOLED_GRAD_THREADS)
    per_block = -(-items // blocks)
    rin, cin = _covered(layer)
    row = cin * layer.prior_depth
    q_cols = pool_layer.height * pool_layer.width * n_cols
    copies = max(-(-q_cols // POOLED_GRAD_PER_Q), -(-rin * row // POOLED_GRAD_PER_X))
    threads = -(-max(per_block, copies) // 32) * 32
    if threads > POOLED_GRAD_THREADS:
        return None
    stride = pooled_grad_row_stride(row, s.filter_v, s.filter_h * layer.prior_depth)
    xs = -(-rin * stride // 2) * 2
    smem = 4 * (xs + 2 * q_cols + layer.height * layer.width)
    return threads, blocks, smem, stride


def conv_grad_pooled(rt, lp, pool_layer, *, src, lda, delta, ids, pooled, n_lo, n_hi, n_cases,
                     chunk, subs, part):
    """Weight-gradient partial sums of a conv_small first layer from its max-pooling layer's
    deltas and winners (conv_small.cu): `subs` partials per chunk of cases."""
    L = lp.layer
    s = L.spec
    threads, blocks, smem, stride = conv_grad_pooled_shape(L, pool_layer, n_hi - n_lo)
    rt.launch("conv_grad_pooled", (blocks, -(-n_cases // chunk) * subs, 1), (threads, 1, 1),
              *CONV_GRAD_POOLED.pack(src=src, lda=lda, prior_height=L.prior_height,
                                     prior_width=L.prior_width, prior_depth=L.prior_depth,
                                     height=L.height, width=L.width, filter_v=s.filter_v,
                                     filter_h=s.filter_h, pad_v=s.pad_v, pad_h=s.pad_h,
                                     stride_v=s.stride_v, stride_h=s.stride_h, row_stride=stride,
                                     delta=delta, ids=ids, pooled=pooled,
                                     pool_height=pool_layer.height, pool_width=pool_layer.width,
                                     depth=L.depth, n_lo=n_lo, n_hi=n_hi, n_cases=n_cases,
                                     chunk=chunk, subs=subs, part=part),
              shared=smem)


def conv_small(rt, lp, src, lda, nb, weights, out, width):
    """A small CONV layer computed directly, one thread per position (conv_small.cu)."""
    L = lp.layer
    total = nb * L.height * L.width
    nt = CONV_SMALL_THREADS
    rt.launch(f"conv_small_{width}", _blocks(total, nt), (nt, 1, 1),
              *CONV_SMALL.pack(**_conv_shape(L, src, lda, weights, lp.lay.cols), out=out,
                               total=total),
              shared=4 * (lp.rows * width + nt * conv_small_stage_row(L.depth)))


def gemm_nn(rt, tuner, site, *, src, lda, tables, desc, groups, B, b_ld, M, out, ldo, prior, epi,
            tiled=None, pool=None, split=False, tf32=False, direct=None, pairs=False, patch=None):
    """A gather product out = epi(A B) for M rows (cases), the groups of a layer's table.
    tiled: for a convolutional layer's activation (b_ld > 0) or delta backpropagation (b_ld 0),
    its conv_tiled_launch.ConvTiled, whose variants are candidates beside the gather tiles.
    pool: (pooling layer, its activation, its winners) of the max pooling after a convolutional
    layer whose tiled or patch variants compute it in their epilogue (tiled.pool); the gather
    tiles are then followed by pool_forward, and each candidate is timed with its pooling.
    split: on the tensor cores (the split TF32 variants alone: no tiled or dense ones); with
    tf32, their one-product TF32 twins (CUDA PRECISION = TF32); pairs: the table gives runs of
    two floats but not of four (tensor_rules.pairs_only). direct: a conv_small layer's
    activation, direct() its launch of conv_small.cu's kernel: the first candidate. patch: with
    split, a convolutional layer's conv_patch.ConvPatch, whose variants are candidates too.
    Every candidate gives the same bits."""
    G, N = groups.n_groups, groups.n_cols
    variants = {} if tiled is None else tiled.fwd if b_ld > 0 else tiled.bwd
    patch_variants = {} if patch is None else patch.variants(delta=b_ld == 0)

    def launch(tile):
        if pool is None:
            return product(tile)
        pool_lp, pout, pids = pool
        fused = tiled if tile in variants else patch if tile in patch_variants else None
        if fused is None:
            product(tile)
            pool_forward(rt, pool_lp, out, pout, pids, M)
        else:
            fused.forward_pool(tile, src=src, lda=lda, weights=B, M=M, pout=pout,
                               ldp=pool_lp.nhid, pids=pids)

    def product(tile):
        if tile == tuning.DIRECT:
            direct()
            return
        if tile in patch_variants:
            patch.launch(tile, delta=b_ld == 0, src=src, lda=lda, weights=B, M=M, out=out,
                         ldo=ldo, prior=prior, epi=epi)
            return
        if tile in variants:
            if b_ld > 0:
                tiled.forward(tile, src=src, lda=lda, weights=B, M=M, out=out, ldo=ldo)
            else:
                tiled.delta(tile, delta=src, ldd=lda, weights=B, M=M, out=out, ldo=ldo,
                            prior=prior, epi=epi)
            return
        _, BN, nt = tuning.nn_shape(tile)
        BM = tuning.nn_rows(tile, N)
        grid = (min(G, MAX_GRID_X), (M + BM - 1) // BM, (N + BN - 1) // BN)
        rt.launch(f"gemm_nn_{tile}", grid, (nt, 1, 1),
                  *GEMM_NN.pack(src=src, lda=lda, tables=tables, desc=desc, B=B, b_ld=b_ld, M=M,
                                N=N, out=out, ldo=ldo, prior=prior, epi=epi, n_groups=G),
                  shared=tuning.NN_SHARED.get(tile, 0))

    work = float(M) * N * groups.max_k * G
    if pool is not None:
        site = (site[0] + " pooled",) + site[1:]
    dense = dense_allowed(groups, src=src, lda=lda, B=B, b_ld=b_ld)
    candidates = (_split_candidates(M, N, dense, pairs, tf32, patch_variants) if split else
                  tuning.nn_candidates(M, N, variants, dense, direct=direct is not None))
    tuner.run(site + (M,), candidates, work, launch)


def _split_candidates(M, N, dense, pairs, tf32, patch_variants):
    """A product's candidates on the tensor cores: the gather tiles (their one-TF32-product
    twins with tf32), then a convolutional layer's patch variants."""
    candidates = tuning.nn_split_candidates(M, N, dense, pairs=pairs)
    candidates = tuning.tf32_tiles(candidates) if tf32 else candidates
    return tuning.patch_candidates(candidates, patch_variants)


def dense_allowed(groups, *, src, lda, B, b_ld):
    """Whether gemm_nn's dense variants may compute this launch: one group of dense rows
    (plan.DenseRows) whose every row begins on a 16-byte boundary, in A and in B."""
    d = groups.dense
    if d is None or groups.n_groups != 1:
        return False
    b_step = b_ld if b_ld > 0 else d.b_step
    b_add = int(groups.desc[0, 3])                  # B's first row: B + b_add
    return (lda % 4 == 0 and d.a0 % 4 == 0 and b_step % 4 == 0 and b_add % 4 == 0
            and int(src) % 16 == 0 and int(B) % 16 == 0)


def gemm_tn(rt, tuner, site, *, src, lda, tables, desc, delta, ldd, depth, rows, n_lo, n_hi,
            n_cases, chunk, groups, gps, slots, local_cols, part, nz, split=False, tf32=False):
    """Weight-gradient partial sums A^T delta over chunks of cases (and position ranges);
    split: on the tensor cores (the split TF32 variants; with tf32, their one-product twins)."""
    NL = n_hi - n_lo

    def launch(tile):
        nt, col_blocks, row_blocks, shared = tuning.tn_launch_shape(tile, rows, NL)
        rt.launch(f"gemm_tn_{tile}", (col_blocks, row_blocks, min(nz, MAX_GRID_Z)), (nt, 1, 1),
                  *GEMM_TN.pack(src=src, lda=lda, tables=tables, desc=desc, delta=delta, ldd=ldd,
                                depth=depth, rows=rows, n_lo=n_lo, n_hi=n_hi, n_cases=n_cases,
                                chunk=chunk, groups=groups, gps=gps, slots=slots,
                                local_cols=local_cols, part=part, nz=nz),
                  shared=shared)

    work = float(rows) * NL * n_cases * groups
    if split:
        candidates = tuning.tn_split_candidates(rows, NL)
        candidates = tuning.tf32_tiles(candidates) if tf32 else candidates
    else:
        candidates = tuning.tn_candidates(rows, NL)
    tuner.run(site, candidates, work, launch)


def conv_grad(tuner, site, tiled, *, src, lda, delta, ldd, rows, n_lo, n_hi, n_cases, chunk, subs,
              part, groups):
    """Weight-gradient partial sums of a convolutional layer by conv_tiled.cu's conv_grad: `subs`
    partials per chunk of cases, each over every position."""
    def launch(tile):
        tiled.gradient(tile, src=src, lda=lda, delta=delta, ldd=ldd, n_lo=n_lo, n_hi=n_hi,
                       n_cases=n_cases, chunk=chunk, subs=subs, part=part)

    work = float(rows) * (n_hi - n_lo) * n_cases * groups
    tuner.run(site, tuning.grad_candidates(tiled.grad), work, launch)


def grad_slot_sum(rt, part, slots, chunks, pstride, tot):
    rt.launch("grad_slot_sum", _blocks(chunks * pstride), (256, 1, 1),
              *GRAD_SLOT_SUM.pack(part=part, slots=slots, chunks=chunks, pstride=pstride, tot=tot))


def grad_flatten(rt, double_parts, *, part, n_part, rows, pld, n_cols, n_lo, depth, local_cols,
                 ldw, dev_to_host, acc):
    """Adds the partial sums of one launch, in order, into the float64 host-order gradient."""
    params = GRAD_FLATTEN_D if double_parts else GRAD_FLATTEN
    rt.launch(params.family, _blocks(rows * pld), (256, 1, 1),
              *params.pack(part=part, n_part=n_part, rows=rows, pld=pld, n_cols=n_cols, n_lo=n_lo,
                           depth=depth, local_cols=local_cols, ldw=ldw, dev_to_host=dev_to_host,
                           acc=acc))


def grad_finish(rt, acc, w, mask, n, scale, pen2, grad):
    rt.launch("grad_finish", _blocks(n), (256, 1, 1),
              *GRAD_FINISH.pack(acc=acc, w=w, mask=mask, n=n, scale=scale, pen2=pen2, grad=grad))


def softmax_ll(rt, logits, ncls, nb, classes, probs, ll, delta):
    rt.launch("softmax_ll", _blocks(nb, 128), (128, 1, 1),
              *SOFTMAX_LL.pack(logits=logits, ncls=ncls, nb=nb, classes=classes, probs=probs,
                               ll=ll, delta=delta))


def ll_sum(rt, ll, n, out):
    rt.launch("ll_sum", (1, 1, 1), (256, 1, 1), *LL_SUM.pack(ll=ll, n=n, out=out))


def weights_scatter(rt, w, n, fwd_index, bwd_index, fwd, bwd):
    rt.launch("weights_scatter", _blocks(n), (256, 1, 1),
              *WEIGHTS_SCATTER.pack(w=w, n=n, fwd_index=fwd_index, bwd_index=bwd_index, fwd=fwd,
                                    bwd=bwd))


def line_parts(n):
    """Partial sums of line_point and vec_sums for n weights (a block each)."""
    return -(-n // LINE_BLOCK)


def line_point(rt, x, d, t, n, mask, w32, pen_part):
    rt.launch("line_point", (line_parts(n), 1, 1), (LINE_THREADS, 1, 1),
              *LINE_POINT.pack(x=x, d=d, t=t, n=n, mask=mask, w32=w32, pen_part=pen_part))


def vec_step(rt, out, x, t, d, n):
    rt.launch("vec_step", _blocks(n), (ELEMENTWISE_THREADS, 1, 1),
              *VEC_STEP.pack(out=out, x=x, t=t, d=d, n=n))


def vec_direction(rt, d, beta, g, n):
    rt.launch("vec_direction", _blocks(n), (ELEMENTWISE_THREADS, 1, 1),
              *VEC_DIRECTION.pack(d=d, beta=beta, g=g, n=n))


def vec_neg(rt, out, v, n):
    rt.launch("vec_neg", _blocks(n), (ELEMENTWISE_THREADS, 1, 1), *VEC_NEG.pack(out=out, v=v, n=n))


def vec_sums(rt, a, b, n, mode, part):
    rt.launch("vec_sums", (line_parts(n), 1, 1), (LINE_THREADS, 1, 1),
              *VEC_SUMS.pack(a=a, b=b, n=n, mode=mode, part=part))


def vec_finish(rt, part, n_parts, k, out):
    rt.launch("vec_finish", (1, 1, 1), (32, 1, 1),
              *VEC_FINISH.pack(part=part, n_parts=n_parts, k=k, out=out))


# ------------------------------------------------------------------ mini-batch descent (minibatch.cu)
def minibatch_gather(rt, x, classes, order, counters, batch, n_inputs, xb, cb):
    rt.launch("minibatch_gather", _blocks(batch * n_inputs), (ELEMENTWISE_THREADS, 1, 1),
              *MINIBATCH_GATHER.pack(x=x, classes=classes, order=order, counters=counters,
                                     batch=batch, n_inputs=n_inputs, xb=xb, cb=cb))


def minibatch_gather_shifted(rt, x, classes, order, shifts, counters, batch, rows, cols, bands,
                             xb, cb):
    rt.launch("minibatch_gather_shifted", _blocks(batch * rows * cols * bands),
              (ELEMENTWISE_THREADS, 1, 1),
              *MINIBATCH_GATHER_SHIFTED.pack(x=x, classes=classes, order=order, shifts=shifts,
                                             counters=counters, batch=batch, rows=rows,
                                             cols=cols, bands=bands, xb=xb, cb=cb))


def minibatch_update(rt, w, grad, first, second, rates, counters, n, rule, w32):
    rt.launch("minibatch_update", _blocks(n), (ELEMENTWISE_THREADS, 1, 1),
              *MINIBATCH_UPDATE.pack(w=w, grad=grad, first=first, second=second, rates=rates,
                                     counters=counters, n=n, adam=int(rule.kind == "ADAM"),
                                     momentum=rule.momentum, nesterov=int(rule.nesterov),
                                     beta1=rule.beta1, beta2=rule.beta2, epsilon=rule.epsilon,
                                     w32=w32))


def minibatch_advance(rt, counters, ll, epoch_ll):
    rt.launch("minibatch_advance", (1, 1, 1), (32, 1, 1),
              *MINIBATCH_ADVANCE.pack(counters=counters, ll=ll, epoch_ll=epoch_ll))
