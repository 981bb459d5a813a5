// Activation of a convolutional layer with few slices (at most 32) and a small filter, computed
// directly: one thread per neuron position of one case works out every slice of that position,
// the layer's whole weight matrix sitting in shared memory. Adjacent threads take adjacent
// positions, so their reads of the prior layer overlap and coalesce; the block's results are
// gathered in shared memory and written out as one contiguous run. Used where the tiled
// products of gemm.cu would spend most of their time starting and finishing tiles (a first
// layer with a 5x5 filter on one band has only 26 weights per slice).
//
// The sum runs over the filter rows, columns and prior slices in the same order as gemm_nn's k,
// skipping the zero padding (whose products add exactly nothing), then adds the bias: the result
// is the same, bit for bit, as the tiled product's.

#include "common.cuh"

#define CONV_SMALL_THREADS 128

// The layer's weight matrix (K rows of N slices, ldw floats apart) into shared memory, NP floats
// a row, the slices from N on zero.
__device__ __forceinline__ void conv_small_weights(float* Bs, const float* __restrict__ Wf,
                                                   int ldw, int N, int K, int NP)
{
    for (int i = threadIdx.x; i < K * NP; i += blockDim.x) {
        const int k = i / NP;
        const int n = i - k * NP;
        Bs[i] = n < N ? Wf[(i64)k * ldw + n] : 0.f;
    }
    __syncthreads();
}

// A block stages its results in shared memory, one row of N values a thread, rows N | 1 floats
// apart: with an odd stride the 32 threads of a warp store each slice into 32 different banks
// (N floats apart, 32 slices would put a warp's stores of one slice all in one bank).
__device__ __forceinline__ int conv_small_stage_row(int N) { return N | 1; }

// Copy the first `count` staged values (rows of N, conv_small_stage_row(N) apart) to o as one
// contiguous run.
template <typename T>
__device__ __forceinline__ void conv_small_copy_out(const T* staged, T* __restrict__ o, int count,
                                                    int N)
{
    const int stride = conv_small_stage_row(N);
    const int row_step = CONV_SMALL_THREADS / N;
    const int col_step = CONV_SMALL_THREADS - row_step * N;
    int row = threadIdx.x / N;
    int col = threadIdx.x - row * N;
    for (int i = threadIdx.x; i < count; i += CONV_SMALL_THREADS) {
        o[i] = staged[row * stride + col];
        row += row_step;
        col += col_step;
        if (col >= N) {
            col -= N;
            ++row;
        }
    }
}

// The pooled values and winners a block staged for the pooled positions from base on (N slices
// each), written out as one contiguous run each (the winners only where pids is not null: a
// forward-only evaluation does not need them).
__device__ __forceinline__ void conv_small_pool_store(const float* Os, const int* Is,
                                                      float* __restrict__ pout,
                                                      int* __restrict__ pids, int base, int total,
                                                      int N)
{
    __syncthreads();
    const int count = min(CONV_SMALL_THREADS, total - base) * N;
    conv_small_copy_out(Os, pout + (i64)base * N, count, N);
    if (pids) conv_small_copy_out(Is, pids + (i64)base * N, count, N);
    __syncthreads();
}

// The frame of both pooled kernels below: the weights into shared memory (K rows of NP, the bias
// row last), then blocks of CONV_SMALL_THREADS pooled positions (H2 x W2 a case), one a thread:
// position(x, pr, pc, Bs, os, is) computes pooled row pr, column pc of the case whose prior
// activations start at x and stages its N values and winners at os and is; the block's are then
// stored together.
template <int NP, typename Position>
__device__ __forceinline__ void conv_small_pool_frame(
    const float* __restrict__ src, int lda, const float* __restrict__ Wf, int ldw, int N, int K,
    int H2, int W2, float* __restrict__ pout, int* __restrict__ pids, int total, Position&& position)
{
    extern __shared__ __align__(16) float smem[];
    float* Bs = smem;                                   // K x NP, bias row last
    const int stride = conv_small_stage_row(N);
    float* Os = smem + K * NP;                          // CONV_SMALL_THREADS rows of pooled values
    int* Is = reinterpret_cast<int*>(Os + CONV_SMALL_THREADS * stride);   // and their winners
    conv_small_weights(Bs, Wf, ldw, N, K, NP);
    const int P2 = H2 * W2;
    for (int base = blockIdx.x * CONV_SMALL_THREADS; base < total; base += gridDim.x * CONV_SMALL_THREADS) {
        const int idx = base + threadIdx.x;
        if (idx < total) {
            const int cs = idx / P2;
            const int q = idx - cs * P2;
            const int pr = q / W2;
            const int pc = q - pr * W2;
            position(src + (i64)cs * lda, pr, pc, Bs, Os + threadIdx.x * stride,
                     Is + threadIdx.x * stride);
        }
        conv_small_pool_store(Os, Is, pout, pids, base, total, N);
    }
}

// One position's net inputs for NP slices into acc: the sum over filter rows, columns and prior
// slices in gemm_nn's k order, skipping the zero padding (whose products add exactly nothing), the
// window's first tap at prior row r0, column c0 (the bias is added by the caller).
template <int NP>
__device__ __forceinline__ void conv_small_sums(const float* x, const float* Bs, int r0, int c0,
                                                int PH, int PW, int PD, int fv, int fh,
                                                float (&acc)[NP])
{
#pragma unroll
    for (int n = 0; n < NP; ++n) acc[n] = 0.f;
    for (int fr = 0; fr < fv; ++fr) {
        const int r = r0 + fr;
        if (r < 0 || r >= PH) continue;
        for (int fc = 0; fc < fh; ++fc) {
            const int c = c0 + fc;
            if (c < 0 || c >= PW) continue;
            const float* xp = x + (r * PW + c) * PD;
            const float* bp = Bs + (fr * fh + fc) * PD * NP;
            for (int s = 0; s < PD; ++s) {
                const float a = xp[s];
#pragma unroll
                for (int n = 0; n < NP; n += 4) {
                    const float4 b = *reinterpret_cast<const float4*>(bp + s * NP + n);
                    acc[n] = fmaf(a, b.x, acc[n]);
                    acc[n + 1] = fmaf(a, b.y, acc[n + 1]);
                    acc[n + 2] = fmaf(a, b.z, acc[n + 2]);
                    acc[n + 3] = fmaf(a, b.w, acc[n + 3]);
                }
            }
        }
    }
}

template <int NP>
__device__ __forceinline__ void conv_small_body(
    const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv, int fh,
    int pv, int ph, int sv, int sh, const float* __restrict__ Wf, int ldw, int N,
    float* __restrict__ out, int total)
{
    extern __shared__ __align__(16) float smem[];
    float* Bs = smem;                                   // K x NP, bias row last
    const int K = fv * fh * PD + 1;
    float* Os = smem + K * NP;                          // CONV_SMALL_THREADS rows of results
    const int stride = conv_small_stage_row(N);
    conv_small_weights(Bs, Wf, ldw, N, K, NP);
    const int P = H * W;
    for (int base = blockIdx.x * CONV_SMALL_THREADS; base < total; base += gridDim.x * CONV_SMALL_THREADS) {
        const int idx = base + threadIdx.x;
        if (idx < total) {
            const int cs = idx / P;
            const int p = idx - cs * P;
            const int oh = p / W;
            const int ow = p - oh * W;
            float acc[NP];
            conv_small_sums<NP>(src + (i64)cs * lda, Bs, oh * sv - pv, ow * sh - ph, PH, PW, PD,
                                fv, fh, acc);
            const float* bias = Bs + (K - 1) * NP;
#pragma unroll
            for (int n = 0; n < NP; ++n)
                if (n < N) Os[threadIdx.x * stride + n] = tanhf(fmaf(1.f, bias[n], acc[n]));
        }
        __syncthreads();
        conv_small_copy_out(Os, out + (i64)base * N, min(CONV_SMALL_THREADS, total - base) * N, N);
        __syncthreads();
    }
}

#define CONV_SMALL(NP)                                                                            \
    extern "C" __global__ void __launch_bounds__(CONV_SMALL_THREADS) conv_small_##NP(             \
        const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv,     \
        int fh, int pv, int ph, int sv, int sh, const float* __restrict__ Wf, int ldw, int N,     \
        float* __restrict__ out, int total)                                                       \
    {                                                                                             \
        conv_small_body<NP>(src, lda, PH, PW, PD, H, W, fv, fh, pv, ph, sv, sh, Wf, ldw, N, out,  \
                            total);                                                               \
    }

#ifndef SPECIALIZED
CONV_SMALL(4)
CONV_SMALL(8)
CONV_SMALL(12)
CONV_SMALL(16)
CONV_SMALL(20)
CONV_SMALL(24)
CONV_SMALL(28)
CONV_SMALL(32)
#endif

// The same layer followed by a max-pooling layer whose windows tile it (stride = width), both
// computed at once: one thread per pooled position of one case works out the convolution at
// every position of its window, in row-then-column order, keeping each slice's first maximum.
// Only the pooled layer's activation and winners (row * W + col in the convolutional layer, as
// pool_forward writes them) are written, which is all a forward-only evaluation (criterion,
// outputs) needs. Same bits as conv_small followed by pool_forward.
template <int NP>
__device__ __forceinline__ void conv_small_pool_body(
    const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv, int fh,
    int pv, int ph, int sv, int sh, const float* __restrict__ Wf, int ldw, int N, int H2, int W2,
    int wv2, int wh2, float* __restrict__ pout, int* __restrict__ pids, int total)
{
    const int K = fv * fh * PD + 1;
    conv_small_pool_frame<NP>(src, lda, Wf, ldw, N, K, H2, W2, pout, pids, total,
                              [&](const float* x, int pr, int pc, const float* Bs, float* os,
                                  int* is) {
            const float* bias = Bs + (K - 1) * NP;
            float best[NP];
            int bid[NP];
#pragma unroll
            for (int n = 0; n < NP; ++n) {
                best[n] = 0.f;
                bid[n] = 0;
            }
            for (int wr = 0; wr < wv2; ++wr)
                for (int wc = 0; wc < wh2; ++wc) {
                    const int oh = pr * wv2 + wr;
                    const int ow = pc * wh2 + wc;
                    const int r0 = oh * sv - pv;
                    const int c0 = ow * sh - ph;
                    float acc[NP];
                    conv_small_sums<NP>(x, Bs, r0, c0, PH, PW, PD, fv, fh, acc);
                    const bool first = wr == 0 && wc == 0;
#pragma unroll
                    for (int n = 0; n < NP; ++n) {
                        const float v = tanhf(fmaf(1.f, bias[n], acc[n]));
                        if (first || v > best[n]) {
                            best[n] = v;
                            bid[n] = oh * W + ow;
                        }
                    }
                }
#pragma unroll
            for (int n = 0; n < NP; ++n)
                if (n < N) {
                    os[n] = best[n];
                    is[n] = bid[n];
                }
        });
}

#define CONV_SMALL_POOL(NP)                                                                       \
    extern "C" __global__ void __launch_bounds__(CONV_SMALL_THREADS) conv_small_pool_##NP(        \
        const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv,     \
        int fh, int pv, int ph, int sv, int sh, const float* __restrict__ Wf, int ldw, int N,     \
        int H2, int W2, int wv2, int wh2, float* __restrict__ pout, int* __restrict__ pids,       \
        int total)                                                                                \
    {                                                                                             \
        conv_small_pool_body<NP>(src, lda, PH, PW, PD, H, W, fv, fh, pv, ph, sv, sh, Wf, ldw, N,  \
                                 H2, W2, wv2, wh2, pout, pids, total);                            \
    }

#ifndef SPECIALIZED
CONV_SMALL_POOL(4)
CONV_SMALL_POOL(8)
CONV_SMALL_POOL(12)
CONV_SMALL_POOL(16)
CONV_SMALL_POOL(20)
CONV_SMALL_POOL(24)
CONV_SMALL_POOL(28)
CONV_SMALL_POOL(32)
#endif

// The same layer followed by an average-pooling layer whose windows tile it: one thread per
// pooled position sums the tanh of every position of its window in row-then-column order from
// 0 and divides by the window's size, as pool_forward does; only the pooled values are written
// (pids is not read). Same bits as conv_small followed by pool_forward.
template <int NP>
__device__ __forceinline__ void conv_small_avg_body(
    const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv, int fh,
    int pv, int ph, int sv, int sh, const float* __restrict__ Wf, int ldw, int N, int H2, int W2,
    int wv2, int wh2, float* __restrict__ pout, int total)
{
    const int K = fv * fh * PD + 1;
    conv_small_pool_frame<NP>(src, lda, Wf, ldw, N, K, H2, W2, pout, nullptr, total,
                              [&](const float* x, int pr, int pc, const float* Bs, float* os, int*) {
            const float* bias = Bs + (K - 1) * NP;
            float sum[NP];
#pragma unroll
            for (int n = 0; n < NP; ++n) sum[n] = 0.f;
            for (int wr = 0; wr < wv2; ++wr)
                for (int wc = 0; wc < wh2; ++wc) {
                    const int r0 = (pr * wv2 + wr) * sv - pv;
                    const int c0 = (pc * wh2 + wc) * sh - ph;
                    float acc[NP];
                    conv_small_sums<NP>(x, Bs, r0, c0, PH, PW, PD, fv, fh, acc);
#pragma unroll
                    for (int n = 0; n < NP; ++n) sum[n] += tanhf(fmaf(1.f, bias[n], acc[n]));
                }
#pragma unroll
            for (int n = 0; n < NP; ++n)
                if (n < N) os[n] = sum[n] / (float)(wv2 * wh2);
        });
}

#define CONV_SMALL_AVG(NP)                                                                        \
    extern "C" __global__ void __launch_bounds__(CONV_SMALL_THREADS) conv_small_avg_##NP(         \
        const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv,     \
        int fh, int pv, int ph, int sv, int sh, const float* __restrict__ Wf, int ldw, int N,     \
        int H2, int W2, int wv2, int wh2, float* __restrict__ pout, int* __restrict__,            \
        int total)                                                                                \
    {                                                                                             \
        conv_small_avg_body<NP>(src, lda, PH, PW, PD, H, W, fv, fh, pv, ph, sv, sh, Wf, ldw, N,   \
                                H2, W2, wv2, wh2, pout, total);                                   \
    }

#ifndef SPECIALIZED
CONV_SMALL_AVG(4)
CONV_SMALL_AVG(8)
CONV_SMALL_AVG(12)
CONV_SMALL_AVG(16)
CONV_SMALL_AVG(20)
CONV_SMALL_AVG(24)
CONV_SMALL_AVG(28)
CONV_SMALL_AVG(32)
#endif

// conv_small_pool for one layer shape known when it is compiled (Runtime.specialize appends a
// CONV_SMALL_POOL_FIXED line per first layer): the filter, the prior layer's size, the pooling
// window and the padded slice count are template constants, so the loops over taps and slices
// unroll, and without padding (PADDED false) no bounds are checked. A thread sums every position
// of its pooling window at once (NW x NP accumulators), so each weight read from shared memory
// serves NW positions. Each position's sum is still the same sequence of multiply-adds in the
// same order (padding skipped, the bias last), and the maxima are taken in the window's
// row-then-column order, keeping the first: the values and winners are conv_small_pool's, bit for
// bit. The runtime shape arguments are conv_small_pool's; those fixed here are not read.
// ROLLED keeps the loop over filter rows rolled: unrolled, LeNet's first layer is 4,600
// instructions (74 KB), more than the instruction cache holds for warps at different places in
// it, and warps waited on instruction fetch; rolled, one filter row's taps (a fifth) are the loop
// body, at the price of reading each input row from the L1 cache once per filter row it meets.
template <int FV, int FH, int PD, int SV, int SH, int PV, int PZ, int PH, int PW, int WV, int WH,
          int NP, bool PADDED, bool WINNERS, bool ROLLED, bool AVG = false>
__device__ __forceinline__ void conv_small_pool_fixed_body(
    const float* __restrict__ src, int lda, const float* __restrict__ Wf, int ldw, int N, int W,
    int H2, int W2, float* __restrict__ pout, int* __restrict__ pids, int total)
{
    constexpr int K = FV * FH * PD + 1;
    constexpr int NW = WV * WH;
    conv_small_pool_frame<NP>(src, lda, Wf, ldw, N, K, H2, W2, pout, pids, total,
                              [&](const float* x, int pr, int pc, const float* Bs, float* os,
                                  int* is) {
            const float* bias = Bs + (K - 1) * NP;
            const int r0 = pr * WV * SV - PV;           // the window's first position's first tap
            const int c0 = pc * WH * SH - PZ;
            float acc[NW][NP];
#pragma unroll
            for (int w = 0; w < NW; ++w)
#pragma unroll
                for (int n = 0; n < NP; ++n) acc[w][n] = 0.f;
#pragma unroll(ROLLED ? 1 : FV)
            for (int fr = 0; fr < FV; ++fr)
#pragma unroll
                for (int fc = 0; fc < FH; ++fc)
#pragma unroll
                    for (int s = 0; s < PD; ++s) {
                        float a[NW];
                        bool in[NW];
#pragma unroll
                        for (int w = 0; w < NW; ++w) {
                            const int r = r0 + (w / WH) * SV + fr;
                            const int c = c0 + (w % WH) * SH + fc;
                            in[w] = !PADDED || ((unsigned)r < (unsigned)PH && (unsigned)c < (unsigned)PW);
                            a[w] = in[w] ? x[(r * PW + c) * PD + s] : 0.f;
                        }
                        const float* bp = Bs + ((fr * FH + fc) * PD + s) * NP;
#pragma unroll
                        for (int n = 0; n < NP; n += 4) {
                            const float4 b = *reinterpret_cast<const float4*>(bp + n);
#pragma unroll
                            for (int w = 0; w < NW; ++w)
                                if (in[w]) {
                                    acc[w][n] = fmaf(a[w], b.x, acc[w][n]);
                                    acc[w][n + 1] = fmaf(a[w], b.y, acc[w][n + 1]);
                                    acc[w][n + 2] = fmaf(a[w], b.z, acc[w][n + 2]);
                                    acc[w][n + 3] = fmaf(a[w], b.w, acc[w][n + 3]);
                                }
                        }
                    }
#pragma unroll
            for (int n = 0; n < NP && AVG; ++n) {
                float sum = 0.f;                        // pool_forward's sum, then its division
#pragma unroll
                for (int w = 0; w < NW; ++w) sum += tanhf(fmaf(1.f, bias[n], acc[w][n]));
                if (n < N) os[n] = sum / (float)NW;
            }
#pragma unroll
            for (int n = 0; n < NP && !AVG; ++n) {
                // without winners: the largest net input's tanh is the largest tanh (tanhf rises
                // with its argument except near its dip, where the window's values are compared
                // one by one as with winners), so one tanhf a slice instead of one a position
                float best = 0.f;
                bool each = WINNERS;
                if (!WINNERS) {
                    float zb = fmaf(1.f, bias[n], acc[0][n]);
#pragma unroll
                    for (int w = 1; w < NW; ++w) {
                        const float z = fmaf(1.f, bias[n], acc[w][n]);
                        if (z > zb) zb = z;
                    }
                    best = tanhf(zb);
                    each = near_tanh_dip(zb);
                }
                int bid = 0;
                if (each) {
                    best = tanhf(fmaf(1.f, bias[n], acc[0][n]));
#pragma unroll
                    for (int w = 1; w < NW; ++w) {
                        const float v = tanhf(fmaf(1.f, bias[n], acc[w][n]));
                        if (v > best) {
                            best = v;
                            bid = w;
                        }
                    }
                }
                if (n < N) {
                    os[n] = best;
                    if (WINNERS) {
                        const int wr = bid / WH;
                        is[n] = (pr * WV + wr) * W + pc * WH + bid - wr * WH;
                    }
                }
            }
        });
}

#define CONV_SMALL_POOL_KERNEL(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, WV, WH, NP, PADDED,   \
                               WINNERS, MINB, ROLLED, AVG)                                        \
    extern "C" __global__ void __launch_bounds__(CONV_SMALL_THREADS, MINB) NAME(                  \
        const float* __restrict__ src, int lda, int, int, int, int, int W, int, int, int, int,    \
        int, int, const float* __restrict__ Wf, int ldw, int N, int H2, int W2, int, int,         \
        float* __restrict__ pout, int* __restrict__ pids, int total)                              \
    {                                                                                             \
        conv_small_pool_fixed_body<FV, FH, PD, SV, SH, PV, PZ, PH, PW, WV, WH, NP, PADDED,        \
                                   WINNERS, ROLLED, AVG>(src, lda, Wf, ldw, N, W, H2, W2, pout,   \
                                                         pids, total);                            \
    }
#define CONV_SMALL_POOL_FIXED(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, WV, WH, NP, PADDED, MINB, \
                              ROLLED)                                                             \
    CONV_SMALL_POOL_KERNEL(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, WV, WH, NP, PADDED, true, MINB, \
                           ROLLED, false)
// The pooled values alone (pids is not read), for forward-only evaluations: each slice's largest
// net input first, then one tanhf (the same values, bit for bit).
#define CONV_SMALL_POOL_VALUES(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, WV, WH, NP, PADDED, MINB,\
                               ROLLED)                                                            \
    CONV_SMALL_POOL_KERNEL(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, WV, WH, NP, PADDED, false,   \
                           MINB, ROLLED, false)
// Average pooling: the window's tanh values summed in its row-then-column order and divided by
// its size, as pool_forward does (pids is not read; the same bits as conv_small_avg).
#define CONV_SMALL_AVG_FIXED(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, WV, WH, NP, PADDED, MINB,  \
                             ROLLED)                                                              \
    CONV_SMALL_POOL_KERNEL(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, WV, WH, NP, PADDED, false,   \
                           MINB, ROLLED, true)

// The weight gradient of a conv_small first layer followed by max pooling whose windows tile it,
// straight from the pooling layer's deltas and winners. The first layer's delta is nonzero only
// at each pooling window's winner (the pooled delta times tanh' = 1 - a^2 of the pooled value a),
// so only the winners' windows are multiplied: a quarter of gemm_tn's multiply-adds for 2 x 2
// pooling, and pool_backward_tiles' full-size delta is never written. Partial z (chunk z / subs,
// sub-chunk z % subs: the cases [chunk * CHUNK + sub * CHUNK / subs, ...) up to n_cases) of
// weight row k (forward order: (fr * fh + fc) * PD + prior slice; the bias row last, reading 1)
// and column c (slice n_lo + c) is
//     part[(z * R + k) * NL + c] = sum over its cases ascending, then pooled neurons q ascending,
//                                  of x(case, window(winner(q, c)) + k) * delta1(q, c)
// in its own order (not gemm_tn's), depending only on the architecture and the number of cases.
// A thread keeps the sums of a run of up to POOLED_GRAD_TAPS consecutive weight rows of one filter
// row (or the bias row) for one column c, so each winner's offset and delta it reads from shared
// memory serves that many taps; a block copies one case at a time into shared memory: the prior
// activations with their zero padding (rows RS floats apart, RS >= the row's length chosen by the
// host so that a window's taps fall in distinct banks), and per pooled neuron and column the
// winner's window offset with its delta. The next case's global values are loaded into registers
// while the block multiplies the current one, so the loads' latency hides behind the arithmetic.
// Threads beyond the items only help with the copies; each thread copies at most
// POOLED_GRAD_PER_Q pooled neurons and POOLED_GRAD_PER_X prior activations per case (the host
// sizes the block for that; more would not fit the registers).
#define POOLED_GRAD_PER_Q 6
#define POOLED_GRAD_PER_X 4
// A thread's run of a filter row's weight rows (a 5-wide window on one band: a whole filter row)
#define POOLED_GRAD_TAPS 5
// At most this many threads to a block, so that two blocks fit a multiprocessor's registers.
#define POOLED_GRAD_THREADS 576

#ifndef SPECIALIZED                                    // built once, with the eager kernels
// What cgp_load needs of the layer's shape.
struct CgpShape {
    int PH, PW, PD, pv, ph, ROW, XS, QN, NL, N, n_lo, nhid;
};

// The global values a thread copies for case m: its pooled neurons' deltas, pooled values and
// winners, and its prior activations (0 for padding).
__device__ __forceinline__ void cgp_load(const CgpShape& S, int m, const float* __restrict__ src,
                                         int lda, const float* __restrict__ delta,
                                         const int* __restrict__ ids,
                                         const float* __restrict__ pooled, float (&gd)[POOLED_GRAD_PER_Q],
                                         float (&ga)[POOLED_GRAD_PER_Q], int (&gi)[POOLED_GRAD_PER_Q],
                                         float (&xv)[POOLED_GRAD_PER_X])
{
    const int T = blockDim.x;
    const i64 base = (i64)m * S.nhid + S.n_lo;
#pragma unroll
    for (int e = 0; e < POOLED_GRAD_PER_Q; ++e) {
        const int u = threadIdx.x + e * T;
        if (u < S.QN) {
            int rel = u;                                // (pooled neuron, column) -> the layer's
            if (S.NL != S.N) {
                const int q = u / S.NL;
                rel = q * S.N + u - q * S.NL;
            }
            gd[e] = delta[base + rel];
            ga[e] = pooled ? pooled[base + rel] : 0.f;
            gi[e] = ids[base + rel];
        }
    }
    const float* x = src + (i64)m * lda;
#pragma unroll
    for (int e = 0; e < POOLED_GRAD_PER_X; ++e) {
        const int u = threadIdx.x + e * T;
        xv[e] = 0.f;
        if (u < S.XS) {
            const int r = u / S.ROW - S.pv;
            const int rest = u - (u / S.ROW) * S.ROW;
            const int col = rest / S.PD;
            const int cc = col - S.ph;
            if (r >= 0 && r < S.PH && cc >= 0 && cc < S.PW) xv[e] = x[(r * S.PW + cc) * S.PD + rest - col * S.PD];
        }
    }
}

// One case's terms of a run of a filter row's taps (window places xs[0], xs[1], ...): every
// pooled neuron q ascending, each tap's sum its own chain. FULL: POOLED_GRAD_TAPS taps, else the
// first nk (a filter row's last, shorter run).
template <bool FULL>
static __device__ __forceinline__ void cgp_run(float (&acc)[POOLED_GRAD_TAPS], const float2* gs,
                                               int NL, int Q, const float* xs,
                                               int nk = POOLED_GRAD_TAPS)
{
#pragma unroll 8
    for (int q = 0; q < Q; ++q) {
        const float2 e = gs[q * NL];
        const float* x = xs + __float_as_int(e.x);
        if (FULL) {
#pragma unroll
            for (int t = 0; t < POOLED_GRAD_TAPS; ++t) acc[t] = fmaf(x[t], e.y, acc[t]);
        } else {
#pragma unroll
            for (int t = 0; t < POOLED_GRAD_TAPS; ++t)
                if (t < nk) acc[t] = fmaf(x[t], e.y, acc[t]);
        }
    }
}

// The partial sums of a thread's run of taps (acc) into out (a tap's NL apart): with QP parts
// of the pooled neurons, part 0's thread adds the other parts' sums in order (handed over in
// red, shared memory the block no longer reads), so the bits depend on QP alone.
static __device__ __forceinline__ void cgp_store(const float (&acc)[POOLED_GRAD_TAPS], float* red,
                                                 int QP, int qpart, int slot, int per_block,
                                                 bool live, int nk, float* out, int NL)
{
    float sum[POOLED_GRAD_TAPS];
#pragma unroll
    for (int t = 0; t < POOLED_GRAD_TAPS; ++t) sum[t] = acc[t];
    if (QP > 1) {
        if (live && qpart > 0) {
#pragma unroll
            for (int t = 0; t < POOLED_GRAD_TAPS; ++t)
                red[(qpart * POOLED_GRAD_TAPS + t) * per_block + slot] = acc[t];
        }
        __syncthreads();
        if (live && qpart == 0) {
            for (int p = 1; p < QP; ++p) {
#pragma unroll
                for (int t = 0; t < POOLED_GRAD_TAPS; ++t)
                    sum[t] += red[(p * POOLED_GRAD_TAPS + t) * per_block + slot];
            }
        }
    }
    if (!live || qpart > 0) return;
#pragma unroll
    for (int t = 0; t < POOLED_GRAD_TAPS; ++t)
        if (t < nk) out[t * NL] = sum[t];
}

static __device__ __forceinline__ void conv_grad_pooled_body(
    const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv, int fh,
    int pv, int ph, int sv, int sh, int RS, const float* __restrict__ delta,
    const int* __restrict__ ids, const float* __restrict__ pooled, int H2, int W2, int N, int n_lo,
    int n_hi, int n_cases, int chunk, int subs, float* __restrict__ part)
{
    extern __shared__ __align__(16) float pooled_smem[];
    CgpShape S;
    S.PH = PH; S.PW = PW; S.PD = PD; S.pv = pv; S.ph = ph;
    const int RIN = (H - 1) * sv + fv;                  // prior rows and columns the windows cover
    const int CIN = (W - 1) * sh + fh;
    S.ROW = CIN * PD;
    S.XS = RIN * S.ROW;
    const int Q = H2 * W2;
    const int NL = n_hi - n_lo;
    S.QN = Q * NL;
    S.NL = NL;
    S.N = N;
    S.n_lo = n_lo;
    S.nhid = Q * N;
    float* Xs = pooled_smem;                            // [prior row][RS]
    float2* Gs = reinterpret_cast<float2*>(pooled_smem + (RIN * RS + 1) / 2 * 2);  // [q][column]
    int* offs = reinterpret_cast<int*>(Gs + S.QN);      // a position's window start in Xs
    const int L = fh * PD;                              // weight rows of a filter row
    const int K = fv * L;                               // the bias row
    const int R = K + 1;
    const int GR = (L + POOLED_GRAD_TAPS - 1) / POOLED_GRAD_TAPS;  // runs of a filter row
    const int IC = fv * GR + 1;                         // items of a column, the bias last
    const int per_block = (IC * NL + gridDim.x - 1) / gridDim.x;   // items of a block
    // the block's threads past its items take parts of the pooled neurons: QP parts (as many as
    // the threads and, for their sums' hand-over at the end, the shared memory allow)
    const int smem_floats = (RIN * RS + 1) / 2 * 2 + 2 * S.QN + H * W;
    const int QP = max(1, min(min((int)blockDim.x / per_block, Q),
                              smem_floats / (POOLED_GRAD_TAPS * per_block)));
    const int qpart = threadIdx.x / per_block;
    const int item = blockIdx.x * per_block + threadIdx.x % per_block;
    const bool live = qpart < QP && item < IC * NL;
    const int q_lo = qpart * Q / QP;                    // the thread's pooled neurons
    const int q_n = (qpart + 1) * Q / QP - q_lo;
    const int c = live ? item / IC : 0;
    const int g = live ? item - c * IC : 0;
    const bool bias = g == IC - 1;
    const int fr = g / GR;
    const int j0 = (g - fr * GR) * POOLED_GRAD_TAPS;    // the run's first fc * PD + prior slice
    const int k0 = bias ? K : fr * L + j0;              // its first weight row
    const int nk = bias ? 1 : min(POOLED_GRAD_TAPS, L - j0);
    const int koff = fr * RS + j0;                      // its first tap's place in a window
    for (int p = threadIdx.x; p < H * W; p += blockDim.x) {
        const int r = p / W;
        offs[p] = r * sv * RS + (p - r * W) * sh * PD;
    }
    const int z = blockIdx.y;
    const int ch = z / subs;
    const int per = chunk / subs;
    const int lo = ch * chunk + (z - ch * subs) * per;
    const int hi = min(n_cases, lo + per);

    float gd[POOLED_GRAD_PER_Q], ga[POOLED_GRAD_PER_Q], xv[POOLED_GRAD_PER_X];
    int gi[POOLED_GRAD_PER_Q];
    if (lo < hi) cgp_load(S, lo, src, lda, delta, ids, pooled, gd, ga, gi, xv);
    __syncthreads();                                    // offs
    float acc[POOLED_GRAD_TAPS];
#pragma unroll
    for (int t = 0; t < POOLED_GRAD_TAPS; ++t) acc[t] = 0.f;
    for (int m = lo; m < hi; ++m) {
#pragma unroll
        for (int e = 0; e < POOLED_GRAD_PER_Q; ++e) {
            const int u = threadIdx.x + e * blockDim.x;
            if (u < S.QN) {
                float g = 0.f;                          // pool_backward_tiles' value, bit for bit
                g += gd[e];
                if (pooled) g *= 1.f - ga[e] * ga[e];
                Gs[u] = make_float2(__int_as_float(offs[gi[e]]), g);
            }
        }
#pragma unroll
        for (int e = 0; e < POOLED_GRAD_PER_X; ++e) {
            const int u = threadIdx.x + e * blockDim.x;
            if (u < S.XS) {
                const int r = u / S.ROW;
                Xs[r * RS + u - r * S.ROW] = xv[e];
            }
        }
        __syncthreads();
        if (m + 1 < hi) cgp_load(S, m + 1, src, lda, delta, ids, pooled, gd, ga, gi, xv);
        if (live) {
            const float2* gs = Gs + q_lo * NL + c;
            if (bias) {
                for (int q = 0; q < q_n; ++q) acc[0] += gs[q * NL].y;
            } else if (nk == POOLED_GRAD_TAPS) {
                cgp_run<true>(acc, gs, NL, q_n, Xs + koff);
            } else {
                cgp_run<false>(acc, gs, NL, q_n, Xs + koff, nk);
            }
        }
        __syncthreads();
    }
    cgp_store(acc, pooled_smem, QP, qpart, threadIdx.x % per_block, per_block, live, nk,
              part + ((i64)z * R + k0) * NL + c, NL);
}

// An instantiation line like the other kernels' (no kernel of this file at column 0), so the
// kernel cache can build the file in units of a few kernels side by side.
#define CONV_GRAD_POOLED_KERNEL(NAME)                                                             \
    extern "C" __global__ void __launch_bounds__(POOLED_GRAD_THREADS, 2) NAME(                    \
        const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv,     \
        int fh, int pv, int ph, int sv, int sh, int RS, const float* __restrict__ delta,          \
        const int* __restrict__ ids, const float* __restrict__ pooled, int H2, int W2, int N,     \
        int n_lo, int n_hi, int n_cases, int chunk, int subs, float* __restrict__ part)           \
    {                                                                                             \
        conv_grad_pooled_body(src, lda, PH, PW, PD, H, W, fv, fh, pv, ph, sv, sh, RS, delta, ids, \
                              pooled, H2, W2, N, n_lo, n_hi, n_cases, chunk, subs, part);         \
    }
CONV_GRAD_POOLED_KERNEL(conv_grad_pooled)
#endif

// The weight gradient of a conv_small first layer, a thread a position at a time, without the
// gather tables or the tensor cores: where the layer has few weight rows (a 3 x 3 window on one
// band has 10), gemm_tn's tiles spend their time copying the deltas, not multiplying. Two ways
// to the layer's deltas:
// - POOLED (conv_grad_avg): the layer is followed by average pooling whose windows tile it, and
//   the deltas come straight from the pooling layer's: the layer's activations are not read (its
//   fused forward launch never wrote them) but computed again, the same multiply-adds in the same
//   order as conv_small (padding skipped, the bias last), so the same bits; each position's delta
//   is then pool_backward's, bit for bit (0 + the pooled delta, divided by the window's size,
//   times 1 - a^2). Neither the activation nor the full-size delta goes through memory.
// - not POOLED (conv_grad_first): the layer's own deltas, as the layer after it backpropagated
//   them (WV = WH = 1).
// Partial z (chunk z / subs, sub-chunk z % subs: the cases [chunk * CHUNK + sub * CHUNK / subs,
// ...) up to n_cases) of weight row k (the bias row last) and column c (slice n_lo + c) is
//     part[(z * R + k) * NL + c] = the sum over its cases' positions of x(position + k) * delta
// in this kernel's own order, which depends only on the architecture and the number of cases.
// A block has a group of AVG_GRAD_LANES threads for each GS of its slices (blocks along x take
// the launch's slices in turns of at most AVG_GRAD_THREADS / AVG_GRAD_LANES groups); a thread takes
// every AVG_GRAD_LANES-th pooling window of the sub-chunk's cases (its positions row by row share
// their pooled delta and, where few enough, the inputs they read) and keeps R x GS sums, which
// are then added across each warp (a fixed butterfly) and the group's two warps. GS changes only which
// thread keeps which column's sums, not the order of any sum: every GS gives the same bits.
#define AVG_GRAD_LANES 64
#define AVG_GRAD_THREADS 512
#define AVG_GRAD_REG_WEIGHTS 48
#define AVG_GRAD_PATCH 32

template <int FV, int FH, int PD, int SV, int SH, int PV, int PZ, int PH, int PW, int H, int W,
          int WV, int WH, int GS, bool PADDED, bool POOLED>
__device__ __forceinline__ void conv_grad_first_body(
    const float* __restrict__ src, int lda, const float* __restrict__ Wf, int ldw,
    const float* __restrict__ delta, int N, int n_lo, int n_hi, int n_cases, int chunk, int subs,
    float* __restrict__ part)
{
    constexpr int K = FV * FH * PD;                     // taps x prior slices; the bias row K
    constexpr int R = K + 1;
    extern __shared__ __align__(16) float avg_smem[];
    const int NB = blockDim.x / AVG_GRAD_LANES * GS;    // columns a block takes
    const int c_first = blockIdx.x * NB;                // this block's first, from slice n_lo
    const int NL = min(n_hi - n_lo - c_first, NB);      // this block's (weights past it zero)
    const int NT = n_hi - n_lo;                         // the launch's (a partial's row)
    float* Bs = avg_smem;                               // R rows of NB weights (POOLED)
    float* red = avg_smem + (POOLED ? R * NB : 0);      // each warp's sums, R x GS
    for (int i = threadIdx.x; i < (POOLED ? R * NB : 0); i += blockDim.x) {
        const int k = i / NB;
        const int n = i - k * NB;
        Bs[i] = n < NL ? Wf[(i64)k * ldw + n_lo + c_first + n] : 0.f;
    }
    __syncthreads();
    const int g = threadIdx.x / AVG_GRAD_LANES;
    const float* bg = Bs + g * GS;
    // few enough weights stay in registers: a shared-memory read for every multiply-add of the
    // recomputed sums would bound the loop
    constexpr bool WREG = POOLED && R * GS <= AVG_GRAD_REG_WEIGHTS;
    float wr[WREG ? R : 1][GS];
#pragma unroll
    for (int k = 0; k < (WREG ? R : 0); ++k)
#pragma unroll
        for (int j = 0; j < GS; ++j) wr[k][j] = bg[k * NB + j];
    auto weight = [&](int k, int j) { return WREG ? wr[WREG ? k : 0][j] : bg[k * NB + j]; };
    const int z = blockIdx.y;
    const int ch = z / subs;
    const int per = chunk / subs;
    const int lo = ch * chunk + (z - ch * subs) * per;
    const int hi = min(n_cases, lo + per);
    const i64 nhid = (i64)(H / WV) * (W / WH) * N;
    float G[R][GS];
#pragma unroll
    for (int k = 0; k < R; ++k)
#pragma unroll
        for (int j = 0; j < GS; ++j) G[k][j] = 0.f;
    constexpr int W2 = W / WH;
    constexpr int SEGS = (H / WV) * W2;                 // a case's pooling windows
    // the inputs a window's positions read, kept in registers where few enough
    constexpr int PR = (WV - 1) * SV + FV, PC = (WH - 1) * SH + FH;
    constexpr bool PATCH = PR * PC * PD <= AVG_GRAD_PATCH;
    for (int seg = lo * SEGS + threadIdx.x - g * AVG_GRAD_LANES; seg < hi * SEGS;
         seg += AVG_GRAD_LANES) {
        const int m = seg / SEGS;
        const int pr = (seg - m * SEGS) / W2;
        const int pc = seg - m * SEGS - pr * W2;
        const float* x = src + (i64)m * lda;
        const float* dp = delta + m * nhid + (pr * W2 + pc) * N + n_lo + c_first + g * GS;
        float dv[GS];
#pragma unroll
        for (int j = 0; j < GS; ++j) dv[j] = g * GS + j < NL ? dp[j] : 0.f;
        const int r0 = pr * WV * SV - PV;               // the patch's first prior row, column
        const int c0 = pc * WH * SH - PZ;
        float patch[PATCH ? PR * PC * PD : 1];
#pragma unroll
        for (int i = 0; i < (PATCH ? PR * PC * PD : 0); ++i) {
            const int r = r0 + i / (PC * PD);
            const int c = c0 + i / PD % PC;
            const bool in = !PADDED || ((unsigned)r < (unsigned)PH && (unsigned)c < (unsigned)PW);
            patch[i] = in ? x[(r * PW + c) * PD + i % PD] : 0.f;
        }
#pragma unroll
        for (int t = 0; t < WV * WH; ++t) {             // the window's positions, row by row
            const int wr = t / WH, wc = t % WH;
            float xv[K], acc[GS];
#pragma unroll
            for (int j = 0; j < GS; ++j) acc[j] = 0.f;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const int i = wr * SV + k / (FH * PD);  // the tap's place in the patch
                const int jc = wc * SH + k / PD % FH;
                const int r = r0 + i, c = c0 + jc;
                const bool in = !PADDED || ((unsigned)r < (unsigned)PH && (unsigned)c < (unsigned)PW);
                if (PATCH)
                    xv[k] = patch[PATCH ? (i * PC + jc) * PD + k % PD : 0];
                else
                    xv[k] = in ? x[(r * PW + c) * PD + k % PD] : 0.f;
                if (POOLED && in) {
#pragma unroll
                    for (int j = 0; j < GS; ++j) acc[j] = fmaf(xv[k], weight(k, j), acc[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < GS; ++j) {
                float d = dv[j];
                if (POOLED) {
                    const float a = tanhf(fmaf(1.f, weight(K, j), acc[j]));
                    d = 0.f;
                    d += dv[j];
                    d /= (float)(WV * WH);
                    d *= 1.f - a * a;
                }
#pragma unroll
                for (int k = 0; k < K; ++k) G[k][j] = fmaf(xv[k], d, G[k][j]);
                G[K][j] += d;
            }
        }
    }
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < R; ++k)
#pragma unroll
        for (int j = 0; j < GS; ++j) {
            float v = G[k][j];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if ((threadIdx.x & 31) == 0) red[(warp * R + k) * GS + j] = v;
        }
    __syncthreads();
    constexpr int WARPS = AVG_GRAD_LANES / 32;
    for (int i = threadIdx.x; i < R * NL; i += blockDim.x) {
        const int k = i / NL;
        const int c = i - k * NL;
        const int w0 = c / GS * WARPS;
        const int j = c % GS;
        float v = red[(w0 * R + k) * GS + j];
#pragma unroll
        for (int w = 1; w < WARPS; ++w) v += red[((w0 + w) * R + k) * GS + j];
        part[((i64)z * R + k) * NT + c_first + c] = v;
    }
}

#define CONV_GRAD_FIRST_KERNEL(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, H, W, WV, WH, GS,     \
                               PADDED, POOLED)                                                    \
    extern "C" __global__ void __launch_bounds__(AVG_GRAD_THREADS) NAME(                          \
        const float* __restrict__ src, int lda, const float* __restrict__ Wf, int ldw,            \
        const float* __restrict__ delta, int N, int n_lo, int n_hi, int n_cases, int chunk,       \
        int subs, float* __restrict__ part)                                                       \
    {                                                                                             \
        conv_grad_first_body<FV, FH, PD, SV, SH, PV, PZ, PH, PW, H, W, WV, WH, GS, PADDED,        \
                             POOLED>(src, lda, Wf, ldw, delta, N, n_lo, n_hi, n_cases, chunk,     \
                                     subs, part);                                                 \
    }
#define CONV_GRAD_AVG(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, H, W, WV, WH, GS, PADDED)         \
    CONV_GRAD_FIRST_KERNEL(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, H, W, WV, WH, GS, PADDED, true)
// the layer's own deltas (Wf is not read)
#define CONV_GRAD_FIRST(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, H, W, GS, PADDED)               \
    CONV_GRAD_FIRST_KERNEL(NAME, FV, FH, PD, SV, SH, PV, PZ, PH, PW, H, W, 1, 1, GS, PADDED, false)
