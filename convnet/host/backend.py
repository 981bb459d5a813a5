"""The host backend: criterion, gradient, outputs and activations on the CPU, float64.

How the work is organised
-------------------------
The cases are cut into blocks of B cases. Worker threads take contiguous runs of blocks (the book's
threads over cases), and every worker owns its work areas: activations, unrolled windows, deltas
and a gradient accumulator sized for one block. A block is transposed once on entry and every
layer then works in (feature, case) order: a layer's activations are an (n_out, B) matrix, so the
matrix products read and write whole blocks with no reordering between layers. Within a block each
layer is a few matrix products (numpy, BLAS held to one thread per worker) and compiled loops that
release the GIL (:mod:`~convnet.host.fc`, :mod:`~convnet.host.local_conv`,
:mod:`~convnet.host.pool`, :mod:`~convnet.host.output`, :mod:`~convnet.host.activation`). Bias and
tanh are one pass; the tanh derivative is applied by the step that computes a delta (a max pooling
layer applies its winners' own, from the pooled values). At the end the partial criterion sums and
gradients are added in a fixed order, divided by n_cases * n_classes (Equation 1-13), and the
weight penalty is added.

The criterion alone (no gradient) takes a forward-only route, :func:`_criterion_block`: it keeps
nothing for a backward pass (windows are unrolled a run of positions at a time), and a max pooling
layer after a layer with tanh pools the net inputs before the tanh (tanh is monotonic). It uses the
same work areas as the gradient.

So memory grows with threads x block size and not with the number of cases: B is chosen so that
one worker's work areas stay near :data:`BLOCK_BYTES`, at most :data:`MAX_BLOCK` cases (a net of
wide fully connected layers only, whose time is all in BLAS products: :data:`WIDE_MAX_BLOCK`).

Thread count: ``threads`` workers (default: Numba's configured thread count, which is every core
unless NUMBA_NUM_THREADS says otherwise). Results are the same to the last bit whatever it is: the
block size and the cut of the blocks into chunks (:meth:`HostBackend.partition`) depend only on the
data and the architecture, each chunk's criterion and gradient are summed block by block into a
partial of their own, and the partials are added in chunk order; a worker takes a contiguous run
of whole chunks. (On another machine the BLAS library may sum a product in another order.)

Timings: every layer's forward pass, delta and weight gradient are timed per block (two clock
reads each); :meth:`HostBackend.timings` reports calls (blocks) and seconds summed over workers.
"""

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import ConvnetError
from ..evaluator import Evaluator, check_cases, check_inputs, check_weights
from .local_conv import transpose_into
from .activation import tanh_inplace
from .output import softmax_criterion_t, softmax_t
from .threads import default_threads, single_threaded_blas

BLOCK_BYTES = 32 << 20    # target size of one worker's per-case work areas
MAX_BLOCK = 64            # most cases in a block
MIN_BLOCKS = 16           # small data sets are cut into this many blocks at least (workers' share)
# A net of fully connected layers only, one of them with WIDE_WEIGHTS weights or more, spends its
# time in BLAS products whose inner dimension (for the weight gradient) is the block's cases: it
# takes longer blocks, and fewer of them (wide-fc's 784 x 1024 gradient: 0.36 s of CPU in blocks
# of 63 cases, 0.20 s in blocks of 250, 0.16 s in one of 1000).
WIDE_WEIGHTS = 1 << 18
WIDE_MAX_BLOCK = 512
WIDE_MIN_BLOCKS = 2
MAX_CHUNKS = 48           # chunks of blocks, each with its own partial sums (48 = 2^4 * 3)
PARTIAL_BYTES = 64 << 20  # at most this much memory for the chunks' partial gradients

FORWARD, DELTA, GRADIENT = 0, 1, 2
ACTIVITIES = ("forward", "delta", "gradient")

_NO_CLASSES = np.zeros(0, dtype=np.int64)
_NO_IDS = np.zeros((1, 1), dtype=np.int32)


# ---------------------------------------------------------------------------------- work areas
class _Work:
    """One worker's work areas for blocks of up to ``capacity`` cases."""

    def __init__(self, plan, capacity, gradient):
        self.lock = threading.Lock()
        self.capacity = capacity
        self.gradient = gradient
        layers = plan.layers
        self.acts = [np.empty(capacity * L.n_out) for L in layers]
        self.ids = [np.empty(capacity * L.n_out, dtype=np.int32) if kind.keeps_winners
                    else None for L, kind in zip(layers, plan.kinds)]
        self.cols = [np.empty(capacity * L.kept_per_case()) if L.kept_per_case() else None
                     for L in layers]
        self.inputs_t = np.empty(capacity * plan.n_inputs)       # the input block, transposed
        self.logits = np.empty(capacity * plan.n_classes)
        if gradient:
            # d criterion / d net inputs (or activations, for pooling layers) of the layer being
            # worked on and of the one below it
            self.deltas = tuple(np.empty(capacity * plan.max_neurons) for _ in range(2))
            self.gtmp = np.empty(plan.grad_scratch)
        self.seconds = np.zeros((len(layers) + 1, 3))
        self.calls = np.zeros((len(layers) + 1, 3), dtype=np.int64)

    def ids_view(self, i, n):
        """Layer i's max-pool winners for a block of n cases, (n_out, n) (a placeholder if it keeps
        none)."""
        ids = self.ids[i]
        return _NO_IDS if ids is None else _view(ids, ids.shape[0] // self.capacity, n)


def _view(flat, *shape):
    return flat[:math.prod(shape)].reshape(shape)


class _Plan:
    """The layers of an architecture bound to their shapes, and the work-area sizes they need.

    Every layer kind names its host class (convnet.architecture.kinds); each class gives the
    per-case sizes of the work areas it uses (kept_per_case, grad_scratch) and the four steps the
    engine takes, all on blocks in (feature, case) order: step_forward (the activations, tanh
    included where the kind applies it), step_forward_t (forward only, net inputs), step_gradient
    (layers with weights) and step_delta (d criterion / d the prior layer's activations, or its
    net inputs when it applies tanh and its activations are handed in)."""

    def __init__(self, arch):
        self.arch = arch
        self.kinds = [L.kind for L in arch.layers]
        self.layers = [L.kind.host_layer(L) for L in arch.layers]
        self.output = arch.output.kind.host_layer(arch.output)
        self.n_classes = arch.n_classes
        self.n_weights = arch.n_weights
        self.n_inputs = arch.n_inputs
        self.slices = [L.weight_slice for L in arch.layers]
        self.out_slice = arch.output.weight_slice
        self.max_neurons = max([L.n_out for L in self.layers] + [1])
        self.grad_scratch = max([L.grad_scratch() for L in self.layers]
                                + [self.output.grad_scratch(), 1])
        self.labels = [f"Layer {i + 1} {k}" for i, k in enumerate(self.kinds)] + ["Output"]
        widest = max(s.stop - s.start for s in [*self.slices, self.out_slice])
        self.wide = all(k.whole_prior for k in self.kinds) and widest >= WIDE_WEIGHTS

    def bytes_per_case(self, gradient):
        floats = sum(L.n_out for L in self.layers) + self.n_inputs + self.n_classes
        floats += sum(L.kept_per_case() for L in self.layers)
        ints = sum(L.n_out for L, k in zip(self.layers, self.kinds) if k.keeps_winners)
        if gradient:
            floats += 2 * self.max_neurons
        return 8 * floats + 4 * ints


# ---------------------------------------------------------------------------------- one block
def _forward_block(plan, w, x, work, n, classes, want_delta, defer_tanh=False):
    """Forward pass of one block of n cases, in (feature, case) order from the transposed input
    block on; returns the block's -log likelihood sum. work.acts then hold the (n_out, n)
    activations, work.ids the max-pooling winners, work.cols the unrolled windows, and
    work.logits (n_classes, n) the probabilities, or p - t when want_delta.

    defer_tanh: a layer with tanh followed by max pooling keeps its net inputs and the pooling
    layer applies tanh to its pooled values (as the criterion pass does; tanh is monotonic, so
    the pooled values are the same, for a quarter or less of the tanh work). The backward pass
    needs nothing more: the pooling layer's delta takes tanh' from its pooled values. Only
    passes that need every activation (pictures, winners) leave it off."""
    sec, calls = work.seconds, work.calls
    prior = _view(work.inputs_t, plan.n_inputs, n)
    transpose_into(x, prior)
    nl = len(plan.layers)
    pending = False                       # prior holds net inputs whose tanh this layer applies
    for i, L in enumerate(plan.layers):
        t0 = time.perf_counter()
        out = _view(work.acts[i], L.n_out, n)
        defer = (defer_tanh and plan.kinds[i].applies_tanh and i + 1 < nl
                 and plan.kinds[i + 1].commutes_with_tanh)
        L.step_forward(w[plan.slices[i]], prior, out, work, i, n, not defer)
        if pending:
            tanh_inplace(out)
        pending = defer
        sec[i, FORWARD] += time.perf_counter() - t0
        calls[i, FORWARD] += 1
        prior = out
    t0 = time.perf_counter()
    logits = _view(work.logits, plan.n_classes, n)
    plan.output.forward_t(w[plan.out_slice], prior, logits)
    total = softmax_t(logits, classes, want_delta)
    sec[-1, FORWARD] += time.perf_counter() - t0
    calls[-1, FORWARD] += 1
    return total


def _criterion_block(plan, w, x, work, n, classes):
    """Forward pass of one block of n cases for the criterion alone; returns the block's -log
    likelihood sum. The same (feature, case) order as :func:`_forward_block`, but nothing the
    backward pass would need (unrolled windows, winner ids, probabilities) is kept, so LOCAL and
    CONV layers unroll their windows a run of positions at a time.

    tanh is monotonic, so a max pooling layer that follows a layer with tanh pools the net inputs
    and its pooled values get the tanh instead (the same values, for far fewer of them). Such a
    deferred tanh is timed with the layer that applies it."""
    sec, calls = work.seconds, work.calls
    prior = _view(work.inputs_t, plan.n_inputs, n)
    transpose_into(x, prior)
    pending = False                       # prior still needs its tanh
    for i, L in enumerate(plan.layers):
        t0 = time.perf_counter()
        out = _view(work.acts[i], L.n_out, n)
        kind = plan.kinds[i]
        if pending and not kind.commutes_with_tanh:
            tanh_inplace(prior)
            pending = False
        L.step_forward_t(w[plan.slices[i]], prior, out, work, i)
        if kind.applies_tanh:
            pending = True
        sec[i, FORWARD] += time.perf_counter() - t0
        calls[i, FORWARD] += 1
        prior = out
    t0 = time.perf_counter()
    if pending:
        tanh_inplace(prior)
    logits = _view(work.logits, plan.n_classes, n)
    plan.output.forward_t(w[plan.out_slice], prior, logits)
    total = softmax_criterion_t(logits, classes)
    sec[-1, FORWARD] += time.perf_counter() - t0
    calls[-1, FORWARD] += 1
    return total


def _backward_block(plan, w, work, n, g):
    """Backward pass of one block after :func:`_forward_block` with want_delta; adds the block's
    (unnormalised) gradient into g (n_weights). Each delta is made d criterion / d net inputs (times
    tanh') by the step that computes it, so that a max pooling layer hands down the tanh' of its
    winners with the delta itself."""
    sec, calls = work.seconds, work.calls
    nl = len(plan.layers)

    def act(i):
        return _view(work.acts[i], plan.layers[i].n_out, n) if i >= 0 else \
            _view(work.inputs_t, plan.n_inputs, n)

    def tanh_act(i):
        """Layer i's activations when it applies tanh (its delta needs tanh'), else None."""
        return act(i) if plan.kinds[i].applies_tanh else None

    def dact(i):
        # layers alternate between the two delta buffers, as the book's this_delta / prior_delta
        return _view(work.deltas[i % 2], plan.layers[i].n_out, n)

    dnet = _view(work.logits, plan.n_classes, n)
    t0 = time.perf_counter()
    plan.output.gradient(w[plan.out_slice], g[plan.out_slice], dnet, act(nl - 1), work.gtmp)
    t1 = time.perf_counter()
    sec[-1, GRADIENT] += t1 - t0
    calls[-1, GRADIENT] += 1
    if nl:
        plan.output.step_delta(w[plan.out_slice], dnet, dact(nl - 1), work, nl, n, None,
                               tanh_act(nl - 1))
        sec[nl - 1, DELTA] += time.perf_counter() - t1
        calls[nl - 1, DELTA] += 1
    for i in range(nl - 1, -1, -1):
        L = plan.layers[i]
        d = dact(i)
        wl = w[plan.slices[i]]
        t1 = time.perf_counter()
        if plan.kinds[i].has_weights:
            L.step_gradient(wl, g[plan.slices[i]], d, act(i - 1), work, i)
            t0, t1 = t1, time.perf_counter()
            sec[i, GRADIENT] += t1 - t0
            calls[i, GRADIENT] += 1
        if i > 0:
            L.step_delta(wl, d, dact(i - 1), work, i, n, act(i), tanh_act(i - 1))
            sec[i - 1, DELTA] += time.perf_counter() - t1
            calls[i - 1, DELTA] += 1


def _wait_all(futures):
    """Wait until every worker has finished, even through a KeyboardInterrupt (a worker must
    never be left writing into work areas that the next call uses); then re-raise it."""
    interrupted = None
    for f in futures:
        while True:
            try:
                f.exception()
                break
            except BaseException as e:      # interrupted while waiting: wait on, raise later
                interrupted = interrupted or e
    if interrupted is not None:
        raise interrupted


class _Job:
    """One computation over the cases, as the workers share it: its inputs (all cases of x, or
    x[cases]), classes, blocks and chunks, and the per-block sums and per-chunk gradients the
    workers write."""

    def __init__(self, plan, w, x, classes, mode, results, cases, blocks, chunks):
        self.plan, self.w, self.mode, self.results, self.cases = plan, w, mode, results, cases
        self.xf = x.reshape(x.shape[0], plan.n_inputs)
        self.classes = classes
        self.want_classes = classes.shape[0] > 0
        self.blocks, self.chunks = blocks, chunks
        self.gradient = mode == "gradient"
        self.totals = np.zeros(len(blocks))                  # each block's -log likelihood sum
        self.partials = np.empty((len(chunks), plan.n_weights)) if self.gradient else None

    def block_inputs(self, b0, b1):
        """The inputs of cases b0..b1-1 of the computation (gathered when it runs on a subset)."""
        return self.xf[b0:b1] if self.cases is None else self.xf[self.cases[b0:b1]]

    def run_chunks(self, wk, chunk_numbers):
        """One worker's share: the chunks numbered, each summed into a partial of its own (the
        blocks add straight into it)."""
        with wk.lock:
            for chunk in chunk_numbers:
                if self.gradient:
                    self.partials[chunk] = 0.0
                for block in range(*self.chunks[chunk]):
                    self.run_block(wk, block, chunk)

    def run_block(self, wk, block, chunk):
        """One block: its -log likelihood sum, and its gradient (into its chunk's partial),
        outputs, activations or winners as the computation asks."""
        plan, mode, results = self.plan, self.mode, self.results
        b0, b1 = self.blocks[block]
        count = b1 - b0
        inputs = self.block_inputs(b0, b1)
        classes = self.classes[b0:b1] if self.want_classes else _NO_CLASSES
        if mode == "criterion":
            self.totals[block] = _criterion_block(plan, self.w, inputs, wk, count, classes)
            return
        self.totals[block] = _forward_block(plan, self.w, inputs, wk, count, classes,
                                            self.gradient, mode in ("gradient", "outputs"))
        if self.gradient:
            _backward_block(plan, self.w, wk, count, self.partials[chunk])
        elif mode == "outputs":
            results[b0:b1] = _view(wk.logits, plan.n_classes, count).T
        elif mode == "activations":
            for i, layer in enumerate(plan.layers):
                results[i][b0:b1] = _view(wk.acts[i], layer.n_out, count).T
        elif mode == "winners":
            for i in results:
                results[i][b0:b1] = wk.ids_view(i, count).T

    def total(self):
        total = 0.0
        for v in self.totals:                            # block order, whatever the threads
            total += float(v)
        return total

    def gradient_sum(self):
        if not self.gradient:
            return None
        grad = self.partials[0].copy()
        for p in self.partials[1:]:                      # chunk order, whatever the threads
            grad += p
        return grad


# ---------------------------------------------------------------------------------- backend
class HostBackend:
    """CPU backend for one architecture.

    Parameters
    ----------
    arch : convnet.architecture.Architecture
    threads : int or None
        Worker threads; None means Numba's configured thread count (every core by default).
    """

    def __init__(self, arch, threads=None):
        self.arch = arch
        self._plan = _Plan(arch)
        self._threads = default_threads()
        self.threads = threads
        self._pool = None
        self._pool_size = 0
        self._works = {}                      # worker -> _Work
        self._call_lock = threading.Lock()
        n = len(arch.layers) + 1
        self._seconds = np.zeros((n, 3))
        self._calls = np.zeros((n, 3), dtype=np.int64)

    # -- threads
    @property
    def threads(self):
        return self._threads

    @threads.setter
    def threads(self, value):
        if value is None:
            value = default_threads()
        try:
            v = int(value)
        except (TypeError, ValueError):
            raise ConvnetError(f"the number of threads must be a whole number, not {value!r}") \
                from None
        if v != value or v < 1:
            raise ConvnetError(f"the number of threads must be at least 1, not {value!r}")
        self._threads = v

    def _executor(self, workers):
        if workers <= 0:
            return None
        if self._pool is None or self._pool_size < workers:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="convnet-host")
            self._pool_size = workers
        return self._pool

    def block_size(self, n_cases, threads=None):
        """Cases per block for a computation on n_cases cases: the per-case work areas of a
        gradient within BLOCK_BYTES, at most MAX_BLOCK, and small enough to cut the cases into
        MIN_BLOCKS blocks (a net of wide fully connected layers: WIDE_MAX_BLOCK and
        WIDE_MIN_BLOCKS). The same for criterion and gradient, so that both share the work
        areas, and independent of the thread count (``threads`` is accepted and ignored), so
        that results are too."""
        most, fewest = ((WIDE_MAX_BLOCK, WIDE_MIN_BLOCKS) if self._plan.wide
                        else (MAX_BLOCK, MIN_BLOCKS))
        b = max(1, min(most, BLOCK_BYTES // self._plan.bytes_per_case(True)))
        return max(1, min(b, -(-n_cases // fewest)))

    def partition(self, n_cases):
        """The blocks [(first, stop)] of a computation and their chunks [(first block, stop)]:
        at most MAX_CHUNKS chunks, fewer where their partial gradients would pass PARTIAL_BYTES.
        Neither depends on the thread count."""
        B = self.block_size(n_cases)
        blocks = [(s, min(s + B, n_cases)) for s in range(0, n_cases, B)]
        nb = len(blocks)
        c = min(nb, MAX_CHUNKS, max(1, PARTIAL_BYTES // (8 * max(1, self.arch.n_weights))))
        return blocks, [(k * nb // c, (k + 1) * nb // c) for k in range(c)]

    @staticmethod
    def _shares(blocks, chunks, T):
        """Contiguous runs of chunks for T workers with about n_cases / T cases each (a chunk goes
        to the worker whose share holds its middle case). Chunks hold one or more whole blocks,
        so equal numbers of chunks can differ by a block's worth of cases; which worker computes
        a chunk does not change any result."""
        n = blocks[-1][1]
        owner = [min(T - 1, T * (blocks[c0][0] + blocks[c1 - 1][1]) // (2 * n)) for c0, c1 in chunks]
        return [[c for c, o in enumerate(owner) if o == t] for t in range(T)]

    # -- the public interface
    def evaluator(self, inputs, classes, wpen=0.0):
        """Bind a data set: returns an object with criterion, gradient, outputs and n_cases."""
        return HostEvaluator(self, inputs, classes, wpen)

    def activations(self, weights, inputs):
        """Hidden activations: a list of (n_cases, n_neurons) arrays in (depth, height, width)
        order."""
        w = check_weights(self.arch, weights)
        x = check_inputs(self.arch, inputs)
        res = [np.empty((x.shape[0], L.n_out)) for L in self._plan.layers]
        self._run(w, x, _NO_CLASSES, "activations", res)
        return res

    def poolmax_winners(self, weights, inputs):
        """For every max-pooling layer (by index): (n_cases, n_neurons) int32 arrays holding the
        winner of each pooled neuron as row*prior_cols+col within its prior slice."""
        w = check_weights(self.arch, weights)
        x = check_inputs(self.arch, inputs)
        res = {i: np.empty((x.shape[0], L.n_out), dtype=np.int32)
               for i, L in enumerate(self._plan.layers) if self._plan.kinds[i].keeps_winners}
        self._run(w, x, _NO_CLASSES, "winners", res)
        return res

    def timings(self):
        """[(layer label, activity, calls, seconds)] summed over all calls so far; calls count
        blocks, seconds are summed over the worker threads."""
        out = []
        for i, label in enumerate(self._plan.labels):
            for a, name in enumerate(ACTIVITIES):
                if self._calls[i, a]:
                    out.append((label, name, int(self._calls[i, a]), float(self._seconds[i, a])))
        return out

    def reset_timings(self):
        self._seconds[:] = 0.0
        self._calls[:] = 0

    # -- the engine
    def _run(self, w, x, classes, mode, results=None, cases=None):
        """Run a computation over all cases of x, or over x[cases] when ``cases`` (int64 indices)
        is given: (sum of -log likelihood, gradient sum or None)."""
        n = x.shape[0] if cases is None else cases.shape[0]
        blocks, chunks = self.partition(n)
        n_workers = min(self._threads, len(chunks))
        works = self._work_areas(n_workers, blocks[0][1] - blocks[0][0], mode == "gradient")
        job = _Job(self._plan, w, x, classes, mode, results, cases, blocks, chunks)
        groups = self._shares(blocks, chunks, n_workers)
        with self._call_lock, single_threaded_blas():
            for wk in works:
                wk.seconds[:] = 0.0
                wk.calls[:] = 0
            pool = self._executor(n_workers - 1)
            futures = [pool.submit(job.run_chunks, works[t], groups[t])
                       for t in range(1, n_workers)] if n_workers > 1 else []
            try:
                job.run_chunks(works[0], groups[0])
            finally:
                _wait_all(futures)
            for f in futures:
                f.result()
            for wk in works:
                self._seconds += wk.seconds
                self._calls += wk.calls
            return job.total(), job.gradient_sum()

    def _work_areas(self, n_workers, block, gradient):
        """The work areas of n_workers workers for blocks of ``block`` cases (kept from call to
        call, made anew only when too small or without the gradient's areas)."""
        works = []
        for t in range(n_workers):
            wk = self._works.get(t)
            if wk is None or wk.capacity < block or (gradient and not wk.gradient):
                wk = _Work(self._plan, block, gradient or (wk is not None and wk.gradient))
                self._works[t] = wk
            works.append(wk)
        return works

    def close(self):
        """Stop the worker threads (they are also stopped at exit)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
            self._pool_size = 0


class HostEvaluator(Evaluator):
    """A data set bound to a :class:`HostBackend`: full-batch criterion, gradient and outputs
    (the contract in :mod:`convnet.evaluator`), over all its cases or, for an evaluator made by
    :meth:`subset`, over some of them."""

    def __init__(self, backend, inputs, classes, wpen=0.0):
        self.backend = backend
        self.inputs = self.bind(backend.arch, inputs, classes, wpen)
        self.cases = None                 # all cases of self.inputs, in order

    def subset(self, case_indices):
        """An evaluator over the cases ``case_indices`` (0-based, of this evaluator's cases) of
        the data already bound: it reads the same inputs array (no copy; a contiguous run of
        cases is a view of it, other cases are gathered a block at a time as they are
        computed), and its results equal, to the last bit, those of a fresh evaluator on those
        cases (the blocks depend only on the number of cases)."""
        sub = HostEvaluator.__new__(HostEvaluator)
        sub.backend = self.backend
        cases = sub.bind_subset(self.backend.arch, self, case_indices)
        if self.cases is not None:
            cases = self.cases[cases]
        first = int(cases[0])
        if np.array_equal(cases, np.arange(first, first + cases.size)):
            sub.inputs, sub.cases = self.inputs[first:first + cases.size], None
        else:
            sub.inputs, sub.cases = self.inputs, cases
        return sub

    def shifted(self, case_indices, shifts):
        """An evaluator over the cases ``case_indices`` moved by ``shifts`` (a fresh one over
        their moved copies: the same blocks, so the same bits as ``subset`` when nothing moves)."""
        from ..minibatch import shift_cases
        cases = check_cases(case_indices, self.n_cases)
        rows = cases if self.cases is None else self.cases[cases]
        classes = None if self.classes is None else self.classes[cases]
        return HostEvaluator(self.backend, shift_cases(self.inputs[rows], shifts), classes,
                             self.wpen)

    # The penalty's dot product runs with BLAS held to one thread too: woken for it, OpenBLAS's
    # threads keep spinning for a while afterwards and take a core from the next computation's
    # workers (measured: a 2-thread mnist-small gradient 0.11-0.13 s instead of 0.09 s).
    def criterion(self, weights):
        """Mean negative log likelihood per case and class plus the weight penalty."""
        b = self.backend
        w = check_weights(b.arch, weights)
        with single_threaded_blas():
            total, _ = b._run(w, self.inputs, self.need_classes(), "criterion", cases=self.cases)
            return total * self.scale + self.penalty.value(w)

    def gradient(self, weights):
        """(criterion, d criterion / d weights)."""
        b = self.backend
        w = check_weights(b.arch, weights)
        with single_threaded_blas():
            total, grad = b._run(w, self.inputs, self.need_classes(), "gradient",
                                 cases=self.cases)
            grad *= self.scale
            self.penalty.add_gradient(w, grad)
            return total * self.scale + self.penalty.value(w), grad

    def outputs(self, weights):
        """SoftMax outputs, (n_cases, n_classes)."""
        b = self.backend
        w = check_weights(b.arch, weights)
        res = np.empty((self.n_cases, b.arch.n_classes))
        b._run(w, self.inputs, _NO_CLASSES, "outputs", res, cases=self.cases)
        return res
