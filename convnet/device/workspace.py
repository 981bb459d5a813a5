"""Device work buffers of one batch size, as the kernel plan counts them (kernel_plan.BatchPlan)."""

from .plan import CHUNK


class Workspace:
    """Device buffers of one batch size: activations, max-pooling winners, two delta buffers,
    gradient partial-sum scratch and (CONV layers) float64 per-chunk totals. Their sizes and the
    gradient's launch splits are the BatchPlan's (batch.buffers, batch.splits)."""

    def __init__(self, backend, batch):
        plan = backend.plan
        self.nb = batch.batch_cases
        self.splits = batch.splits      # layer index -> kernel_plan.GradientSplit
        self.sizes = batch.buffers      # (name, bytes) for CUDA.LOG, in allocation order
        sizes = iter(n for _, n in batch.buffers)
        self.acts = []
        self.ids = {}
        for lp in plan.layers:
            self.acts.append(backend.alloc(next(sizes)))
            if lp.kind.keeps_winners:
                self.ids[lp.index] = backend.alloc(next(sizes))
        delta_bytes = next(sizes) // 2
        self.deltas = [backend.alloc(delta_bytes), backend.alloc(delta_bytes)]
        self.scratch = backend.alloc(next(sizes))
        self.chunk_tot = backend.alloc(next(sizes))


def allocation_lines(backend, batch):
    """CUDA.LOG section 3: what an evaluator allocated on the device and how it splits the work
    (batch: its kernel_plan.BatchPlan)."""
    b = backend
    mib = 2.0 ** 20
    nb = batch.batch_cases
    lines = [f"Training data and per-case results ({batch.n_cases} cases): "
             f"{batch.data_bytes / mib:.2f} MiB",
             f"Weights, device layouts and index tables: {batch.static_bytes / mib:.2f} MiB",
             f"Batch size {nb} cases, {batch.n_batches} batch(es) "
             f"(MAX BATCH {'automatic' if b.max_batch is None else b.max_batch})"]
    for name, nbytes in batch.buffers:
        lines.append(f"   {name}: {nbytes / mib:.2f} MiB")
    lines.append(f"Gradient partial sums: chunks of {CHUNK} cases; MAX HID GRAD {b.max_hid_grad}, "
                 f"MAX MEM GRAD {b.max_mem_grad} MB")
    for lp in b.plan.layers:
        split = batch.splits.get(lp.index)
        if split is None:
            continue
        grad = lp.grad
        what = "neurons" if lp.kind.whole_prior else "slices"
        lines.append(f"   {b.labels[lp.index]}: {grad.rows} x {lp.depth} weights"
                     f"{' per position' if grad.local_cols else ''}, {split.slices_per_launch} "
                     f"{what} per launch, {split.launches} launch(es) per batch, scratch "
                     f"{4 * split.scratch_floats / mib:.2f} MiB, "
                     f"{grad.n_partials(nb, split.slots)} partial sums per batch"
                     + (f" ({split.positions_per_slot} positions each)"
                        if lp.kind.shares_weights else ""))
    lines.append(f"Total device memory allocated: {batch.total_bytes / mib:.2f} MiB")
    return lines
