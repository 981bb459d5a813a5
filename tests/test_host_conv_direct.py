"""The direct CONV kernels (convnet.host.conv_direct) against the unrolled windows' products, and the
host backend with and without them."""

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.host import conv_direct
from convnet.host.backend import HostBackend
from convnet.host.local_conv import unroll_windows


def windows_reference(priorT, W, S, IR, IC, nfv, nfh, pv, ph):
    """Net inputs (D, R*C*n) and the unrolled windows (K, R*C*n), the products of local_conv."""
    n = priorT.shape[1]
    R, C = IR + 2 * pv - nfv + 1, IC + 2 * ph - nfh + 1
    K = S * nfv * nfh
    cols = np.empty((K, R * C, n))
    unroll_windows(priorT, S, IR, IC, R, C, nfv, nfh, pv, ph, 1, 1, cols)
    cols = cols.reshape(K, R * C * n)
    return W[:, :K] @ cols + W[:, K:], cols


# S, IR, IC, nfv, nfh, pv, ph, D, n: one plane and several, every tap grouping (5, 3, 1 and their
# sums), padding on either axis up to the half-width, odd and even depths, rows longer than a piece
GEOMETRIES = [
    (1, 28, 28, 5, 5, 0, 0, 8, 64),      # mnist-small's first layer, rows of 1536 values
    (1, 28, 28, 5, 5, 0, 0, 7, 13),
    (1, 12, 12, 3, 3, 1, 1, 6, 5),       # the manual's example: 3 x 3, padded
    (3, 9, 11, 5, 5, 2, 2, 5, 3),        # RGB, padded to full size
    (2, 7, 10, 1, 7, 0, 3, 3, 4),        # 7 taps a row (5 + 1 + 1), padding on one axis
    (1, 6, 9, 3, 9, 1, 4, 2, 2),         # 9 taps (5 + 3 + 1), windows wider than half the row
    (2, 5, 5, 5, 5, 2, 2, 1, 9),         # one filter, most columns in the padding
    (1, 4, 30, 1, 4, 0, 1, 4, 40),       # 4 taps (3 + 1)
]


@pytest.mark.parametrize("S,IR,IC,nfv,nfh,pv,ph,D,n", GEOMETRIES)
def test_direct_kernels_match_the_unrolled_products(S, IR, IC, nfv, nfh, pv, ph, D, n):
    rng = np.random.default_rng(S * 1000 + IC * 10 + D)
    R, C = IR + 2 * pv - nfv + 1, IC + 2 * ph - nfh + 1
    K = S * nfv * nfh
    priorT = rng.uniform(-1, 1, (S * IR * IC, n))
    W = rng.normal(0, 0.5, (D, K + 1))
    want, cols = windows_reference(priorT, W, S, IR, IC, nfv, nfh, pv, ph)

    out = np.full((D, R * C * n), np.nan)
    conv_direct.conv_forward(priorT, W, S, IR, IC, R, C, nfv, nfh, pv, ph, out)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)

    dnet = rng.normal(0, 1, (D, R * C * n))
    G = rng.normal(0, 1, (D, K + 1))
    G0 = G.copy()
    conv_direct.conv_weight_gradient(priorT, dnet, S, IR, IC, R, C, nfv, nfh, pv, ph, G)
    np.testing.assert_allclose(G[:, :K] - G0[:, :K], dnet @ cols.T, rtol=1e-10, atol=1e-10)
    assert np.array_equal(G[:, K], G0[:, K])         # the bias is left to the caller


def test_which_layers_go_direct():
    arch = Architecture.from_lines(
        ["CONVOLUTIONAL LAYER 8 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
         "CONVOLUTIONAL LAYER 4 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 4 1 1 1 1 2 2",
         "LOCAL LAYER 3 1 1 1 1 1 1", "FULLY CONNECTED LAYER 5"], 28, 28, 1, 10)
    # 25 weights; 8 slices x 9 = 72; stride 2; LOCAL
    assert [conv_direct.fits(L) for L in arch.layers[:5]] == [True, False, False, False, False]
    two = Architecture.from_lines(["CONVOLUTIONAL LAYER 4 1 1 1 1 1 1"], 10, 10, 2, 3)
    assert conv_direct.fits(two.layers[0])           # 2 planes x 9 weights
    rgb = Architecture.from_lines(["CONVOLUTIONAL LAYER 4 2 2 2 2 1 1"], 10, 10, 3, 3)
    assert not conv_direct.fits(rgb.layers[0])       # 3 planes x 25 weights: the products


NETS = [
    (["CONVOLUTIONAL LAYER 8 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 6"],
     16, 16, 1, 5),
    (["CONVOLUTIONAL LAYER 5 1 1 1 1 1 1", "CONVOLUTIONAL LAYER 3 1 1 1 0 1 1",
      "POOLED AVERAGE LAYER 2 2 2 2"], 9, 10, 2, 3),
]


@pytest.mark.parametrize("net", range(len(NETS)))
@pytest.mark.parametrize("threads", [1, 2])
def test_backend_agrees_with_and_without_the_direct_path(net, threads, monkeypatch):
    lines, rows, cols, bands, classes = NETS[net]
    arch = Architecture.from_lines(lines, rows, cols, bands, classes)
    assert any(conv_direct.fits(L) for L in arch.layers)
    rng = np.random.default_rng(net)
    w = rng.normal(0, 0.4, arch.n_weights)
    x = rng.uniform(-1, 1, (70, bands, rows, cols))
    y = rng.integers(0, classes, 70)

    def evaluate():
        be = HostBackend(arch, threads=threads)
        ev = be.evaluator(x, y, 0.001)
        crit = ev.criterion(w)
        gcrit, grad = ev.gradient(w)
        return crit, gcrit, grad, ev.outputs(w), be.activations(w, x)

    crit, gcrit, grad, outputs, acts = evaluate()
    assert crit == gcrit                    # the criterion pass and the gradient pass agree
    monkeypatch.setattr(conv_direct, "fits", lambda layer: False)
    crit0, _, grad0, outputs0, acts0 = evaluate()
    assert abs(crit - crit0) <= 1e-13 * abs(crit0)
    assert np.linalg.norm(grad - grad0) <= 1e-12 * np.linalg.norm(grad0)
    np.testing.assert_allclose(outputs, outputs0, rtol=0, atol=1e-13)
    for a, a0 in zip(acts, acts0):
        np.testing.assert_allclose(a, a0, rtol=0, atol=1e-13)
