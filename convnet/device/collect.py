"""A forward pass's hidden activations and max pooling's winners, read back to the host (for
displays and checks: not on any training path)."""

import numpy as np

from .layout import activations_to_host


def _forward_collect(ev, weights, collect):
    """A forward pass of ev's cases at the host weights, batch by batch, collect(start, stop)
    after each."""
    b = ev.backend
    rt = b.rt
    with rt.active():
        b.timer.start(rt.stream)
        b._set_weights(weights)
        for start, stop in ev.batches:
            ev._forward(start, stop, want_delta=False, fused=False)
            rt.stream.synchronize()
            collect(start, stop)
        b.timer.resolve()


def activations(ev, weights):
    """Every hidden layer's activations of ev's cases, in the host's layout."""
    b = ev.backend
    plan = b.plan
    res = [np.empty((ev.n_cases, lp.nhid), np.float32) for lp in plan.hidden]

    def collect(start, stop):
        for i, lp in enumerate(plan.hidden):
            b.rt.cuda.memcpy_dtoh(res[i][start:stop], ev.ws.acts[i])

    _forward_collect(ev, weights, collect)
    return [activations_to_host(r, lp.layer.height, lp.layer.width, lp.layer.depth)
            for r, lp in zip(res, plan.hidden)]


def winners(ev, weights):
    """{layer index: the winners' indices} of ev's cases for each max pooling layer, in the
    host's layout."""
    b = ev.backend
    plan = b.plan
    res = {lp.index: np.empty((ev.n_cases, lp.nhid), np.int32)
           for lp in plan.hidden if lp.kind.keeps_winners}

    def collect(start, stop):
        for i, r in res.items():
            b.rt.cuda.memcpy_dtoh(r[start:stop], ev.ws.ids[i])

    _forward_collect(ev, weights, collect)
    out = {}
    for i, r in res.items():
        L = plan.layers[i].layer
        out[i] = np.ascontiguousarray(r.reshape(-1, L.height, L.width, L.depth)
                                      .transpose(0, 3, 1, 2)).reshape(r.shape[0], -1)
    return out
