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

template <int NP>
__device__ __forceinline__ void conv_small_body(
    const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv, int fh,
    int pv, int ph, int sv, int sh, const float* __restrict__ Wf, int ldw, int N,
    float* __restrict__ out, int total)
{
    extern __shared__ __align__(16) float smem[];
    float* Bs = smem;                                   // K x NP, bias row last
    const int K = fv * fh * PD + 1;
    float* Os = smem + K * NP;                          // CONV_SMALL_THREADS x N results
    for (int i = threadIdx.x; i < K * NP; i += blockDim.x) {
        const int k = i / NP;
        const int n = i - k * NP;
        Bs[i] = n < N ? Wf[(i64)k * ldw + n] : 0.f;
    }
    __syncthreads();
    const int P = H * W;
    for (int base = blockIdx.x * CONV_SMALL_THREADS; base < total; base += gridDim.x * CONV_SMALL_THREADS) {
        const int idx = base + threadIdx.x;
        if (idx < total) {
            const int cs = idx / P;
            const int p = idx - cs * P;
            const int oh = p / W;
            const int ow = p - oh * W;
            const int r0 = oh * sv - pv;
            const int c0 = ow * sh - ph;
            float acc[NP];
#pragma unroll
            for (int n = 0; n < NP; ++n) acc[n] = 0.f;
            const float* x = src + (i64)cs * lda;
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
            const float* bias = Bs + (K - 1) * NP;
#pragma unroll
            for (int n = 0; n < NP; ++n)
                if (n < N) Os[threadIdx.x * N + n] = tanhf(fmaf(1.f, bias[n], acc[n]));
        }
        __syncthreads();
        const int count = min(CONV_SMALL_THREADS, total - base) * N;
        float* o = out + (i64)base * N;
        for (int i = threadIdx.x; i < count; i += CONV_SMALL_THREADS) o[i] = Os[i];
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

CONV_SMALL(4)
CONV_SMALL(8)
CONV_SMALL(12)
CONV_SMALL(16)
CONV_SMALL(20)
CONV_SMALL(24)
CONV_SMALL(28)
CONV_SMALL(32)

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
    extern __shared__ __align__(16) float smem[];
    float* Bs = smem;                                   // K x NP, bias row last
    const int K = fv * fh * PD + 1;
    float* Os = smem + K * NP;                          // CONV_SMALL_THREADS x N pooled values
    int* Is = reinterpret_cast<int*>(Os + CONV_SMALL_THREADS * N);   // and their winners
    for (int i = threadIdx.x; i < K * NP; i += blockDim.x) {
        const int k = i / NP;
        const int n = i - k * NP;
        Bs[i] = n < N ? Wf[(i64)k * ldw + n] : 0.f;
    }
    __syncthreads();
    const int P2 = H2 * W2;
    const float* bias = Bs + (K - 1) * NP;
    for (int base = blockIdx.x * CONV_SMALL_THREADS; base < total; base += gridDim.x * CONV_SMALL_THREADS) {
        const int idx = base + threadIdx.x;
        if (idx < total) {
            const int cs = idx / P2;
            const int q = idx - cs * P2;
            const int pr = q / W2;
            const int pc = q - pr * W2;
            const float* x = src + (i64)cs * lda;
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
                    Os[threadIdx.x * N + n] = best[n];
                    Is[threadIdx.x * N + n] = bid[n];
                }
        }
        __syncthreads();
        const int count = min(CONV_SMALL_THREADS, total - base) * N;
        float* o = pout + (i64)base * N;
        int* oi = pids + (i64)base * N;
        for (int i = threadIdx.x; i < count; i += CONV_SMALL_THREADS) {
            o[i] = Os[i];
            oi[i] = Is[i];
        }
        __syncthreads();
    }
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

CONV_SMALL_POOL(4)
CONV_SMALL_POOL(8)
CONV_SMALL_POOL(12)
CONV_SMALL_POOL(16)
CONV_SMALL_POOL(20)
CONV_SMALL_POOL(24)
CONV_SMALL_POOL(28)
CONV_SMALL_POOL(32)

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
// A thread keeps one (k, c); a block copies one case at a time into shared memory: the prior
// activations with their zero padding, and per column and pooled neuron the winner's window
// offset with its delta.
extern "C" __global__ void __launch_bounds__(1024) conv_grad_pooled(
    const float* __restrict__ src, int lda, int PH, int PW, int PD, int H, int W, int fv, int fh,
    int pv, int ph, int sv, int sh, const float* __restrict__ delta, const int* __restrict__ ids,
    const float* __restrict__ pooled, int H2, int W2, int N, int n_lo, int n_hi, int n_cases,
    int chunk, int subs, float* __restrict__ part)
{
    extern __shared__ __align__(16) float pooled_smem[];
    const int RIN = (H - 1) * sv + fv;                  // prior rows and columns the windows cover
    const int CIN = (W - 1) * sh + fh;
    const int XS = RIN * CIN * PD;
    float* Xs = pooled_smem;
    float2* Gs = reinterpret_cast<float2*>(pooled_smem + (XS + 1) / 2 * 2);   // [column][pooled neuron]
    const int Q = H2 * W2;
    const int NL = n_hi - n_lo;
    const int K = fv * fh * PD;                         // the bias row
    const int R = K + 1;
    const int item = blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = item < R * NL;
    const int c = live ? item / R : 0;
    const int k = live ? item - c * R : 0;
    int koff = 0;                                       // the weight row's place in a window
    if (k < K) {
        const int fr = k / (fh * PD);
        const int rest = k - fr * fh * PD;
        const int fc = rest / PD;
        koff = (fr * CIN + fc) * PD + rest - fc * PD;
    }
    const int z = blockIdx.y;
    const int ch = z / subs;
    const int per = chunk / subs;
    const int lo = ch * chunk + (z - ch * subs) * per;
    const int hi = min(n_cases, lo + per);
    const int nhid = Q * N;

    float acc = 0.f;
    for (int m = lo; m < hi; ++m) {
        const float* x = src + (i64)m * lda;
        for (int u = threadIdx.x; u < XS; u += blockDim.x) {
            const int v = u / PD;
            const int s = u - v * PD;
            const int r = v / CIN - pv;
            const int col = v - (v / CIN) * CIN - ph;
            Xs[u] = r >= 0 && r < PH && col >= 0 && col < PW ? x[(r * PW + col) * PD + s] : 0.f;
        }
        const i64 base = (i64)m * nhid + n_lo;
        for (int u = threadIdx.x; u < Q * NL; u += blockDim.x) {
            const int q = u / NL;
            const int cc = u - q * NL;
            const i64 j = base + (i64)q * N + cc;
            const int id = ids[j];
            float g = 0.f;                              // pool_backward_tiles' value, bit for bit
            g += delta[j];
            if (pooled) {
                const float a = pooled[j];
                g *= 1.f - a * a;
            }
            const int r = id / W;
            const int off = (r * sv * CIN + (id - r * W) * sh) * PD;
            Gs[cc * Q + q] = make_float2(__int_as_float(off), g);
        }
        __syncthreads();
        if (live) {
            const float2* gs = Gs + c * Q;
            if (k == K) {
                for (int q = 0; q < Q; ++q) acc += gs[q].y;
            } else {
#pragma unroll 4
                for (int q = 0; q < Q; ++q) {
                    const float2 e = gs[q];
                    acc = fmaf(Xs[__float_as_int(e.x) + koff], e.y, acc);
                }
            }
        }
        __syncthreads();
    }
    if (live) part[((i64)z * R + k) * NL + c] = acc;
}
