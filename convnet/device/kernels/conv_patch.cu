// A convolutional layer's activation, and the delta backpropagated from it (Geom), on the tensor
// cores (split TF32, or one TF32 product), compiled for the layer's shape (the CT_* constants of
// conv_tiled.cu; conv_patch.py lists the variants and appends their instantiations). Candidates
// beside the gather products of gemm_split.cu (gemm_tf32.cu) wherever the kernel plan puts such
// a step on the tensor cores.
//
// The gather products copy every window input once for each output position whose window holds
// it (25 times for a 5 x 5 window). Here a block copies its cases' rows of the input map, the
// zero padding around them included, into shared memory once (a "patch"), and forms every
// window from it: the window input k of output position m is patch[row_base(m) + offset(k)].
// The weights are split into hi and lo once an evaluation, by conv_patch_weights, and laid out in
// the order of the products' B fragments, so a lane reads both halves of a fragment in one
// 16-byte load.
//
// The sums are those of the gather products bit for bit: k runs in gemm_nn's order (window rows,
// columns, prior slices, then the bias as an input of 1), each stage of 16 k is summed from zero
// on the tensor cores (lo hi, hi lo, then hi hi for each 8 k; tensor_cores.cuh,
// split_tf32_stage) and then added to the accumulator in float32; the padding and the k past the
// window are multiplied in as zeros, as the gather products multiply them.

#include "tensor_cores.cuh"

#ifndef CT_PH   // the layer's shape; these defaults (LeNet's second layer) let the file build alone
#define CT_PH 12
#define CT_PW 12
#define CT_PD 20
#define CT_H 8
#define CT_W 8
#define CT_D 50
#define CT_FV 5
#define CT_FH 5
#define CT_PV 0
#define CT_PZ 0
#define CT_SV 1
#define CT_SH 1
#define CT_LDW 64
#endif

// The geometry of a product: the activation (DELTA false) takes the prior layer's activations
// as its input map and this layer's positions as its outputs, k over the window and the bias;
// the delta backpropagated into the prior layer (DELTA true, strides of 1) takes this layer's
// deltas as its input map, the prior layer's positions as its outputs, and k over the window
// turned around (the gather product's order: this layer's rows, columns, then slices) without a
// bias. Inputs past the map are zero, so a prior position near the edge multiplies whole stages
// of zeros (this layer's slices a multiple of 16: each of its taps whole stages) where the gather
// product leaves them out: either way they add exactly nothing.
template <bool DELTA>
struct Geom {
    static constexpr int IH = DELTA ? CT_H : CT_PH, IW = DELTA ? CT_W : CT_PW;
    static constexpr int IC = DELTA ? CT_D : CT_PD;             // slices of the input map
    static constexpr int OH = DELTA ? CT_PH : CT_H, OW = DELTA ? CT_PW : CT_W;
    static constexpr int ON = DELTA ? CT_PD : CT_D;             // columns (output slices)
    static constexpr int QV = DELTA ? CT_FV - 1 - CT_PV : CT_PV;    // zero rows above the map
    static constexpr int QZ = DELTA ? CT_FH - 1 - CT_PZ : CT_PZ;
    static constexpr int SV = DELTA ? 1 : CT_SV, SH = DELTA ? 1 : CT_SH;
    static constexpr int KW = CT_FV * CT_FH * IC;               // window inputs
    static constexpr int K = KW + (DELTA ? 0 : 1);              // and the bias (k = KW)
    static constexpr int NS = (K + 15) / 16;                    // stages of 16 k
    static constexpr int IC4 = (IC + 3) / 4 * 4;
    // floats from one position to the next in the patch: an odd number of 16-byte units, so
    // that the 8 positions of a fragment's rows fall in 8 different bank groups
    static constexpr int CS = (IC4 / 4) % 2 ? IC4 : IC4 + 4;
    static constexpr int PC = (OW - 1) * SH + CT_FH;            // patch columns
    // column fragments: the columns padded to 8, past 56 to whole blocks of 64
    static constexpr int NT8 = ON <= 56 ? (ON + 7) / 8 : (ON + 63) / 64 * 8;
    static constexpr int FRAGS = 2 * NT8 * 32;                  // float4 of a stage's fragments
    static_assert(!DELTA || (CT_SV == 1 && CT_SH == 1 && CT_D % 16 == 0), "delta geometry");

    __device__ static __forceinline__ int window_offset(int k)
    {
        const int tap = k / IC, s = k - tap * IC;
        return ((tap / CT_FH) * PC + tap % CT_FH) * CS + s;
    }
    // B's element (k, n): the forward weights' row k, or the backward weights of tap turned
    // around ([tap][slice][prior slice])
    __device__ static __forceinline__ float weight(const float* __restrict__ w, int k, int n)
    {
        if (k >= K || n >= ON) return 0.f;
        if (!DELTA) return w[k * CT_LDW + n];
        const int tap = k / IC, s = k - tap * IC;
        return w[((CT_FV * CT_FH - 1 - tap) * CT_D + s) * CT_PD + n];
    }
};

// The weights split into B fragments: frag[(2 st + h) NT8 + j][lane] = {b0 hi, b1 hi, b0 lo,
// b1 lo} of stage st, its 8 k of half h, columns 8j.., where lane (g = lane / 4, t = lane % 4)
// holds k 8h + t and 8h + t + 4 of column 8j + g; zero past the weights.
template <bool DELTA>
__device__ __forceinline__ void conv_patch_weights_body(const float* __restrict__ weights,
                                                        float4* __restrict__ frag)
{
    using G = Geom<DELTA>;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= G::NS * G::FRAGS) return;
    const int lane = idx & 31, j = (idx >> 5) % G::NT8, half = idx / (32 * G::NT8);
    const int k = 8 * half + (lane & 3), n = 8 * j + (lane >> 2);
    unsigned h0, l0, h1, l1;
    split_tf32(G::weight(weights, k, n), h0, l0);
    split_tf32(G::weight(weights, k + 4, n), h1, l1);
    frag[idx] = make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0),
                            __uint_as_float(l1));
}

// The patch of a block: CASES cases x PR map rows (from row r0, which may be above the map:
// padding) x PC columns x CS floats, zero outside the map, past its slices and past M. Copied
// 16 bytes at a time where the rows allow it.
template <bool DELTA, int CASES, int PR, int NT>
__device__ __forceinline__ void copy_patch(float* P, const float* __restrict__ src, int lda,
                                           int case0, int M, int r0, bool vec)
{
    using G = Geom<DELTA>;
    constexpr int Q = G::CS / 4, ITEMS = CASES * PR * G::PC * Q;
    for (int e = threadIdx.x; e < ITEMS; e += NT) {
        const int q = e % Q, col = e / Q % G::PC, row = e / Q / G::PC % PR;
        const int c = e / Q / G::PC / PR, m = case0 + c;
        const int r = r0 + row, x = col - G::QZ;
        float* dst = P + ((c * PR + row) * G::PC + col) * G::CS + 4 * q;
        const bool inside = m < M && r >= 0 && r < G::IH && x >= 0 && x < G::IW;
        const float* s = src + (i64)min(m, M - 1) * lda + (i64)(r * G::IW + x) * G::IC + 4 * q;
        if (vec)
            cp_async16(dst, s, inside && 4 * q < G::IC ? 16 : 0);
        else
#pragma unroll
            for (int i = 0; i < 4; ++i) cp_async4(dst + i, s + i, inside && 4 * q + i < G::IC);
    }
}

// One stage of 16 k: the warp's MT x NT8 fragments summed from zero, then added to acc.
// rb: the patch offsets of this lane's rows (g and g + 8 of each m16 tile); koff: offset(k);
// B: the stage's fragments of the warp's first column.
template <bool DELTA, int MT, int NT8, int BNT8, int PASSES>
__device__ __forceinline__ void patch_stage(float (&acc)[MT][NT8][4], const float* P,
                                            const int (&rb)[MT][2], const int* koff,
                                            const float4* B, int stage, int lane)
{
    using G = Geom<DELTA>;
    const int t = lane & 3;
    const bool tail = 16 * stage + 16 > G::KW;          // the stage holds the bias (or k past it)
    float sum[MT][NT8][4];
    zero_fragments(sum);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int ka = 16 * stage + 8 * h + t, kb = ka + 4;
        const int oa = koff[ka], ob = koff[kb];
        unsigned ah[MT][4], al[MT][4], bh[NT8][2], bl[NT8][2];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            float v[4] = {P[rb[i][0] + oa], P[rb[i][1] + oa], P[rb[i][0] + ob], P[rb[i][1] + ob]};
            if (tail) {         // the bias input (k_one, as the gather products read it)
                if (ka >= G::KW) v[0] = v[1] = ka == G::KW && !DELTA ? k_one : 0.f;
                if (kb >= G::KW) v[2] = v[3] = kb == G::KW && !DELTA ? k_one : 0.f;
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) tf32_operand<PASSES>(v[e], ah[i][e], al[i][e]);
        }
#pragma unroll
        for (int j = 0; j < NT8; ++j) {
            const float4 f = B[(h * BNT8 + j) * 32 + lane];
            bh[j][0] = __float_as_uint(f.x), bh[j][1] = __float_as_uint(f.y);
            bl[j][0] = __float_as_uint(f.z), bl[j][1] = __float_as_uint(f.w);
        }
        split_products<PASSES>(sum, ah, al, bh, bl);
    }
    add_fragments(acc, sum);
}

// The outputs, a row (position) at a time: rows g and g + 8 of each m16 tile.
template <bool DELTA, int ROWS, int CASES, int WM, int NT8, int BM>
__device__ __forceinline__ void patch_store(const float (&acc)[WM / 16][NT8][4], int case0,
                                            int band, int jw, int wm0, int lane, int M,
                                            float* __restrict__ out, int ldo,
                                            const float* __restrict__ prior, int epi)
{
    using G = Geom<DELTA>;
    constexpr int MT = WM / 16;
    const int g = lane >> 2;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = wm0 + i * 16 + g + 8 * h;
            const int c = m / (ROWS * G::OW), r = band * ROWS + m / G::OW % ROWS, x = m % G::OW;
            if (m >= BM || case0 + c >= M || r >= G::OH) continue;
            const i64 row = (i64)(case0 + c) * ldo + (r * G::OW + x) * G::ON;
#pragma unroll
            for (int j = 0; j < NT8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = 8 * (jw + j) + 2 * (lane & 3) + e;
                    if (n < G::ON) out[row + n] = nn_epilogue(acc[i][j][2 * h + e], epi, prior, row + n);
                }
        }
}

// The warp's activations (epi taken) into the block's BM x TS tile T: position m's row, the
// block's column nl at T[m * TS + nl].
template <int WM, int NT8, int BM>
__device__ __forceinline__ void stage_activations(const float (&acc)[WM / 16][NT8][4], float* T,
                                                  int TS, int wm0, int wj, int lane, int epi)
{
    const int g = lane >> 2;
#pragma unroll
    for (int i = 0; i < WM / 16; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = wm0 + i * 16 + g + 8 * h;
            if (m >= BM) continue;
#pragma unroll
            for (int j = 0; j < NT8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int nl = 8 * (wj + j) + 2 * (lane & 3) + e;
                    T[m * TS + nl] = nn_epilogue(acc[i][j][2 * h + e], epi, nullptr, 0);
                }
        }
}

// The max pooling after the activation (PWV x PWH windows that tile the layer; pool.cu's
// pool_forward, bit for bit): the block's activations, staged in shared memory as a BM x TS tile
// (T), give each window's first maximum in row-then-column order and, where pids is not null,
// its winner as row * W + column of this layer. A block holds whole windows (ROWS a multiple of
// PWV); only the pooled layer is written (ldp floats and ints a case).
template <int ROWS, int CASES, int BN, int PWV, int PWH, int NT>
__device__ __forceinline__ void patch_pool_store(const float* T, int TS, int case0, int band,
                                                 int j0, int M, float* __restrict__ pout,
                                                 int ldp, int* __restrict__ pids)
{
    using G = Geom<false>;
    constexpr int QW = G::OW / PWH, QR = ROWS / PWV;             // pooled columns, rows a band
    constexpr int NWIN = PWV * PWH, ITEMS = CASES * QR * QW * BN;
    for (int u = threadIdx.x; u < ITEMS; u += NT) {
        const int nl = u % BN, q = u / BN, pc = q % QW, pr = q / QW % QR, c = q / (QW * QR);
        const int n = 8 * j0 + nl, row0 = band * ROWS + pr * PWV;
        if (n >= G::ON || case0 + c >= M || row0 >= G::OH) continue;
        const int m0 = (c * ROWS + pr * PWV) * G::OW + pc * PWH;     // the window's first position
        float best = T[m0 * TS + nl];
        int win = 0;
#pragma unroll
        for (int w = 1; w < NWIN; ++w) {
            const float v = T[(m0 + (w / PWH) * G::OW + w % PWH) * TS + nl];
            if (v > best) {
                best = v;
                win = w;
            }
        }
        const i64 o = (i64)(case0 + c) * ldp + ((row0 / PWV) * QW + pc) * G::ON + n;
        pout[o] = best;
        if (pids != nullptr) pids[o] = (row0 + win / PWH) * G::OW + pc * PWH + win % PWH;
    }
}

// A block: CASES cases x ROWS rows of output positions (blockIdx.x) x BN columns (blockIdx.y),
// warps of WM positions x WN columns, STAGES stages of B fragments in flight; PWV x PWH > 0: the
// max pooling after it in the epilogue (patch_pool_store: out, ldo are the pooled layer's).
template <bool DELTA, int ROWS, int CASES, int WM, int WN, int BN, int STAGES, int PASSES,
          int PWV = 0, int PWH = 0>
__device__ __forceinline__ void conv_patch_body(const float* __restrict__ src, int lda,
                                                const float4* __restrict__ frag, int M,
                                                float* __restrict__ out, int ldo,
                                                const float* __restrict__ prior, int epi,
                                                int* __restrict__ pids = nullptr)
{
    using G = Geom<DELTA>;
    constexpr int BM = CASES * ROWS * G::OW, WARPS_M = (BM + WM - 1) / WM;
    constexpr int NT = 32 * WARPS_M * (BN / WN), MT = WM / 16, NT8 = WN / 8, BNT8 = BN / 8;
    constexpr int BANDS = (G::OH + ROWS - 1) / ROWS, PR = (ROWS - 1) * G::SV + CT_FV;
    constexpr int PATCH = (CASES * PR * G::PC * G::CS + 3) & ~3;
    constexpr int STAGE = 2 * BNT8 * 32;                 // float4 of a block's stage
    static_assert(WM % 16 == 0 && BN % WN == 0 && WN % 8 == 0 && (CASES == 1 || ROWS == G::OH),
                  "block shape");
    extern __shared__ __align__(16) float smem[];
    float* P = smem;
    float4* Bs = (float4*)(smem + PATCH);
    int* koff = (int*)(Bs + STAGES * STAGE);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
    const int wm0 = warp % WARPS_M * WM, wj = warp / WARPS_M * NT8;    // the warp's first row, column fragment
    const int case0 = blockIdx.x / BANDS * CASES, band = blockIdx.x % BANDS;
    const int j0 = blockIdx.y * BNT8;                    // the block's first column fragment
    const bool vec = G::IC % 4 == 0 && lda % 4 == 0 && ((size_t)src & 15) == 0;
    copy_patch<DELTA, CASES, PR, NT>(P, src, lda, case0, M, band * ROWS * G::SV - G::QV, vec);
    for (int k = threadIdx.x; k < G::NS * 16; k += NT) koff[k] = k < G::KW ? G::window_offset(k) : 0;

    int rb[MT][2];                                       // rows past the block read row 0
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int m = wm0 + i * 16 + g + 8 * h;
            m = m < BM ? m : 0;
            const int c = m / (ROWS * G::OW), r = m / G::OW % ROWS, x = m % G::OW;
            rb[i][h] = ((c * PR + r * G::SV) * G::PC + x * G::SH) * G::CS;
        }

    float acc[MT][NT8][4];
    zero_fragments(acc);
    // a stage's fragments of the block's columns: two runs of BNT8 x 32 (halves h = 0, 1)
    const float4* block_frag = frag + j0 * 32;
    auto issue = [&](int st) {
        const float4* from = block_frag + (i64)st * G::FRAGS;
        float4* to = Bs + st % STAGES * STAGE;
        for (int e = threadIdx.x; e < STAGE; e += NT) {
            const int skip = e < BNT8 * 32 ? 0 : (G::NT8 - BNT8) * 32;
            cp_async16((float*)(to + e), (const float*)(from + e + skip), 16);
        }
    };
    int stage = 0;                                       // the stages run in order
    cp_async_stages<STAGES>(G::NS, issue, [&](int buf) {
        patch_stage<DELTA, MT, NT8, BNT8, PASSES>(acc, P, rb, koff, Bs + buf * STAGE + wj * 32,
                                                   stage++, lane);
    });

    if constexpr (PWV > 0) {
        static_assert(!DELTA && ROWS % PWV == 0 && G::OH % PWV == 0 && G::OW % PWH == 0,
                      "pooling windows tile the block");
        constexpr int TS = BN + 4;                       // the staged tile's row
        __syncthreads();                                 // the patch and the stages are done
        stage_activations<WM, NT8, BM>(acc, smem, TS, wm0, wj, lane, epi);
        __syncthreads();
        patch_pool_store<ROWS, CASES, BN, PWV, PWH, NT>(smem, TS, case0, band, j0, M, out, ldo,
                                                        pids);
    } else {
        patch_store<DELTA, ROWS, CASES, WM, NT8, BM>(acc, case0, band, j0 + wj, wm0, lane, M,
                                                     out, ldo, prior, epi);
    }
}

#define CONV_PATCH_WEIGHTS_OF(NAME, DELTA)                                                      \
    extern "C" __global__ void NAME(const float* __restrict__ weights, float4* __restrict__ frag) \
    {                                                                                            \
        conv_patch_weights_body<DELTA>(weights, frag);                                           \
    }

#define CONV_PATCH_OF(NAME, DELTA, ROWS, CASES, WM, WN, BN, STAGES, PASSES)                    \
    extern "C" __global__ void __launch_bounds__(                                                \
        32 * ((CASES * ROWS * Geom<DELTA>::OW + WM - 1) / WM) * (BN / WN))                       \
        NAME(const float* __restrict__ src, int lda, const float4* __restrict__ frag, int M,     \
             float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi)        \
    {                                                                                            \
        conv_patch_body<DELTA, ROWS, CASES, WM, WN, BN, STAGES, PASSES>(src, lda, frag, M, out,  \
                                                                        ldo, prior, epi);        \
    }

// The activation followed by the max pooling (PWV x PWH windows) in its epilogue: pout, pids
// (ldp a case) get the pooled layer's activation and winners (pids null: none), this layer's
// own activation is not written.
#define CONV_PATCH_POOL(NAME, ROWS, CASES, WM, WN, BN, STAGES, PASSES, PWV, PWH)                \
    extern "C" __global__ void __launch_bounds__(                                                \
        32 * ((CASES * ROWS * Geom<false>::OW + WM - 1) / WM) * (BN / WN))                       \
        NAME(const float* __restrict__ src, int lda, const float4* __restrict__ frag, int M,     \
             float* __restrict__ pout, int ldp, int* __restrict__ pids)                          \
    {                                                                                            \
        conv_patch_body<false, ROWS, CASES, WM, WN, BN, STAGES, PASSES, PWV, PWH>(               \
            src, lda, frag, M, pout, ldp, nullptr, EPI_TANH, pids);                              \
    }

// the activation's, and the delta's into the prior layer
#define CONV_PATCH_WEIGHTS(NAME) CONV_PATCH_WEIGHTS_OF(NAME, false)
#define CONV_PATCH_DELTA_WEIGHTS(NAME) CONV_PATCH_WEIGHTS_OF(NAME, true)
#define CONV_PATCH(NAME, ROWS, CASES, WM, WN, BN, STAGES, PASSES)                               \
    CONV_PATCH_OF(NAME, false, ROWS, CASES, WM, WN, BN, STAGES, PASSES)
#define CONV_PATCH_DELTA(NAME, ROWS, CASES, WM, WN, BN, STAGES, PASSES)                         \
    CONV_PATCH_OF(NAME, true, ROWS, CASES, WM, WN, BN, STAGES, PASSES)

#ifndef SPECIALIZED     // the runtime defines it when it appends the variants conv_patch.py lists
CONV_PATCH_WEIGHTS(conv_patch_weights)
CONV_PATCH(conv_patch_r8_c2_w32x56_n56, 8, 2, 32, 56, 56, 3, 3)
CONV_PATCH_POOL(conv_patch_pool_r8_c2_w32x56_n56, 8, 2, 32, 56, 56, 3, 3, 2, 2)
#endif
