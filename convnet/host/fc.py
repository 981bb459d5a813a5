"""Fully connected layers (hidden and the output layer's logits) on a block of cases.

Each neuron has a weight for every prior activation, in (depth, height, width) order, then its
bias (Equation 1-3 with the bias folded in). Blocks are in (feature, case) order, so for a block of
n cases the layer is one matrix product:  net (D, n) = W[:, :N] (D, N) @ prior (N, n) + bias.
Backward, with dnet the derivative of the criterion with respect to the net inputs (Equations
1-14 / 1-20 and the sum of 1-19): dW[:, :N] += dnet @ prior.T,  dbias += row sums of dnet,
dprior = W[:, :N].T @ dnet.
"""

import numpy as np

from .activation import bias_tanh
from .output import tanh_backward


class FCLayer:
    """A fully connected layer bound to its shapes (also used for the output layer)."""

    def __init__(self, layer):
        self.layer = layer
        self.n_in = layer.n_prior
        self.n_out = layer.n_neurons
        self.npw = layer.n_prior_weights

    # work areas (see convnet.host.backend): only the gradient scratch
    def kept_per_case(self):
        return 0

    def grad_scratch(self):
        """Scratch for one block's weight gradient before it is added in."""
        return self.n_out * self.n_in

    def forward(self, w, priorT, outT, tanh=True):
        """A hidden layer: priorT (n_in, n) -> outT (n_out, n), the activations tanh(net) (the
        net inputs when tanh is False: a max pooling layer applies it to the pooled values)."""
        if not tanh:
            self.forward_t(w, priorT, outT)
            return
        W = w.reshape(self.n_out, self.npw)
        np.matmul(W[:, :self.n_in], priorT, out=outT)
        bias_tanh(outT.reshape(self.n_out, 1, outT.shape[1]), W[:, self.n_in:])

    def forward_t(self, w, priorT, outT):
        """priorT (n_in, n) -> outT (n_out, n), the net inputs (no tanh: the output layer's
        logits, or a hidden layer whose tanh the criterion-only pass applies later)."""
        W = w.reshape(self.n_out, self.npw)
        np.matmul(W[:, :self.n_in], priorT, out=outT)
        outT += W[:, self.n_in, None]

    def gradient(self, w, g, dnetT, priorT, gtmp):
        """dnetT (n_out, n) d criterion / d net inputs: adds the weight gradient into g (this
        layer's part of the gradient vector). gtmp: scratch of at least n_out*n_in elements."""
        G = g.reshape(self.n_out, self.npw)
        t = gtmp[:self.n_out * self.n_in].reshape(self.n_out, self.n_in)
        np.matmul(dnetT, priorT.T, out=t)
        G[:, :self.n_in] += t
        G[:, self.n_in] += dnetT.sum(axis=1)

    def delta(self, w, dnetT, dpriorT):
        """d criterion / d prior activations (the sum in Equation 1-19) into dpriorT (n_in, n)."""
        W = w.reshape(self.n_out, self.npw)
        np.matmul(W[:, :self.n_in].T, dnetT, out=dpriorT)

    # the steps the host backend takes for every layer kind (see convnet.host.backend)
    def step_forward(self, w, priorT, outT, work, i, n, tanh=True):
        self.forward(w, priorT, outT, tanh)

    def step_forward_t(self, w, priorT, outT, work, i):
        self.forward_t(w, priorT, outT)

    def step_gradient(self, w, g, dnetT, priorT, work, i):
        self.gradient(w, g, dnetT, priorT, work.gtmp)

    def step_delta(self, w, dnetT, dpriorT, work, i, n, act, prior_act):
        self.delta(w, dnetT, dpriorT)
        if prior_act is not None:
            tanh_backward(dpriorT, prior_act)
