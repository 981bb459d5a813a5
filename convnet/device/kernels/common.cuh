// Shared definitions for the device kernels (included by every .cu file in this folder).
#pragma once

// Gather-table codes (see plan.py): an entry >= 0 is an offset into the source row,
// A_ZERO reads the zero padding around the prior layer, A_ONE the constant input of the bias.
#define A_ZERO (-1)
#define A_ONE (-2)

// Epilogues of gemm_nn.
#define EPI_NONE 0    // output logits
#define EPI_TANH 1    // hidden activation, tanh
#define EPI_DERIV 2   // backpropagated delta times the prior layer's tanh derivative 1 - a^2

typedef long long i64;

// The delta of neuron (case m, position g, slice n) of a layer followed by a max-pooling layer
// whose windows tile it (stride = width), read from the pooled layer: dp (its delta), pids (its
// winners, row * pw1 + col) and pact (its activation, which is the winner's). The winner of a
// window gets the window's delta times its tanh derivative, every other neuron 0: the same
// numbers, bit for bit, as pool_backward writing the layer's delta out.
// pool_window: where position g's window starts in a pooled case row, or -1 if no window holds g.
__device__ __forceinline__ int pool_window(int g, int depth, int pw1, int ph2, int pw2, int psv,
                                           int psh)
{
    const int r = g / pw1;
    const int c = g - r * pw1;
    const int pr = r / psv, pc = c / psh;
    return (pr < ph2 && pc < pw2) ? (pr * pw2 + pc) * depth : -1;
}

__device__ __forceinline__ float delta_from_pool(
    const float* __restrict__ dp, const int* __restrict__ pids, const float* __restrict__ pact,
    i64 m, int g, int n, int window, int pnhid)
{
    if (window < 0) return 0.f;
    const i64 k = m * pnhid + window + n;
    const int id = pids[k];
    const float dv = dp[k];
    const float a = pact[k];
    return id == g ? dv * (1.f - a * a) : 0.f;
}
