"""PRINT WEIGHTS: every weight of the model, in the layout of the book's listing (p.169-172).

One heading per weight set, then one line per weight: the value with 6 decimals (indented five
blanks) and what it connects to, the bias last. Layers are numbered from 1, the output layer last.

    Convolutional  Layer i of L (Convolutional) Slice s of S            one weight set per slice
    Local          Layer i of L (Local) Slice s of S Row r of R Col c of C   one per neuron
    Fully conn.    Layer i of L (Full) Slice (this neuron) s of S       one per neuron (incl. output)
    Pooling        Layer i of L (Max pool) H rows by W cols by D slices  (no weights: one line)
                   Layer i of L (Avg pool) H rows by W cols by D slices

A weight line names the prior layer's slice (``Input band k`` when the prior layer is the input
image) and the position within that slice as ``Neuron j``, counted from 1 row by row: for a
convolutional or local layer the position inside the filter (1 .. filter height x width), for a fully
connected layer the position inside the prior slice (1 .. prior height x width). This is the order of
the weights in the host weight vector, so the listing can be read back against SAVE MODEL or the
Python API.

Two details differ from the book's printed sample, which we take for slips of the original: its
sample labels a max-pooling layer "(Mean pool)" (we write "(Max pool)"), and has no blank between
"(Local)" and "Slice".
"""

INDENT = "     "


def _prior_name(layer):
    return "Input band" if layer.index == 0 else "Prior layer slice"


def _weight_set(lines, values, prior, n_prior_slices, per_slice):
    """Lines for one neuron's (or one slice's) weights: prior slices x positions, then the bias."""
    k = 0
    for p in range(n_prior_slices):
        for j in range(per_slice):
            lines.append(f"{INDENT}{values[k]:.6f} {prior} {p + 1} Neuron {j + 1}")
            k += 1
    lines.append(f"{INDENT}{values[k]:.6f} BIAS")


def format_weights(arch, weights):
    """The PRINT WEIGHTS listing as a list of lines (see the module notes)."""
    n_layers = arch.n_layers
    lines = []
    for layer in arch.all_layers:
        head = f"Layer {layer.index + 1} of {n_layers}"
        heading = layer.kind.listing_heading(layer)
        if heading is not None:
            lines.append(f"{head} {heading}")
        w = weights[layer.weight_slice]
        npw = layer.n_prior_weights
        prior = _prior_name(layer)
        # the kind gives its weight sets in weight order, with their labels
        for n, (label, per) in enumerate(layer.kind.weight_sets(layer)):
            lines.append(f"{head} {label}")
            _weight_set(lines, w[n * npw:(n + 1) * npw], prior, layer.prior_depth, per)
    return lines
