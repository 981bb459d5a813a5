"""Fully connected layers (hidden and the output layer's logits) on a block of cases.

Each neuron has a weight for every prior activation, in (depth, height, width) order, then its
bias (Equation 1-3 with the bias folded in). For a block of n cases the layer is one matrix
product:  net (n, D) = prior (n, N) @ W[:, :N].T + bias.  Backward, with dnet the derivative of the
criterion with respect to the net inputs (Equations 1-14 / 1-20 and the sum of 1-19):
dW[:, :N] += dnet.T @ prior,  dbias += column sums of dnet,  dprior = dnet @ W[:, :N].
"""

import numpy as np


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

    def net_per_case(self):
        return 0

    def prior_per_case(self):
        return 0

    def grad_scratch(self):
        """Scratch for one block's weight gradient before it is added in."""
        return self.n_out * self.n_in

    def forward(self, w, prior, out):
        """prior (n, n_in) -> out (n, n_out) net inputs (the caller applies tanh if hidden)."""
        W = w.reshape(self.n_out, self.npw)
        np.matmul(prior, W[:, :self.n_in].T, out=out)
        out += W[:, self.n_in]

    def forward_t(self, w, priorT, outT):
        """Forward only, in (feature, case) order: priorT (n_in, n) -> outT (n_out, n)."""
        W = w.reshape(self.n_out, self.npw)
        np.matmul(W[:, :self.n_in], priorT, out=outT)
        outT += W[:, self.n_in, None]

    def gradient(self, w, g, dnet, prior, gtmp):
        """dnet (n, n_out) d criterion / d net inputs: adds the weight gradient into g (this
        layer's part of the gradient vector). gtmp: scratch of at least n_out*n_in elements."""
        G = g.reshape(self.n_out, self.npw)
        t = gtmp[:self.n_out * self.n_in].reshape(self.n_out, self.n_in)
        np.matmul(dnet.T, prior, out=t)
        G[:, :self.n_in] += t
        G[:, self.n_in] += dnet.sum(axis=0)

    def delta(self, w, dnet, dprior):
        """d criterion / d prior activations (the sum in Equation 1-19) into dprior (n, n_in)."""
        W = w.reshape(self.n_out, self.npw)
        np.matmul(dnet, W[:, :self.n_in], out=dprior)

    # the steps the host backend takes for every layer kind (see convnet.host.backend)
    def step_forward(self, w, prior, out, work, i, n):
        self.forward(w, prior, out)

    def step_forward_t(self, w, priorT, outT, work, i):
        self.forward_t(w, priorT, outT)

    def step_gradient(self, w, g, dnet, prior, work, i):
        self.gradient(w, g, dnet, prior, work.gtmp)

    def step_delta(self, w, dnet, dprior, work, i, n):
        self.delta(w, dnet, dprior)
