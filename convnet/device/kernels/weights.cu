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

// ------------------------------------------------------------------ the line search's points
// A line search evaluates x + t * d for several t. With x and d kept on the device (float64),
// each trial point is formed here instead of on the host, so a trial costs the host no pass over
// the weights. Each block covers LINE_BLOCK weights; its partial sums are added in block order by
// vec_finish, so every sum depends on nothing but the number of weights.
#define LINE_THREADS 256
#define LINE_PER_THREAD 16
#define LINE_BLOCK (LINE_THREADS * LINE_PER_THREAD)

// The block's LINE_THREADS values summed in a fixed tree; thread 0 gets the total.
__device__ __forceinline__ double line_block_sum(double v)
{
    __shared__ double s[LINE_THREADS];
    __syncthreads();                    // a previous call's readers of s[0] are done
    s[threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int half = LINE_THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) s[threadIdx.x] = __dadd_rn(s[threadIdx.x], s[threadIdx.x + half]);
        __syncthreads();
    }
    return s[0];
}

// w = x + t * d rounded to float32 (the product and the sum each rounded, as the host's
// step_into computes them: no fused multiply-add, so the float32 weights are those the host
// would send), and per block the sum of w^2 over the penalised weights (mask). With t NULL,
// w = x: the weights the host sent (float64), rounded here.
extern "C" __global__ void line_point(
    const double* __restrict__ x, const double* __restrict__ d, const double* __restrict__ t,
    int n, const unsigned char* __restrict__ mask, float* __restrict__ w32,
    double* __restrict__ pen_part)
{
    const bool step = t != nullptr;
    const double tt = step ? *t : 0.0;
    const int base = blockIdx.x * LINE_BLOCK + threadIdx.x;
    double acc = 0.0;
#pragma unroll 4
    for (int j = 0; j < LINE_PER_THREAD; ++j) {
        const int i = base + j * LINE_THREADS;
        if (i < n) {
            const double v = step ? __dadd_rn(x[i], __dmul_rn(tt, d[i])) : x[i];
            w32[i] = __double2float_rn(v);
            if (mask[i]) acc = __dadd_rn(acc, __dmul_rn(v, v));
        }
    }
    const double total = line_block_sum(acc);
    if (threadIdx.x == 0) pen_part[blockIdx.x] = total;
}

// ------------------------------------------------------------------ the refinement's vectors
// The optimizer's own vector operations when its vectors live on the device (line.py,
// DeviceVectors): the element operations of convnet/vectors.py's passes, each product and sum
// rounded as there; sums in LINE_BLOCK blocks, then the blocks in order (vec_finish).
extern "C" __global__ void vec_step(double* __restrict__ out, const double* __restrict__ x,
                                    double t, const double* __restrict__ d, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __dadd_rn(x[i], __dmul_rn(t, d[i]));
}

// d = beta * d - g (the conjugate direction, in place)
extern "C" __global__ void vec_direction(double* __restrict__ d, double beta,
                                         const double* __restrict__ g, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = __dsub_rn(__dmul_rn(beta, d[i]), g[i]);
}

extern "C" __global__ void vec_neg(double* __restrict__ out, const double* __restrict__ v, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = -v[i];
}

// Per block: mode 0, the sum of a * b (part[block]); mode 1, the sums of a * a and of
// a * (a - b) (part[block] and part[blocks + block]: the Polak-Ribiere beta's two sums).
extern "C" __global__ void vec_sums(const double* __restrict__ a, const double* __restrict__ b,
                                    int n, int mode, double* __restrict__ part)
{
    const int base = blockIdx.x * LINE_BLOCK + threadIdx.x;
    double s0 = 0.0, s1 = 0.0;
#pragma unroll 4
    for (int j = 0; j < LINE_PER_THREAD; ++j) {
        const int i = base + j * LINE_THREADS;
        if (i < n) {
            const double ai = a[i];
            if (mode == 0) {
                s0 = __dadd_rn(s0, __dmul_rn(ai, b[i]));
            } else {
                s0 = __dadd_rn(s0, __dmul_rn(ai, ai));
                s1 = __dadd_rn(s1, __dmul_rn(ai, __dsub_rn(ai, b[i])));
            }
        }
    }
    const double t0 = line_block_sum(s0);
    if (threadIdx.x == 0) part[blockIdx.x] = t0;
    if (mode != 0) {
        const double t1 = line_block_sum(s1);
        if (threadIdx.x == 0) part[gridDim.x + blockIdx.x] = t1;
    }
}

// out[j] = the sum of part[j * n_parts + b] over the blocks b, in order, for j < k
extern "C" __global__ void vec_finish(const double* __restrict__ part, int n_parts, int k,
                                      double* __restrict__ out)
{
    if (blockIdx.x != 0 || threadIdx.x >= k) return;
    double s = 0.0;
    for (int b = 0; b < n_parts; ++b) s = __dadd_rn(s, part[threadIdx.x * n_parts + b]);
    out[threadIdx.x] = s;
}
