"""Device work buffers of one batch size, and how the weight gradient is cut into launches."""

from .plan import CHUNK, gradient_launch_slices


class Workspace:
    """Device buffers of one batch size: activations, max-pooling winners, two delta buffers,
    gradient partial-sum scratch and (CONV layers) float64 per-chunk totals."""

    def __init__(self, backend, nb, n_total):
        plan = backend.plan
        self.nb = nb
        self.acts = []
        self.ids = {}
        self.sizes = []          # (name, bytes) for CUDA.LOG
        for lp in plan.layers:
            self.acts.append(backend.alloc(4 * nb * lp.nhid))
            self.sizes.append((f"{backend.labels[lp.index]} activations", 4 * nb * lp.nhid))
            if lp.kind.keeps_winners:
                self.ids[lp.index] = backend.alloc(4 * nb * lp.nhid)
                self.sizes.append((f"{backend.labels[lp.index]} max-pooling winners", 4 * nb * lp.nhid))
        self.deltas = [backend.alloc(4 * nb * plan.max_nhid), backend.alloc(4 * nb * plan.max_nhid)]
        self.sizes.append(("delta (two buffers)", 8 * nb * plan.max_nhid))
        # gradient launches and their partial-sum scratch
        self.splits = {}
        scratch = 1
        for lp in plan.layers:
            if lp.grad is None:
                continue
            gps, slots = backend.grad_slots(lp, n_total)
            per = gradient_launch_slices(lp.grad, nb, backend.max_hid_grad, backend.max_mem_grad, slots)
            launches = -(-lp.depth // per)
            floats = lp.grad.scratch_floats(nb, per, slots)
            self.splits[lp.index] = (per, launches, floats, gps, slots)
            scratch = max(scratch, floats)
        self.scratch_floats = scratch
        self.scratch = backend.alloc(4 * scratch)
        self.sizes.append(("gradient partial-sum scratch", 4 * scratch))
        # float64 per-chunk totals of convolutional layers' partial sums
        tot = 1
        chunks = -(-nb // CHUNK)
        for lp in plan.layers:
            if lp.grad is not None and lp.kind.shares_weights:
                per, _, _, _, slots = self.splits[lp.index]
                if slots > 1:
                    tot = max(tot, chunks * lp.grad.rows * per)
        self.chunk_tot = backend.alloc(8 * tot)
        self.sizes.append(("convolution gradient chunk totals (float64)", 8 * tot))


def allocation_lines(backend, ws, n_cases, nb, n_batches, data_bytes):
    """CUDA.LOG section 3: what an evaluator allocated on the device and how it splits the work."""
    b = backend
    mib = 2.0 ** 20
    lines = [f"Training data and per-case results ({n_cases} cases): {data_bytes / mib:.2f} MiB",
             f"Weights, device layouts and index tables: {b.static_bytes / mib:.2f} MiB",
             f"Batch size {nb} cases, {n_batches} batch(es) "
             f"(MAX BATCH {'automatic' if b.max_batch is None else b.max_batch})"]
    for name, nbytes in ws.sizes:
        lines.append(f"   {name}: {nbytes / mib:.2f} MiB")
    lines.append(f"Gradient partial sums: chunks of {CHUNK} cases; MAX HID GRAD {b.max_hid_grad}, "
                 f"MAX MEM GRAD {b.max_mem_grad} MB")
    for lp in b.plan.layers:
        if lp.index not in ws.splits:
            continue
        per, launches, floats, gps, slots = ws.splits[lp.index]
        gp = lp.grad
        what = "neurons" if lp.kind.whole_prior else "slices"
        lines.append(f"   {b.labels[lp.index]}: {gp.rows} x {lp.depth} weights"
                     f"{' per position' if gp.local_cols else ''}, {per} {what} per launch, "
                     f"{launches} launch(es) per batch, scratch {4 * floats / mib:.2f} MiB, "
                     f"{gp.n_partials(nb, slots)} partial sums per batch"
                     + (f" ({gps} positions each)" if lp.kind.shares_weights else ""))
    total = data_bytes + b.static_bytes + sum(n for _, n in ws.sizes)
    lines.append(f"Total device memory allocated: {total / mib:.2f} MiB")
    return lines
