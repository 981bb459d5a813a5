// Activation of one convolutional layer as a real tiled convolution, compiled for that layer's
// shape (the runtime defines the CT_* constants below; conv_tiled.py chooses the tile variants and
// appends their instantiations). Used beside the gather product of gemm.cu: the tuner times both
// on the real data and keeps the faster.
//
// A block takes CASES cases. It copies each case's prior activations, the zero padding around
// them included, into shared memory once (16-byte cp.async copies where the layout allows), so
// the windows are formed from shared memory with offsets known at compile time and no index
// table. The k loop runs over the filter taps (row, column) and, inside a tap, over the prior
// slices; each tap's weights (prior slices x this layer's slices) are copied to shared memory
// while the previous tap is multiplied. A thread keeps TM output positions x TN slices in
// registers (its slices dealt out in groups of 4, see ct_slice, so that any TN reads its
// weights 16 bytes at a time); for a position the prior slices are contiguous, so four k steps
// of its window are one 16-byte load. The results pass through shared memory (after tanh) and
// leave as one contiguous run per block.
//
// Every output's sum runs over k in gemm_nn's order: window rows, columns, prior slices, then
// the bias (fmaf(1, bias, acc)); the zero padding is multiplied in as gemm_nn multiplies it
// (its products add exactly nothing). Prior slices past PD (padding to a multiple of 4) meet zero
// weights, whose products add exactly nothing as well: the results are gemm_nn's, bit for bit.

#include "common.cuh"

#ifndef CT_PH   // the layer's shape; these defaults (LeNet's second layer) let the file build alone
#define CT_PH 12    // prior height, width, depth
#define CT_PW 12
#define CT_PD 20
#define CT_H 8      // this layer's height, width, depth
#define CT_W 8
#define CT_D 50
#define CT_FV 5     // filter rows, columns (2 * half-width + 1)
#define CT_FH 5
#define CT_PV 0     // zero padding above / left of the prior layer
#define CT_PZ 0
#define CT_SV 1     // strides
#define CT_SH 1
#define CT_LDW 64   // row length of the forward weight layout (depth padded to 32)
#endif

namespace ct {
constexpr int PD4 = (CT_PD + 3) / 4 * 4;                // prior slices, padded to a multiple of 4
constexpr int RIN = (CT_H - 1) * CT_SV + CT_FV;         // prior rows the windows cover (padding incl.)
constexpr int CIN = (CT_W - 1) * CT_SH + CT_FH;         // prior columns the windows cover
// a row of the shared copy: an odd number of 16-byte units, so the 8 threads of a quarter warp
// reading 8 consecutive rows hit 8 different bank groups
constexpr int ROW = CIN * PD4 + ((CIN * PD4 / 4) % 2 == 0 ? 4 : 0);
constexpr int CASE = RIN * ROW;                         // floats of one case's shared copy
constexpr int HW = CT_H * CT_W;
constexpr int TAPS = CT_FV * CT_FH;
constexpr int OUT = HW * CT_D;                          // floats of one case's output
// The shared copy with positions CS floats apart along a row: PD4 (ROW and CASE above), or for
// conv_fwd's spread variants, whose neighbouring lanes read neighbouring positions, an odd number
// of 16-byte units, so that 8 consecutive positions fall in 8 different bank groups.
template <int SPREAD>
struct Copy {
    static constexpr int CS = SPREAD && (PD4 / 4) % 2 == 0 ? PD4 + 4 : PD4;
    static constexpr int ROW = CIN * CS + ((CIN * CS / 4) % 2 == 0 ? 4 : 0);
    static constexpr int CASE = RIN * ROW;
};
// spread variants stage position g's outputs at g * SD (an odd count: the lanes' scalar stores,
// a position apart, fall in different banks)
constexpr int SD = CT_D % 2 == 0 ? CT_D + 1 : CT_D;
}  // namespace ct

__device__ __forceinline__ void ct_cp_async16(float* smem, const float* gmem, bool valid)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int size = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(size));
}

__device__ __forceinline__ void ct_cp_async4(float* smem, const float* gmem, bool valid)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int size = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(size));
}

__device__ __forceinline__ void ct_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void ct_cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
__device__ __forceinline__ void ct_cp_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::); }

__device__ __forceinline__ float ct_lane(const float4& v, int q)
{
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

// The prior activations of cases m0 .. m0+CASES-1 (zeros past M and in the padding) into Xs.
template <int CASES, int NT, int SPREAD = 0>
__device__ __forceinline__ void ct_load_cases(float* Xs, const float* __restrict__ src, int lda,
                                              int m0, int M)
{
    using namespace ct;
    using L = Copy<SPREAD>;
    const bool vec = CT_PD % 4 == 0 && (lda & 3) == 0 && ((size_t)src & 15) == 0;
    if (vec) {
        constexpr int UNITS = RIN * CIN * PD4 / 4;
        for (int u = threadIdx.x; u < CASES * UNITS; u += NT) {
            const int c = u / UNITS;
            const int v = u - c * UNITS;
            const int i = v / (CIN * PD4 / 4);
            const int w = v - i * (CIN * PD4 / 4);
            const int j = w / (PD4 / 4);
            const int s = (w - j * (PD4 / 4)) * 4;
            const int r = i - CT_PV, col = j - CT_PZ;
            const bool ok = m0 + c < M && r >= 0 && r < CT_PH && col >= 0 && col < CT_PW;
            const float* g = ok ? src + (i64)(m0 + c) * lda + (r * CT_PW + col) * CT_PD + s : src;
            ct_cp_async16(Xs + c * L::CASE + i * L::ROW + j * L::CS + s, g, ok);
        }
    } else {
        constexpr int ELEMS = RIN * CIN * PD4;
        for (int u = threadIdx.x; u < CASES * ELEMS; u += NT) {
            const int c = u / ELEMS;
            const int v = u - c * ELEMS;
            const int i = v / (CIN * PD4);
            const int w = v - i * (CIN * PD4);
            const int j = w / PD4;
            const int s = w - j * PD4;
            const int r = i - CT_PV, col = j - CT_PZ;
            float x = 0.f;
            if (m0 + c < M && s < CT_PD && r >= 0 && r < CT_PH && col >= 0 && col < CT_PW)
                x = src[(i64)(m0 + c) * lda + (r * CT_PW + col) * CT_PD + s];
            Xs[c * L::CASE + i * L::ROW + j * L::CS + s] = x;
        }
    }
}

// The weights of filter taps [tap, tap + taps), each PD4 rows (zero rows past PD) of NC columns,
// into Bs (consecutive taps are consecutive rows of the forward layout).
template <int NC, int NT>
__device__ __forceinline__ void ct_load_taps(float* Bs, const float* __restrict__ Wf, int tap,
                                             int taps)
{
    using namespace ct;
    static_assert(NC % 4 == 0, "16-byte copies");
    constexpr int TAP_UNITS = PD4 * NC / 4;
    for (int u = threadIdx.x; u < taps * TAP_UNITS; u += NT) {
        const int t = u / TAP_UNITS;
        const int v = u - t * TAP_UNITS;
        const int s = v / (NC / 4);
        const int c = (v - s * (NC / 4)) * 4;
        const bool ok = s < CT_PD;
        ct_cp_async16(Bs + t * PD4 * NC + s * NC + c,
                      ok ? Wf + (i64)((tap + t) * CT_PD + s) * CT_LDW + c : Wf, ok);
    }
}

// The slices of the threads of column tn (of NCOL), TN each: groups of 4 consecutive slices are
// dealt to the columns in turn (column tn takes 4 tn .. 4 tn + 3, then 4 (NCOL + tn) .., ...),
// and the TN % 4 left over come last, as TN % 4 consecutive slices a column. So any TN reads a
// row of the weights in the layout's own order, 16 bytes at a time where it can.
template <int NCOL, int TN>
__device__ __forceinline__ int ct_slice(int tn, int j)
{
    constexpr int G = TN / 4, R = TN % 4;
    return j < 4 * G ? (j / 4) * 4 * NCOL + tn * 4 + j % 4 : 4 * G * NCOL + tn * R + (j - 4 * G);
}

// Column tn's TN weights of one row (NCOL * TN floats, 16-byte aligned) into b.
template <int NCOL, int TN>
__device__ __forceinline__ void ct_load_slices(float (&b)[TN], const float* row, int tn)
{
    constexpr int G = TN / 4, R = TN % 4;
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(row + g * 4 * NCOL + tn * 4);
        b[4 * g] = v.x; b[4 * g + 1] = v.y; b[4 * g + 2] = v.z; b[4 * g + 3] = v.w;
    }
    const float* rest = row + 4 * G * NCOL + tn * R;
    if (R == 2) {
        const float2 v = *reinterpret_cast<const float2*>(rest);
        b[4 * G] = v.x; b[4 * G + 1] = v.y;
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) b[4 * G + r] = rest[r];
    }
}

// The block's shared memory (dynamic: its size is the variant's, opted in above 48 KB).
extern __shared__ __align__(16) float ct_smem[];

template <int CASES, int TM, int TN, int TPS, int SPREAD>
struct ConvFwdTile {
    static constexpr int NCOL = (CT_D + TN - 1) / TN;      // threads across the slices
    static constexpr int NC = NCOL * TN;                    // slices computed (>= CT_D)
    static constexpr int ROWS = CASES * ct::HW;             // (case, position) rows of a block
    static constexpr int TR = (ROWS + TM - 1) / TM;         // threads across the rows
    static constexpr int NT = TR * NCOL;
    // the cases' copies (and later their staged outputs), then (16-byte aligned) the weights
    static constexpr int COPY = ct::Copy<SPREAD>::CASE;
    static constexpr int STAGED = SPREAD ? ct::HW * ct::SD : ct::OUT;
    static constexpr int XS = (CASES * (COPY > STAGED ? COPY : STAGED) + 3) / 4 * 4;
    static constexpr int STAGE = TPS * ct::PD4 * NC;        // floats of one stage of weights
    static constexpr int SMEM = 4 * (XS + 2 * STAGE);       // bytes
};

// PWV x PWH (0 x 0: none): the layer is followed by max pooling whose windows (strides equal to
// the widths) tile it, and the kernel writes that layer's activation and winners instead of its
// own (pout, ldp, pids; the winners only where pids is not null; see the end of the body).
// SPREAD: thread tr takes the positions tr, tr + TR, ... (neighbouring lanes read neighbouring
// positions: no bank conflicts where TM positions apart would have them) instead of TM
// consecutive ones; the sums are the same.
template <int CASES, int TM, int TN, int TPS, int PWV, int PWH, int SPREAD>
__device__ __forceinline__ void conv_fwd_body(const float* __restrict__ src, int lda,
                                              const float* __restrict__ Wf, int M,
                                              float* __restrict__ out, int ldo,
                                              int* __restrict__ pids)
{
    constexpr bool POOL = PWV > 0;
    static_assert(!POOL || (CT_H % PWV == 0 && CT_W % PWH == 0), "pooling windows tile the layer");
    using namespace ct;
    using T = ConvFwdTile<CASES, TM, TN, TPS, SPREAD>;
    using L = Copy<SPREAD>;
    constexpr int NC = T::NC, NCOL = T::NCOL, NT = T::NT, TR = T::TR, ROWS = T::ROWS;
    constexpr int STEPS = (TAPS + TPS - 1) / TPS;
    static_assert(NC <= CT_LDW, "slice tile");
    float* Xs = ct_smem;
    float* Bs = ct_smem + T::XS;            // two stages of TPS taps' weights

    const int tid = threadIdx.x;
    const int tr = tid % TR;
    const int tn = tid / TR;
    const int m0 = blockIdx.x * CASES;

    ct_load_cases<CASES, NT, SPREAD>(Xs, src, lda, m0, M);
    ct_load_taps<NC, NT>(Bs, Wf, 0, min(TPS, TAPS));
    ct_cp_commit();

    // shared-memory offset of each of this thread's windows (rows past the block's: row 0);
    // when a thread's TM positions lie in one row of the layer, they are one offset and steps
    // known at compile time (fewer registers)
    constexpr bool IN_ROW = !SPREAD && CT_W % TM == 0;
    int aoff[IN_ROW ? 1 : TM];
#pragma unroll
    for (int i = 0; i < (IN_ROW ? 1 : TM); ++i) {
        int g = SPREAD ? tr + i * TR : tr * TM + i;
        if (g >= ROWS) g = 0;
        const int c = g / HW;
        const int p = g - c * HW;
        const int oh = p / CT_W;
        const int ow = p - oh * CT_W;
        aoff[i] = c * L::CASE + oh * CT_SV * L::ROW + ow * CT_SH * L::CS;
    }
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    ct_cp_wait_all();
    __syncthreads();
    // a stage holds TPS taps' weights: one block-wide synchronisation per stage, not per tap
    for (int step = 0; step < STEPS; ++step) {
        if (step + 1 < STEPS) {
            const int next = (step + 1) * TPS;
            ct_load_taps<NC, NT>(Bs + ((step + 1) & 1) * T::STAGE, Wf, next, min(TPS, TAPS - next));
            ct_cp_commit();
        }
#pragma unroll 1
        for (int k = 0; k < TPS; ++k) {
            const int tap = step * TPS + k;
            if (TPS > 1 && tap >= TAPS) break;
            const int fr = tap / CT_FH;
            const int fc = tap - fr * CT_FH;
            const float* xs = Xs + fr * L::ROW + fc * L::CS;
            const float* bs = Bs + (step & 1) * T::STAGE + k * PD4 * NC;
#pragma unroll
            for (int s4 = 0; s4 < PD4 / 4; ++s4) {
                float4 a[TM];
#pragma unroll
                for (int i = 0; i < TM; ++i) {
                    const int off = IN_ROW ? aoff[0] + i * CT_SH * L::CS : aoff[i];
                    a[i] = *reinterpret_cast<const float4*>(xs + off + 4 * s4);
                }
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    float b[TN];
                    ct_load_slices<NCOL, TN>(b, bs + (4 * s4 + q) * NC, tn);
#pragma unroll
                    for (int i = 0; i < TM; ++i) {
                        const float x = ct_lane(a[i], q);
#pragma unroll
                        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(x, b[j], acc[i][j]);
                    }
                }
            }
        }
        ct_cp_wait_all();
        __syncthreads();
    }

    // the bias, tanh, and the block's outputs staged in Xs (cases' rows are contiguous there);
    // max pooling without winners (pids null: a forward-only evaluation) stages the net inputs
    // and takes one tanhf of each window's largest (the same values, see near_tanh_dip)
    const bool values_only = POOL && pids == nullptr;
    // with pooling, a thread's TM staged positions take one float more than their slices (GS),
    // so the threads of a warp, TM positions apart, store into different banks (where that
    // fits: it may reach into the weights' stages, idle by now); the pooling reads position g
    // of the block at staged(g)
    constexpr int GS = POOL && TR * (TM * CT_D + 1) <= T::XS + 2 * T::STAGE ? TM * CT_D + 1
                                                                             : TM * CT_D;
    auto staged = [](unsigned g) {
        return SPREAD ? (int)(g * SD) : (int)((g / TM) * GS + g % TM * CT_D);
    };
    float bias[TN];
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        const int n = ct_slice<NCOL, TN>(tn, j);
        bias[j] = n < CT_D ? Wf[(i64)TAPS * CT_PD * CT_LDW + n] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int g = SPREAD ? tr + i * TR : tr * TM + i;
        if (g >= ROWS) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = ct_slice<NCOL, TN>(tn, j);
            if (n < CT_D) {
                const float z = fmaf(1.f, bias[j], acc[i][j]);
                Xs[staged(g) + n] = values_only ? z : tanhf(z);
            }
        }
    }
    __syncthreads();
    const int cases = min(CASES, M - m0);
    float* o = out + (i64)m0 * ldo;
    if constexpr (POOL) {
        // pool_forward's values and winners, bit for bit: the first maximum of each window in
        // row-then-column order, the winner as row * W + column of this layer. The window is
        // known when compiled, so its values are read at once (independent loads) and the
        // divisions below are by constants; a thread takes two pooled neurons at a time.
        constexpr int NWIN = PWV * PWH;
        constexpr unsigned W2 = CT_W / PWH;
        constexpr unsigned PER_CASE = (CT_H / PWV) * W2 * CT_D;
        const unsigned count = cases * PER_CASE;
#pragma unroll 2
        for (unsigned u = tid; u < count; u += NT) {
            const unsigned c = u / PER_CASE;
            const unsigned j = u - c * PER_CASE;
            const unsigned q = j / CT_D;
            const unsigned n = j - q * CT_D;
            const unsigned pr = q / W2;
            const unsigned r0 = pr * PWV;
            const unsigned c0 = (q - pr * W2) * PWH;
            const unsigned g0 = c * HW + r0 * CT_W + c0;
            float v[NWIN];
#pragma unroll
            for (int w = 0; w < NWIN; ++w) v[w] = Xs[staged(g0 + (w / PWH) * CT_W + w % PWH) + n];
            float best = v[0];
            int win = 0;
#pragma unroll
            for (int w = 1; w < NWIN; ++w)
                if (v[w] > best) {
                    best = v[w];
                    win = w;
                }
            if (values_only) {
                if (near_tanh_dip(best)) {      // the window's tanhf one by one
                    best = tanhf(v[0]);
#pragma unroll
                    for (int w = 1; w < NWIN; ++w) {
                        const float t = tanhf(v[w]);
                        if (t > best) best = t;
                    }
                } else {
                    best = tanhf(best);
                }
                o[(i64)c * ldo + j] = best;
                continue;
            }
            o[(i64)c * ldo + j] = best;
            pids[(i64)(m0 + c) * ldo + j] = (r0 + win / PWH) * CT_W + c0 + win % PWH;
        }
        return;
    }
    if constexpr (SPREAD) {
        for (int u = tid; u < cases * OUT; u += NT) {
            const int c = u / OUT;
            const int p = (u - c * OUT) / CT_D;
            o[(i64)c * ldo + u - c * OUT] = Xs[staged(c * HW + p) + u - c * OUT - p * CT_D];
        }
    } else if (ldo == OUT && (ldo & 3) == 0 && ((size_t)o & 15) == 0) {
        const int units = cases * OUT / 4;
        for (int u = tid; u < units; u += NT)
            reinterpret_cast<float4*>(o)[u] = reinterpret_cast<const float4*>(Xs)[u];
    } else {
        for (int c = 0; c < cases; ++c)
            for (int u = tid; u < OUT; u += NT) o[(i64)c * ldo + u] = Xs[c * OUT + u];
    }
}

// One tile variant: CASES cases per block, TM positions x TN slices per thread, TPS filter taps
// per stage of weights; blockDim.x = ConvFwdTile<...>::NT, gridDim.x = ceil(M / CASES), dynamic
// shared memory ConvFwdTile<...>::SMEM bytes. MINB: blocks per multiprocessor the register
// allocation must allow.
#define CONV_FWD(NAME, CASES, TM, TN, MINB, TPS, SPREAD)                                         \
    extern "C" __global__ void __launch_bounds__(ConvFwdTile<CASES, TM, TN, TPS, SPREAD>::NT,    \
                                                 MINB)                                            \
    NAME(const float* __restrict__ src, int lda, const float* __restrict__ weights, int M,        \
         float* __restrict__ out, int ldo)                                                        \
    {                                                                                             \
        conv_fwd_body<CASES, TM, TN, TPS, 0, 0, SPREAD>(src, lda, weights, M, out, ldo, nullptr); \
    }

// The same tile variant followed by the max pooling (PWV x PWH windows that tile the layer):
// pout and pids (ldp floats and ints a case) get the pooled layer's activation and winners; this
// layer's own activation is not written.
#define CONV_FWD_POOL(NAME, CASES, TM, TN, MINB, TPS, SPREAD, PWV, PWH)                          \
    extern "C" __global__ void __launch_bounds__(ConvFwdTile<CASES, TM, TN, TPS, SPREAD>::NT,    \
                                                 MINB)                                            \
    NAME(const float* __restrict__ src, int lda, const float* __restrict__ weights, int M,        \
         float* __restrict__ pout, int ldp, int* __restrict__ pids)                               \
    {                                                                                             \
        conv_fwd_body<CASES, TM, TN, TPS, PWV, PWH, SPREAD>(src, lda, weights, M, pout, ldp,      \
                                                            pids);                                \
    }

// ------------------------------------------------------------------ delta backpropagation
// The delta of the prior layer, for strides of 1 (a transposed convolution): for prior position
// (r, c) and prior slice n,
//     out = sum over oh ascending, ow ascending (the positions whose windows cover (r, c)),
//           and this layer's slices j ascending, of delta(oh, ow, j) * w(tap(r - oh, c - ow), j, n)
// which is gemm_nn's order for the delta (plan.py: _backprop_pairs, then the slices), then the
// epilogue (times 1 - a^2 of the prior activation, or nothing) as gemm_nn writes it.
// A block takes CASES cases and copies their deltas into shared memory once (slices padded to a
// multiple of 4 with zeros). A thread owns one prior row r of one case, every column of it (or
// with PARTS > 1 one of PARTS runs of its columns: fewer sums a thread, more threads), and 4
// prior slices: for each filter tap (row fr descending, column fc descending, so oh and ow
// ascend) the tap's weights are in shared memory (copied while the previous tap is multiplied),
// the row oh = r + pad - fr is either inside the layer for the whole thread or not at all, and
// since fc is known at compile time (the tap columns are unrolled) so is which of the thread's
// columns each delta column reaches: only real terms are computed, none of the zero padding.
// Two choices make the variants: whether the threads of one prior row are padded to whole warps
// (PAD; then a warp's threads share their row and so whether a tap row applies, where without it
// a warp spans several rows and the threads of the rows outside wait), and whether a stage of
// weights holds one tap or a whole filter row (TPS; five times fewer block-wide syncs, five
// times the shared memory). AHEAD (a tap a stage): a block of one a multiprocessor takes group
// after group of CASES cases, copying the next group's deltas (a slice with each tap's weights)
// into a second copy while it sums this group's, so the copy is not waited for with nothing else
// to run. The order of additions is the same in every variant.
namespace ctb {
constexpr int JD4 = (CT_D + 3) / 4 * 4;             // this layer's slices, padded to 4
// a row of the shared copy: a number of 16-byte units that is 1 modulo 8 (neighbouring rows in
// different bank groups)
constexpr int DROW = (CT_W * JD4 / 4 + (9 - (CT_W * JD4 / 4) % 8) % 8) * 4;
}  // namespace ctb

template <int CASES, int PAD, int TPS, int PARTS, int AHEAD = 0>
struct ConvBwdTile {
    static constexpr int NCOL = CT_PD / 4;                  // threads across the prior slices
    static constexpr int LANES = NCOL * CASES;              // threads of one prior row
    // threads given to one prior row: LANES, or with PAD a power of two up to a warp, then whole
    // warps, so that the threads of a warp share their prior row and so their tap rows
    static constexpr int LP = !PAD ? LANES
                              : LANES > 16 ? (LANES + 31) / 32 * 32
                              : LANES > 8 ? 16 : LANES > 4 ? 8 : LANES > 2 ? 4 : LANES;
    // a prior row's columns in PARTS runs of CW, each its own LP threads
    static constexpr int CW = (CT_PW + PARTS - 1) / PARTS;
    static constexpr int NT = LP * PARTS * CT_PH;
    // a case's copy: a number of 16-byte units that is CASES modulo 8 (PAD: 1 modulo 8), so the
    // (case, row) pairs of a quarter warp fall in different bank groups
    static constexpr int U = CT_H * ctb::DROW / 4;
    static constexpr int DCASE = (U + (((PAD ? 1 : CASES % 8)) - U % 8 + 8) % 8) * 4;
    static constexpr int TAP = ctb::JD4 * CT_PD;            // floats of one tap's weights
    static constexpr int SMEM = 4 * ((AHEAD ? 2 : 1) * CASES * DCASE + 2 * TPS * TAP);   // bytes
};

// The backward weights of taps [tap, tap + taps) ([tap][slice][prior slice]), each JD4 rows of
// CT_PD (zero rows past CT_D), into Bs.
template <int NT>
__device__ __forceinline__ void ctb_load_taps(float* Bs, const float* __restrict__ Wb, int tap,
                                              int taps)
{
    using namespace ctb;
    constexpr int TAP_UNITS = JD4 * CT_PD / 4;
    const float* w = Wb + (i64)tap * CT_D * CT_PD;
    if (((size_t)Wb & 15) == 0) {
        for (int u = threadIdx.x; u < taps * TAP_UNITS; u += NT) {
            const int t = u / TAP_UNITS;
            const int v = u - t * TAP_UNITS;
            const bool ok = v * 4 < CT_D * CT_PD;
            ct_cp_async16(Bs + 4 * u, ok ? w + t * CT_D * CT_PD + 4 * v : Wb, ok);
        }
    } else {
        for (int u = threadIdx.x; u < taps * 4 * TAP_UNITS; u += NT) {
            const int t = u / (4 * TAP_UNITS);
            const int v = u - t * (4 * TAP_UNITS);
            Bs[u] = v < CT_D * CT_PD ? w[t * CT_D * CT_PD + v] : 0.f;
        }
    }
}

// One delta column's 4 slices times 4 slices of weights (b), into a prior column's 4 sums.
__device__ __forceinline__ void ctb_fma_column(float (&acc)[4], const float* a4,
                                               const float4 (&b)[4])
{
    const float4 a = *reinterpret_cast<const float4*>(a4);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float x = ct_lane(a, q);
        acc[0] = fmaf(x, b[q].x, acc[0]);
        acc[1] = fmaf(x, b[q].y, acc[1]);
        acc[2] = fmaf(x, b[q].z, acc[2]);
        acc[3] = fmaf(x, b[q].w, acc[3]);
    }
}

// Units [lo, hi) (a unit a float) of the copy of cases m0 .. m0 + CASES - 1's deltas into Ds
// (zeros past M and past CT_D): loads and stores, or with ASYNC cp.async copies (the caller
// waits for them).
template <int CASES, int NT, int DCASE, bool ASYNC>
__device__ __forceinline__ void ctb_copy_deltas(float* Ds, const float* __restrict__ delta,
                                                int ldd, int m0, int M, int lo, int hi)
{
    using namespace ctb;
    for (int u = lo + threadIdx.x; u < hi; u += NT) {
        const int c = u / (ct::HW * JD4);
        const int v = u - c * (ct::HW * JD4);
        const int p = v / JD4;
        const int j = v - p * JD4;
        const int oh = p / CT_W;
        const int ow = p - oh * CT_W;
        float* d = Ds + c * DCASE + oh * DROW + ow * JD4 + j;
        const bool ok = m0 + c < M && j < CT_D;
        const float* g = delta + (ok ? (i64)(m0 + c) * ldd + p * CT_D + j : 0);
        if (ASYNC)
            ct_cp_async4(d, g, ok);
        else
            *d = ok ? *g : 0.f;
    }
}

// v times the activation's derivative at p, where epi says so
__device__ __forceinline__ float ctb_epi(float v, float p, int epi)
{
    return epi == EPI_DERIV ? v * (1.f - p * p) : v;
}

// A thread's sums of one prior row r of case m (4 prior slices tn, its columns from c0) into
// out, times the activation's derivative at prior where epi says so; 16 bytes at a time where
// the rows allow (the same values).
template <int CW>
__device__ __forceinline__ void ctb_store(const float (&acc)[CW][4], float* __restrict__ out,
                                          int ldo, const float* __restrict__ prior, int epi,
                                          int m, int r, int c0, int tn)
{
    const bool vec = (ldo & 3) == 0 && ((size_t)out & 15) == 0
                     && (epi != EPI_DERIV || ((size_t)prior & 15) == 0);
#pragma unroll
    for (int j = 0; j < CW; ++j) {
        if (c0 + j >= CT_PW) break;
        const i64 o = (i64)m * ldo + (r * CT_PW + c0 + j) * CT_PD + tn * 4;
        if (vec) {
            float4 p = make_float4(0.f, 0.f, 0.f, 0.f);
            if (epi == EPI_DERIV) p = *reinterpret_cast<const float4*>(prior + o);
            *reinterpret_cast<float4*>(out + o) =
                make_float4(ctb_epi(acc[j][0], p.x, epi), ctb_epi(acc[j][1], p.y, epi),
                            ctb_epi(acc[j][2], p.z, epi), ctb_epi(acc[j][3], p.w, epi));
        } else {
#pragma unroll
            for (int n = 0; n < 4; ++n)
                out[o + n] = ctb_epi(acc[j][n], epi == EPI_DERIV ? prior[o + n] : 0.f, epi);
        }
    }
}

template <int CASES, int PAD, int TPS, int PARTS, int AHEAD>
__device__ __forceinline__ void conv_bwd_body(const float* __restrict__ delta, int ldd,
                                              const float* __restrict__ Wb, int M,
                                              float* __restrict__ out, int ldo,
                                              const float* __restrict__ prior, int epi)
{
    using namespace ctb;
    using T = ConvBwdTile<CASES, PAD, TPS, PARTS, AHEAD>;
    constexpr int NT = T::NT, NCOL = T::NCOL, DCASE = T::DCASE, TAP = T::TAP, CW = T::CW;
    constexpr int UNITS = CASES * ct::HW * JD4;             // floats of a block's copy
    static_assert(CT_SV == 1 && CT_SH == 1 && CT_PD % 4 == 0, "delta shape");
    static_assert(TPS == 1 || TPS == CT_FH, "a stage is one tap or one filter row");
    static_assert(!AHEAD || TPS == 1, "the next cases' copy goes a slice a tap");
    float* Bs = ct_smem + (AHEAD ? 2 : 1) * CASES * DCASE;   // two stages of TPS taps' weights

    const int tid = threadIdx.x;
    const int lane = tid % T::LP;
    const bool active = lane < T::LANES;   // PAD: the lanes past LANES only help with the copies
    const int tn = lane % NCOL;
    const int cs = active ? lane / NCOL : 0;
    // the runs of columns outermost, so a warp's threads share one (and which delta columns
    // reach it at each tap) but where a run's LP x CT_PH threads are not whole warps
    const int r = PARTS == 1 ? tid / T::LP : tid / T::LP % CT_PH;
    const int c0 = PARTS == 1 ? 0 : tid / (T::LP * CT_PH) * CW;    // the thread's first column
    int m0 = blockIdx.x * CASES;

    ctb_copy_deltas<CASES, NT, DCASE, false>(ct_smem, delta, ldd, m0, M, 0, UNITS);
    // taps are taken in descending order; a stage of a filter row holds its taps ascending
    ctb_load_taps<NT>(Bs, Wb, ct::TAPS - TPS, TPS);
    ct_cp_commit();
    ct_cp_wait_all();
    __syncthreads();

    int stage = 0;                          // stages of weights taken, over every pass
    for (int pass = 0;; ++pass) {
        // AHEAD: the block's next cases' deltas are copied a slice a stage while these are summed
        const float* Ds = ct_smem + (AHEAD ? (pass & 1) * CASES * DCASE : 0);
        float* Dn = ct_smem + ((pass + 1) & 1) * CASES * DCASE;
        const int m_next = m0 + gridDim.x * CASES;
        const bool more = AHEAD && m_next < M;
        float acc[CW][4];
#pragma unroll
        for (int c = 0; c < CW; ++c)
#pragma unroll
            for (int n = 0; n < 4; ++n) acc[c][n] = 0.f;

        int t = 0;                                          // taps done this pass
        for (int fr = CT_FV - 1; fr >= 0; --fr) {
            const int oh = r + CT_PV - fr;
            const bool row_in = active && oh >= 0 && oh < CT_H;
            const float* ds = Ds + cs * DCASE + oh * DROW;
            if (TPS > 1 && fr > 0) {                        // the next filter row's taps
                ctb_load_taps<NT>(Bs + ((stage + 1) & 1) * TPS * TAP, Wb, (fr - 1) * CT_FH, CT_FH);
                ct_cp_commit();
            }
#pragma unroll
            for (int k = 0; k < CT_FH; ++k, ++t) {
                const int fc = CT_FH - 1 - k;
                if (TPS == 1 && (t + 1 < ct::TAPS || more)) {
                    ctb_load_taps<NT>(Bs + ((stage + 1) & 1) * TAP, Wb,
                                      t + 1 < ct::TAPS ? ct::TAPS - 2 - t : ct::TAPS - 1, 1);
                    if (more)
                        ctb_copy_deltas<CASES, NT, DCASE, true>(Dn, delta, ldd, m_next, M,
                                                                t * UNITS / ct::TAPS,
                                                                (t + 1) * UNITS / ct::TAPS);
                    ct_cp_commit();
                }
                const float* bs = (TPS == 1 ? Bs + (stage & 1) * TAP
                                            : Bs + (stage & 1) * TPS * TAP + fc * TAP) + tn * 4;
                if (row_in) {
#pragma unroll 1
                    for (int s4 = 0; s4 < JD4 / 4; ++s4) {
                        float4 b[4];
#pragma unroll
                        for (int q = 0; q < 4; ++q)
                            b[q] = *reinterpret_cast<const float4*>(bs + (4 * s4 + q) * CT_PD);
                        if (PARTS == 1) {
#pragma unroll
                            for (int ow = 0; ow < CT_W; ++ow) {
                                const int c = ow - CT_PZ + fc;      // known at compile time
                                if (c < 0 || c >= CT_PW) continue;
                                ctb_fma_column(acc[c], ds + ow * JD4 + 4 * s4, b);
                            }
                        } else {            // the thread's columns: which ow reaches each is not
#pragma unroll                              // known at compile time (mostly the same for a warp)
                            for (int j = 0; j < CW; ++j) {
                                const int ow = c0 + j + CT_PZ - fc;
                                if (ow < 0 || ow >= CT_W || c0 + j >= CT_PW) continue;
                                ctb_fma_column(acc[j], ds + ow * JD4 + 4 * s4, b);
                            }
                        }
                    }
                }
                if (TPS == 1) {
                    ct_cp_wait_all();
                    __syncthreads();
                    ++stage;
                }
            }
            if (TPS > 1) {
                ct_cp_wait_all();
                __syncthreads();
                ++stage;
            }
        }
        if (active && m0 + cs < M)
            ctb_store<CW>(acc, out, ldo, prior, epi, m0 + cs, r, c0, tn);
        if (!more)
            return;
        m0 = m_next;
    }
}

// CASES cases per block; PAD: a prior row's threads padded to whole warps (or a power of two);
// TPS: taps per stage of weights (1 or a filter row); PARTS: runs of a prior row's columns, each
// taken by its own threads (1 or more: the same sums); AHEAD: a block takes cases m0, m0 +
// gridDim.x * CASES, ... in turn, each one's deltas copied while the one before is summed.
// blockDim.x = ConvBwdTile<...>::NT, gridDim.x = ceil(M / CASES) (AHEAD: any fewer), dynamic
// shared memory ConvBwdTile<...>::SMEM bytes. MINB: blocks per multiprocessor the register
// allocation must allow.
#define CONV_BWD(NAME, CASES, PAD, TPS, MINB, PARTS, AHEAD)                                       \
    extern "C" __global__ void                                                                    \
    __launch_bounds__(ConvBwdTile<CASES, PAD, TPS, PARTS, AHEAD>::NT, MINB)                       \
    NAME(const float* __restrict__ delta, int ldd, const float* __restrict__ weights, int M,      \
         float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi)              \
    {                                                                                             \
        conv_bwd_body<CASES, PAD, TPS, PARTS, AHEAD>(delta, ldd, weights, M, out, ldo, prior,     \
                                                     epi);                                        \
    }

// ------------------------------------------------------------------ weight gradient
// The weight gradient of the layer as partial sums over sub-chunks of cases: partial z (chunk
// z / SUBS, sub-chunk z % SUBS, the cases [chunk * CHUNK + sub * CHUNK / SUBS, ...) up to n_cases)
// of weight row k and column c (the slice n_lo + c) is
//     part[(z * R + k) * NL + c] = sum over its cases m ascending, then positions oh, ow ascending,
//                                  of x(m, window(oh, ow) + k) * delta(m, oh, ow, n_lo + c)
// with the bias row k = TAPS * PD reading 1. That order is the kernel's own (not gemm_tn's, whose
// sums run over positions outermost); it depends only on the architecture and the number of
// cases, so any MAX BATCH that is a multiple of CHUNK gives the same bits, and the tile variants
// below all add in it. The partials of a chunk are then added in float64 (grad_slot_sum) and the
// chunks after one another (grad_flatten), as for gemm_tn's position ranges.
// A block takes FRB filter rows (each FH * PD weight rows) and one partial; it copies one case at
// a time (the padded prior activations as conv_fwd does, and the case's deltas of columns
// n_lo .. n_hi, padded to NCP with zeros) into shared memory, the next case's copy in flight
// while one is multiplied. A thread keeps TN columns of 4 weight rows (4 prior slices, one
// 16-byte load of a window) of one tap, or with TAPROW of every tap of its filter row: then a
// window column, loaded once, serves every tap whose window reaches it. The bias row (it reads 1)
// is a group of threads of its own, or with TAPROW kept by the threads of the last filter row's
// first slices, which add the deltas they load anyway.
template <int TN, int TAPROW, int FRB, int STAGES>
struct ConvGradTile {
    static_assert(TAPROW || FRB == 1, "several filter rows per block need TAPROW");
    static constexpr int NCOLG = (CT_D + TN - 1) / TN;     // threads across the columns
    static constexpr int NCP = NCOLG * TN;                  // columns of a case's delta copy
    static constexpr int SG = ct::PD4 / 4;                  // groups of 4 prior slices
    static constexpr int K = ct::TAPS * CT_PD;              // the bias row
    // groups of weight rows a thread can take: 4 prior slices of one tap (the last group: the
    // bias row), or with TAPROW 4 prior slices of every tap of a filter row
    static constexpr int GROUPS = TAPROW ? FRB * SG : CT_FH * SG + 1;
    static constexpr int NT = GROUPS * NCOLG;
    // TAPROW: output columns whose deltas a thread holds at once, so that they and the sums fit
    // TAPROW_REGS (all of a row where they do; else the row in equal runs, each run's window
    // columns loaded again where runs meet)
    static constexpr int TAPROW_REGS = 112;
    static constexpr int FREE = (TAPROW_REGS - (CT_FH * 4 + 1) * TN) / TN;
    static constexpr int HELD = FREE > 0 ? FREE : 1;
    static constexpr int RUNS = (CT_W + HELD - 1) / HELD;
    static constexpr int CW = (CT_W + RUNS - 1) / RUNS;
    static constexpr int DS = ct::HW * NCP;                 // floats of a case's delta copy
    static constexpr int STAGE = (ct::CASE + DS + 3) / 4 * 4;  // (each stage 16-byte aligned)
    // bytes: two cases in turn (the next one loads while this one is summed), or with one
    // stage a case at a time, for layers whose two stages would not fit
    static constexpr int SMEM = 4 * STAGES * STAGE;
    static_assert(STAGES == 1 || STAGES == 2, "one or two stages");
};

// TAPROW: the sums of every tap of a filter row over output columns ow0 ... ow0 + CW - 1 of one
// output row (xs: the row's window, ds: its deltas). A window column, loaded once, serves each
// tap whose window reaches it; positions still ascend for every weight, run after run.
template <int TN, int FT, int CW, int NCP>
__device__ __forceinline__ void conv_grad_taprow_run(float (&acc)[FT][4][TN], float (&accb)[TN],
                                                     const float* xs, const float* ds, int ow0,
                                                     bool bias_row)
{
    using namespace ct;
    float b[CW][TN];
#pragma unroll
    for (int w = 0; w < CW; ++w)
        if (ow0 + w < CT_W) load_frag<TN>(b[w], ds + (ow0 + w) * NCP);
    if (bias_row) {                                     // positions ascending, as every weight
#pragma unroll
        for (int w = 0; w < CW; ++w)
#pragma unroll
            for (int j = 0; j < TN; ++j)
                if (ow0 + w < CT_W) accb[j] += b[w][j];
    }
    const int last = min(CIN, (ow0 + CW - 1) * CT_SH + CT_FH);
#pragma unroll
    for (int col = ow0 * CT_SH; col < last; ++col) {
        const float4 a = *reinterpret_cast<const float4*>(xs + col * PD4);
#pragma unroll
        for (int t = 0; t < FT; ++t) {
            const int ow = (col - t) / CT_SH;           // known at compile time
            if (col < t || (col - t) % CT_SH || ow >= CT_W || ow < ow0 || ow >= ow0 + CW)
                continue;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float x = ct_lane(a, i);
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[t][i][j] = fmaf(x, b[ow - ow0][j], acc[t][i][j]);
            }
        }
    }
}

template <int TN, int TAPROW, int FRB, int STAGES>
__device__ __forceinline__ void conv_grad_body(const float* __restrict__ src, int lda,
                                               const float* __restrict__ delta, int ldd, int n_lo,
                                               int n_hi, int n_cases, int chunk, int subs,
                                               float* __restrict__ part)
{
    using namespace ct;
    using T = ConvGradTile<TN, TAPROW, FRB, STAGES>;
    constexpr int NT = T::NT, NCOLG = T::NCOLG, NCP = T::NCP, SG = T::SG;
    constexpr int FT = TAPROW ? CT_FH : 1;                  // taps a thread keeps
    static_assert(CT_PD % 4 == 0 && TN % 2 == 0, "gradient shape");
    const int z = blockIdx.y;
    const int ch = z / subs;
    const int per = chunk / subs;
    const int lo = ch * chunk + (z - ch * subs) * per;
    const int hi = min(n_cases, lo + per);
    const int NL = n_hi - n_lo;

    const int tid = threadIdx.x;
    const int tn = tid % NCOLG;
    const int g = tid / NCOLG;
    const bool bias = !TAPROW && g == T::GROUPS - 1;        // the bias group
    const int fr = TAPROW ? blockIdx.x * FRB + g / SG : blockIdx.x;
    const bool live = fr < CT_FV;                           // (the last block's rows past FV idle)
    const int fc = TAPROW ? 0 : g / SG;
    const int s4 = (TAPROW ? g % SG : g - fc * SG) * 4;
    const int aoff = (live ? fr : 0) * ROW + fc * PD4 + s4;
    // TAPROW: the threads that also keep the bias row
    const bool bias_row = TAPROW && fr == CT_FV - 1 && s4 == 0;

    auto issue = [&](int m, int st) {
        float* Xs = ct_smem + st * T::STAGE;
        float* Ds = Xs + CASE;
        ct_load_cases<1, NT>(Xs, src, lda, m, hi);
        const float* d = delta + (i64)m * ldd + n_lo;
        for (int u = tid; u < T::DS; u += NT) {
            const int p = u / NCP;
            const int c = u - p * NCP;
            const bool ok = c < NL;
            ct_cp_async4(Ds + u, ok ? d + p * CT_D + c : delta, ok);
        }
    };

    float acc[FT][4][TN];
    float accb[TN];                                         // TAPROW: the bias row
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        accb[j] = 0.f;
#pragma unroll
        for (int t = 0; t < FT; ++t)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[t][i][j] = 0.f;
    }

    if (STAGES == 2 && lo < hi) issue(lo, 0);
    ct_cp_commit();
    for (int m = lo; m < hi; ++m) {
        const int st = STAGES == 2 ? (m - lo) & 1 : 0;
        if (STAGES == 2) {
            if (m + 1 < hi) issue(m + 1, st ^ 1);
            ct_cp_commit();
            ct_cp_wait_one();                               // case m has landed
        } else {                                            // one stage: case m, then its sums
            issue(m, 0);
            ct_cp_commit();
            ct_cp_wait_all();
        }
        __syncthreads();
        const float* Xs = ct_smem + st * T::STAGE;
        const float* Ds = Xs + CASE + tn * TN;
        if (!bias && !TAPROW) {
#pragma unroll 1
            for (int oh = 0; oh < CT_H; ++oh) {
                const float* xs = Xs + aoff + oh * CT_SV * ROW;
                const float* ds = Ds + oh * CT_W * NCP;
#pragma unroll
                for (int ow = 0; ow < CT_W; ++ow) {
                    const float4 a = *reinterpret_cast<const float4*>(xs + ow * CT_SH * PD4);
                    float b[TN];
                    load_frag<TN>(b, ds + ow * NCP);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const float x = ct_lane(a, i);
#pragma unroll
                        for (int j = 0; j < TN; ++j) acc[0][i][j] = fmaf(x, b[j], acc[0][i][j]);
                    }
                }
            }
        } else if (TAPROW && live) {
#pragma unroll 1
            for (int oh = 0; oh < CT_H; ++oh)
#pragma unroll
                for (int ow0 = 0; ow0 < CT_W; ow0 += T::CW)
                    conv_grad_taprow_run<TN, FT, T::CW, NCP>(acc, accb,
                                                             Xs + aoff + oh * CT_SV * ROW,
                                                             Ds + oh * CT_W * NCP, ow0, bias_row);
        } else if (bias && blockIdx.x == CT_FV - 1) {
#pragma unroll 4
            for (int p = 0; p < HW; ++p) {
                float b[TN];
                load_frag<TN>(b, Ds + p * NCP);
#pragma unroll
                for (int j = 0; j < TN; ++j) accb[j] += b[j];
            }
        }
        __syncthreads();                                    // stage st free for its next case
    }
    ct_cp_wait_all();

    constexpr int R = T::K + 1;
    float* out = part + (i64)z * R * NL;
    if (bias ? blockIdx.x == CT_FV - 1 : bias_row) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = tn * TN + j;
            if (c < NL) out[(i64)T::K * NL + c] = accb[j];
        }
    }
    if (bias || !live) return;
#pragma unroll
    for (int t = 0; t < FT; ++t) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int k = (fr * CT_FH + fc + t) * CT_PD + s4 + i;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int c = tn * TN + j;
                if (c < NL) out[(i64)k * NL + c] = acc[t][i][j];
            }
        }
    }
}

// TN columns per thread, TAPROW: a thread takes every tap of the filter row (else one), FRB
// filter rows per block, STAGES cases in shared memory at once (1 or 2; the same sums in the
// same order either way); blockDim.x = ConvGradTile<TN, TAPROW, FRB, STAGES>::NT, gridDim =
// (ceil(CT_FV / FRB), chunks * subs), dynamic shared memory ConvGradTile<...>::SMEM bytes.
#define CONV_GRAD(NAME, TN, TAPROW, FRB, STAGES)                                                  \
    extern "C" __global__ void __launch_bounds__(ConvGradTile<TN, TAPROW, FRB, STAGES>::NT,       \
                                                 TAPROW ? 1 : 2)                                  \
    NAME(const float* __restrict__ src, int lda, const float* __restrict__ delta, int ldd,        \
         int n_lo, int n_hi, int n_cases, int chunk, int subs, float* __restrict__ part)          \
    {                                                                                             \
        conv_grad_body<TN, TAPROW, FRB, STAGES>(src, lda, delta, ldd, n_lo, n_hi, n_cases, chunk, \
                                                subs, part);                                      \
    }

// ------------------------------------------------------------------ weight gradient, a warp each
// conv_grad's partial sums, in conv_grad's order (cases ascending, then positions ascending, one
// fmaf chain a weight), for layers narrow enough that one warp keeps every weight of the launch:
// lane t < ITEMS takes 4 prior slices (t % SG) of one tap (t / SG) for every column (NCP: the
// launch's columns padded to 4), lane ITEMS the bias row (its window reads 1, 0, 0, 0: fmaf(1, d,
// acc) is acc + d, as conv_grad adds it), the lanes past it the first item again for nothing, so
// that the warp never diverges. A warp is one partial (blockIdx.x * WARPS + its warp): it copies
// a band of RB output rows of one case at a time (the prior rows the band's windows cover, with
// their padding, and the band's deltas) into its own part of shared memory, the next band in
// flight while one is summed, and needs no block-wide synchronisation. So the warps are as many
// as the partials, where conv_grad's threads of one partial would be fewer than a warp. (Two
// warps a partial, each with its own copy, for windows of up to 63 such groups, lost to
// conv_grad's other variants: NOTES.md, "A warp a partial sum".)
template <int RB>
struct ConvGradWarpTile {
    static constexpr int SG = ct::PD4 / 4;                  // groups of 4 prior slices
    static constexpr int ITEMS = ct::TAPS * SG;             // lanes of the window's weight rows
    static constexpr int NCP = (CT_D + 3) / 4 * 4;          // columns of a band's delta copy
    static constexpr int BANDS = (CT_H + RB - 1) / RB;
    static constexpr int BIN = (RB - 1) * CT_SV + CT_FV;    // prior rows a band's windows cover
    static constexpr int XB = BIN * ct::ROW;
    static constexpr int STAGE = (XB + RB * CT_W * NCP + 3) / 4 * 4;
};

// Band `band` of case m (the rows of this layer band * RB ..; rows past the layer are not
// copied) into Xs (prior rows, padding zero) and Ds (deltas of columns n_lo .. n_hi, zeros up to
// NCP), by the 32 lanes of one warp.
template <int RB>
__device__ __forceinline__ void ct_load_band(float* Xs, const float* __restrict__ src, int lda,
                                             const float* __restrict__ delta, int ldd, int n_lo,
                                             int NL, int m, int band, int lane)
{
    using namespace ct;
    using T = ConvGradWarpTile<RB>;
    constexpr int NCP = T::NCP;
    float* Ds = Xs + T::XB;
    const int oh0 = band * RB;
    const int rows = min(RB, CT_H - oh0);
    const float* x = src + (i64)m * lda;
    constexpr int UNITS_ROW = CIN * PD4 / 4;
    const bool vec = (lda & 3) == 0 && ((size_t)src & 15) == 0;
    for (int u = lane; u < T::BIN * UNITS_ROW; u += 32) {
        const int i = u / UNITS_ROW;
        const int w = u - i * UNITS_ROW;
        const int j = w / (PD4 / 4);
        const int s = (w - j * (PD4 / 4)) * 4;
        const int r = oh0 * CT_SV + i - CT_PV, col = j - CT_PZ;
        const bool ok = r >= 0 && r < CT_PH && col >= 0 && col < CT_PW;
        const float* g = x + (r * CT_PW + col) * CT_PD + s;
        float* dst = Xs + i * ROW + j * PD4 + s;
        if (vec) {
            ct_cp_async16(dst, ok ? g : src, ok);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) ct_cp_async4(dst + e, ok ? g + e : src, ok);
        }
    }
    const float* d = delta + (i64)m * ldd + (i64)oh0 * CT_W * CT_D + n_lo;
    const bool vec_d = NL == NCP && CT_D % 4 == 0 && (ldd & 3) == 0 && (n_lo & 3) == 0
                       && ((size_t)delta & 15) == 0;
    if (vec_d) {
        for (int u = lane; u < rows * CT_W * NCP / 4; u += 32) {
            const int p = u / (NCP / 4);
            const int c = (u - p * (NCP / 4)) * 4;
            ct_cp_async16(Ds + p * NCP + c, d + p * CT_D + c, true);
        }
    } else {
        for (int u = lane; u < rows * CT_W * NCP; u += 32) {
            const int p = u / NCP;
            const int c = u - p * NCP;
            ct_cp_async4(Ds + u, c < NL ? d + p * CT_D + c : delta, c < NL);
        }
    }
}

template <int RB, int WARPS>
__device__ __forceinline__ void conv_grad_warp_body(const float* __restrict__ src, int lda,
                                                    const float* __restrict__ delta, int ldd,
                                                    int n_lo, int n_hi, int n_cases, int chunk,
                                                    int subs, float* __restrict__ part)
{
    using namespace ct;
    using T = ConvGradWarpTile<RB>;
    constexpr int NCP = T::NCP, SG = T::SG;
    static_assert(CT_PD % 4 == 0 && T::ITEMS < 32, "a lane for each 4 prior slices of a tap, and "
                  "one for the bias");
    const int lane = threadIdx.x % 32;
    const int z = blockIdx.x * WARPS + threadIdx.x / 32;
    if (z >= (n_cases + chunk - 1) / chunk * subs) return;
    const int ch = z / subs;
    const int lo = ch * chunk + (z - ch * subs) * (chunk / subs);
    const int hi = min(n_cases, lo + chunk / subs);
    const int NL = n_hi - n_lo;
    float* Xs0 = ct_smem + (threadIdx.x / 32) * 2 * T::STAGE;

    const bool bias = lane == T::ITEMS;
    const int item = lane < T::ITEMS ? lane : 0;
    const int tap = item / SG;
    const int s4 = (item - tap * SG) * 4;
    const int fr = tap / CT_FH;
    const int xoff = fr * ROW + (tap - fr * CT_FH) * PD4 + s4;

    float acc[4][NCP];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < NCP; ++j) acc[i][j] = 0.f;

    const int steps = max(0, hi - lo) * T::BANDS;
    int m = lo, band = 0;                   // the step being copied
    if (steps > 0) ct_load_band<RB>(Xs0, src, lda, delta, ldd, n_lo, NL, m, band, lane);
    ct_cp_commit();
    for (int s = 0; s < steps; ++s) {
        const int rows = min(RB, CT_H - band * RB);
        if (++band == T::BANDS) {
            band = 0;
            ++m;
        }
        if (s + 1 < steps)
            ct_load_band<RB>(Xs0 + ((s + 1) & 1) * T::STAGE, src, lda, delta, ldd, n_lo, NL, m,
                             band, lane);
        ct_cp_commit();
        ct_cp_wait_one();
        __syncwarp();
        const float* Xs = Xs0 + (s & 1) * T::STAGE;
        const float* Ds = Xs + T::XB;
#pragma unroll 1
        for (int ob = 0; ob < rows; ++ob) {
            const float* xs = Xs + xoff + ob * CT_SV * ROW;
            const float* ds = Ds + ob * CT_W * NCP;
#pragma unroll
            for (int ow = 0; ow < CT_W; ++ow) {
                float4 a = *reinterpret_cast<const float4*>(xs + ow * CT_SH * PD4);
                if (bias) a = make_float4(1.f, 0.f, 0.f, 0.f);
                float b[NCP];
                load_frag<NCP>(b, ds + ow * NCP);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float xv = ct_lane(a, i);
#pragma unroll
                    for (int j = 0; j < NCP; ++j) acc[i][j] = fmaf(xv, b[j], acc[i][j]);
                }
            }
        }
        __syncwarp();                       // this stage free for the step after next
    }
    ct_cp_wait_all();

    constexpr int K = TAPS * CT_PD;         // the bias row
    float* out = part + (i64)z * (K + 1) * NL;
    if (bias) {
#pragma unroll
        for (int j = 0; j < NCP; ++j)
            if (j < NL) out[(i64)K * NL + j] = acc[0][j];
    } else if (lane < T::ITEMS) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < NCP; ++j)
                if (j < NL) out[(i64)(tap * CT_PD + s4 + i) * NL + j] = acc[i][j];
    }
}

// RB output rows a band, WARPS partials a block; blockDim.x = 32 * WARPS, gridDim.x =
// ceil(chunks * subs / WARPS), dynamic shared memory 4 * WARPS * 2 * ConvGradWarpTile<RB>::STAGE
// bytes; the arguments are conv_grad's.
#define CONV_GRAD_WARP(NAME, RB, WARPS)                                                           \
    extern "C" __global__ void __launch_bounds__(32 * WARPS)                                      \
    NAME(const float* __restrict__ src, int lda, const float* __restrict__ delta, int ldd,        \
         int n_lo, int n_hi, int n_cases, int chunk, int subs, float* __restrict__ part)          \
    {                                                                                             \
        conv_grad_warp_body<RB, WARPS>(src, lda, delta, ldd, n_lo, n_hi, n_cases, chunk, subs,    \
                                       part);                                                     \
    }

#ifndef SPECIALIZED     // the runtime defines it when it appends the variants conv_tiled.py launches
CONV_FWD(conv_fwd_c2_m8_n8_b3, 2, 8, 8, 3, 1, 0)
CONV_FWD(conv_fwd_c2_m8_n8_b4, 2, 8, 8, 4, 1, 0)
CONV_FWD(conv_fwd_c3_m8_n8_b3, 3, 8, 8, 3, 1, 0)
CONV_FWD(conv_fwd_c2_m4_n8_b3, 2, 4, 8, 3, 1, 0)
CONV_FWD(conv_fwd_c2_m8_n4_b4, 2, 8, 4, 4, 1, 0)
CONV_FWD(conv_fwd_c2_m8_n4_b4_t5, 2, 8, 4, 4, 5, 0)
CONV_FWD(conv_fwd_c2_m8_n4_b4_sp, 2, 8, 4, 4, 1, 1)
CONV_FWD_POOL(conv_fwd_pool_w2x2_c2_m8_n8_b4, 2, 8, 8, 4, 1, 0, 2, 2)
CONV_FWD_POOL(conv_fwd_pool_w2x2_c2_m8_n8_b4_sp, 2, 8, 8, 4, 1, 1, 2, 2)
CONV_BWD(conv_bwd_c2, 2, 0, 1, 5, 1, 0)
CONV_BWD(conv_bwd_c3, 3, 0, 1, 2, 1, 0)
CONV_BWD(conv_bwd_c6_w, 6, 1, 1, 1, 1, 0)
CONV_BWD(conv_bwd_c3_w_t5, 3, 1, 5, 2, 1, 0)
CONV_BWD(conv_bwd_c3_p2, 3, 0, 1, 2, 2, 0)
CONV_BWD(conv_bwd_c3_w_t5_p2, 3, 1, 5, 2, 2, 0)
CONV_BWD(conv_bwd_c6_w_a, 6, 1, 1, 1, 1, 1)
CONV_GRAD(conv_grad_n4, 4, 0, 1, 2)
CONV_GRAD(conv_grad_n4_r, 4, 1, 1, 2)
CONV_GRAD(conv_grad_n2_r, 2, 1, 1, 2)
CONV_GRAD(conv_grad_n4_r5, 4, 1, 5, 2)
CONV_GRAD(conv_grad_n4_r5_s1, 4, 1, 5, 1)
#endif
