// Weights in and gradient out: host order (float64) <-> the device's padded layouts.

#include "common.cuh"

// w: host-order weights (rounded to float32 on the host). fwd_index[i]: place in the forward
// layout; bwd_index[i]: place in the backward layout or -1 (biases). The padding of both layouts
// stays zero.
extern "C" __global__ void weights_scatter(
    const float* __restrict__ w, int n, const int* __restrict__ fwd_index,
    const int* __restrict__ bwd_index, float* __restrict__ fwd, float* __restrict__ bwd)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = w[i];
    fwd[fwd_index[i]] = v;
    const int b = bwd_index[i];
    if (b >= 0) bwd[b] = v;
}

// A convolutional layer's partial sums come in chunks of `slots` partials (one per range of
// positions); first each chunk's slots are added, in order, in float64:
//     tot[c][i] = sum over s of part[c * slots + s][i]        (i < pstride)
extern "C" __global__ void grad_slot_sum(
    const float* __restrict__ part, int slots, int chunks, int pstride, double* __restrict__ tot)
{
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)chunks * pstride) return;
    const int c = (int)(idx / pstride);
    const int i = (int)(idx - (i64)c * pstride);
    const float* p = part + (i64)c * slots * pstride + i;
    double s = 0.0;
    for (int k = 0; k < slots; ++k) s += (double)p[(i64)k * pstride];
    tot[idx] = s;
}

// Adds the partial sums of one gradient launch, partial after partial in float64, into acc
// (host order). part: n_part blocks of R rows x pld columns. Column c of a row is slice
// n_lo + c (LOCAL: position c / NL, slice n_lo + c % NL) of the device forward layout, whose
// rows are ldw long; dev2host maps that layout (this layer's part of it) to host order.
template <typename T>
__device__ __forceinline__ void grad_flatten_body(
    const T* __restrict__ part, int n_part, int R, int pld, int NL, int n_lo, int depth,
    int local_cols, int ldw, const int* __restrict__ dev2host, double* __restrict__ acc)
{
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 pstride = (i64)R * pld;
    if (idx >= pstride) return;
    const int k = (int)(idx / pld);
    const int c = (int)(idx - (i64)k * pld);
    const int col = local_cols ? (c / NL) * depth + n_lo + c % NL : n_lo + c;
    const int h = dev2host[(i64)k * ldw + col];
    double s = acc[h];
    for (int p = 0; p < n_part; ++p) s += (double)part[p * pstride + idx];
    acc[h] = s;
}

extern "C" __global__ void grad_flatten(
    const float* __restrict__ part, int n_part, int R, int pld, int NL, int n_lo, int depth,
    int local_cols, int ldw, const int* __restrict__ dev2host, double* __restrict__ acc)
{
    grad_flatten_body<float>(part, n_part, R, pld, NL, n_lo, depth, local_cols, ldw, dev2host, acc);
}

extern "C" __global__ void grad_flatten_d(
    const double* __restrict__ part, int n_part, int R, int pld, int NL, int n_lo, int depth,
    int local_cols, int ldw, const int* __restrict__ dev2host, double* __restrict__ acc)
{
    grad_flatten_body<double>(part, n_part, R, pld, NL, n_lo, depth, local_cols, ldw, dev2host, acc);
}

// grad[i] = acc[i] * scale + pen2 * w[i] for penalised (non-bias) weights.
extern "C" __global__ void grad_finish(
    const double* __restrict__ acc, const float* __restrict__ w,
    const unsigned char* __restrict__ mask, int n, double scale, double pen2,
    double* __restrict__ grad)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double g = acc[i] * scale;
    if (mask[i]) g += pen2 * (double)w[i];
    grad[i] = g;
}
