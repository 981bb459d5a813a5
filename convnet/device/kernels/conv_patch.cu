// A convolutional layer's activation on the tensor cores (split TF32, or one TF32 product),
// compiled for the layer's shape (the CT_* constants of conv_tiled.cu; conv_patch.py lists the
// variants and appends their instantiations). A candidate beside the gather products of
// gemm_split.cu (gemm_tf32.cu) wherever the kernel plan puts a layer's activation on the tensor
// cores.
//
// The gather products copy every window input once for each output position whose window holds
// it (25 times for a 5 x 5 window). Here a block copies its cases' rows of prior activations, the
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

namespace cp {
constexpr int PD4 = (CT_PD + 3) / 4 * 4;
// floats from one position to the next in the patch: an odd number of 16-byte units, so that the
// 8 positions of a fragment's rows fall in 8 different bank groups
constexpr int CS = (PD4 / 4) % 2 ? PD4 : PD4 + 4;
constexpr int KW = CT_FV * CT_FH * CT_PD;              // window inputs; the bias is k = KW
constexpr int NS = (KW + 1 + 15) / 16;                 // stages of 16 k
// column fragments of the whole layer: a multiple of 4 (blocks of 32 columns) past 56 columns
constexpr int NT8 = CT_D <= 56 ? (CT_D + 7) / 8 : (CT_D + 31) / 32 * 4;
constexpr int PC = (CT_W - 1) * CT_SH + CT_FH;         // patch columns
constexpr int FRAGS = 2 * NT8 * 32;                    // float4 of one stage's B fragments

__device__ __forceinline__ int window_offset(int k)
{
    const int tap = k / CT_PD, s = k - tap * CT_PD;
    return ((tap / CT_FH) * PC + tap % CT_FH) * CS + s;
}
}  // namespace cp

// The forward weights (KW + 1 rows of CT_LDW) split into B fragments: frag[(2 st + h) NT8 + j]
// [lane] = {b0 hi, b1 hi, b0 lo, b1 lo} of stage st, its 8 k of half h, columns 8j.., where lane
// (g = lane / 4, t = lane % 4) holds k 8h + t and 8h + t + 4 of column 8j + g; zero past the
// weights.
__device__ __forceinline__ void conv_patch_weights_body(const float* __restrict__ weights,
                                                        float4* __restrict__ frag)
{
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= cp::NS * cp::FRAGS) return;
    const int lane = idx & 31, j = (idx >> 5) % cp::NT8, half = idx / (32 * cp::NT8);
    const int k = 8 * half + (lane & 3), n = 8 * j + (lane >> 2);
    const float b0 = k <= cp::KW && n < CT_D ? weights[k * CT_LDW + n] : 0.f;
    const float b1 = k + 4 <= cp::KW && n < CT_D ? weights[(k + 4) * CT_LDW + n] : 0.f;
    unsigned h0, l0, h1, l1;
    split_tf32(b0, h0, l0);
    split_tf32(b1, h1, l1);
    frag[idx] = make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0),
                            __uint_as_float(l1));
}

// The patch of a block: CASES cases x PR prior rows (from prior row r0, which may be above the
// layer: padding) x PC columns x CS floats, zero where the window leaves the prior layer, past
// PD and past M. Copied 16 bytes at a time where the rows allow it.
template <int CASES, int PR, int NT>
__device__ __forceinline__ void copy_patch(float* P, const float* __restrict__ src, int lda,
                                           int case0, int M, int r0, bool vec)
{
    constexpr int Q = cp::CS / 4, ITEMS = CASES * PR * cp::PC * Q;
    for (int e = threadIdx.x; e < ITEMS; e += NT) {
        const int q = e % Q, col = e / Q % cp::PC, row = e / Q / cp::PC % PR;
        const int c = e / Q / cp::PC / PR, m = case0 + c;
        const int r = r0 + row, x = col - CT_PZ;
        float* dst = P + ((c * PR + row) * cp::PC + col) * cp::CS + 4 * q;
        const bool inside = m < M && r >= 0 && r < CT_PH && x >= 0 && x < CT_PW;
        const float* s = src + (i64)min(m, M - 1) * lda + (i64)(r * CT_PW + x) * CT_PD + 4 * q;
        if (vec)
            cp_async16(dst, s, inside && 4 * q < CT_PD ? 16 : 0);
        else
#pragma unroll
            for (int i = 0; i < 4; ++i) cp_async4(dst + i, s + i, inside && 4 * q + i < CT_PD);
    }
}

// One stage of 16 k: the warp's MT x NT8 fragments summed from zero, then added to acc.
// rb: the patch offsets of this lane's rows (g and g + 8 of each m16 tile); koff: offset(k)
template <int MT, int NT8, int PASSES>
__device__ __forceinline__ void patch_stage(float (&acc)[MT][NT8][4], const float* P,
                                            const int (&rb)[MT][2], const int* koff,
                                            const float4* B, int stage, int lane)
{
    const int t = lane & 3;
    const bool tail = 16 * stage + 16 > cp::KW;          // the stage holds the bias (or k past it)
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
            if (tail) {
                if (ka >= cp::KW) v[0] = v[1] = ka == cp::KW ? 1.f : 0.f;
                if (kb >= cp::KW) v[2] = v[3] = kb == cp::KW ? 1.f : 0.f;
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) tf32_operand<PASSES>(v[e], ah[i][e], al[i][e]);
        }
#pragma unroll
        for (int j = 0; j < NT8; ++j) {
            const float4 f = B[(h * NT8 + j) * 32 + lane];
            bh[j][0] = __float_as_uint(f.x), bh[j][1] = __float_as_uint(f.y);
            bl[j][0] = __float_as_uint(f.z), bl[j][1] = __float_as_uint(f.w);
        }
        if (PASSES == 3) {
            mma_fragments(sum, al, bh);
            mma_fragments(sum, ah, bl);
        }
        mma_fragments(sum, ah, bh);
    }
    for_each_fragment_element<MT, NT8>(lane, [&](int i, int j, int e, int, int) {
        acc[i][j][e] += sum[i][j][e];
    });
}

// A block: CASES cases x ROWS rows of this layer's positions (blockIdx.x), BN columns
// (blockIdx.y), warps of WM positions x BN columns, STAGES stages of B fragments in flight.
template <int ROWS, int CASES, int WM, int BN, int STAGES, int PASSES>
__device__ __forceinline__ void conv_patch_body(const float* __restrict__ src, int lda,
                                                const float4* __restrict__ frag, int M,
                                                float* __restrict__ out, int ldo, int epi)
{
    constexpr int BM = CASES * ROWS * CT_W, WARPS = (BM + WM - 1) / WM, NT = 32 * WARPS;
    constexpr int MT = WM / 16, NT8 = BN / 8, BANDS = (CT_H + ROWS - 1) / ROWS;
    constexpr int PR = (ROWS - 1) * CT_SV + CT_FV, PATCH = (CASES * PR * cp::PC * cp::CS + 3) & ~3;
    constexpr int STAGE = 2 * NT8 * 32;                  // float4 of a block's stage
    static_assert(WM % 16 == 0 && BN % 8 == 0 && (CASES == 1 || ROWS == CT_H), "block shape");
    extern __shared__ __align__(16) float smem[];
    float* P = smem;
    float4* Bs = (float4*)(smem + PATCH);
    int* koff = (int*)(Bs + STAGES * STAGE);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
    const int case0 = blockIdx.x / BANDS * CASES, band = blockIdx.x % BANDS;
    const int j0 = blockIdx.y * NT8;                     // the block's first column fragment
    const bool vec = CT_PD % 4 == 0 && lda % 4 == 0 && ((size_t)src & 15) == 0;
    copy_patch<CASES, PR, NT>(P, src, lda, case0, M, band * ROWS * CT_SV - CT_PV, vec);
    for (int k = threadIdx.x; k < cp::NS * 16; k += NT) koff[k] = k < cp::KW ? cp::window_offset(k) : 0;

    int rb[MT][2];                                       // rows past the block read row 0
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int m = warp * WM + i * 16 + g + 8 * h;
            m = m < BM ? m : 0;
            const int c = m / (ROWS * CT_W), r = m / CT_W % ROWS, x = m % CT_W;
            rb[i][h] = ((c * PR + r * CT_SV) * cp::PC + x * CT_SH) * cp::CS;
        }

    float acc[MT][NT8][4];
    zero_fragments(acc);
    // a stage's fragments of the block's columns: two runs of NT8 x 32 (halves h = 0, 1)
    const float4* block_frag = frag + j0 * 32;
    auto issue = [&](int st) {
        const float4* from = block_frag + (i64)st * cp::FRAGS;
        float4* to = Bs + st % STAGES * STAGE;
        for (int e = threadIdx.x; e < STAGE; e += NT) {
            const int skip = e < NT8 * 32 ? 0 : (cp::NT8 - NT8) * 32;
            cp_async16((float*)(to + e), (const float*)(from + e + skip), 16);
        }
    };
    int stage = 0;                                       // the stages run in order
    cp_async_stages<STAGES>(cp::NS, issue, [&](int buf) {
        patch_stage<MT, NT8, PASSES>(acc, P, rb, koff, Bs + buf * STAGE, stage++, lane);
    });

    // the outputs, a row (position) at a time: rows g and g + 8 of each m16 tile
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = warp * WM + i * 16 + g + 8 * h;
            const int c = m / (ROWS * CT_W), r = band * ROWS + m / CT_W % ROWS, x = m % CT_W;
            if (m >= BM || case0 + c >= M || r >= CT_H) continue;
            const i64 row = (i64)(case0 + c) * ldo + (r * CT_W + x) * CT_D;
#pragma unroll
            for (int j = 0; j < NT8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = 8 * (j0 + j) + 2 * (lane & 3) + e;
                    if (n < CT_D) out[row + n] = nn_epilogue(acc[i][j][2 * h + e], epi, nullptr, row + n);
                }
        }
}

#define CONV_PATCH_WEIGHTS(NAME)                                                                 \
    extern "C" __global__ void NAME(const float* __restrict__ weights, float4* __restrict__ frag) \
    {                                                                                            \
        conv_patch_weights_body(weights, frag);                                                  \
    }

#define CONV_PATCH(NAME, ROWS, CASES, WM, BN, STAGES, PASSES)                                   \
    extern "C" __global__ void __launch_bounds__(32 * ((CASES * ROWS * CT_W + WM - 1) / WM))    \
        NAME(const float* __restrict__ src, int lda, const float4* __restrict__ frag, int M,     \
             float* __restrict__ out, int ldo, int epi)                                         \
    {                                                                                            \
        conv_patch_body<ROWS, CASES, WM, BN, STAGES, PASSES>(src, lda, frag, M, out, ldo, epi); \
    }

#ifndef SPECIALIZED     // the runtime defines it when it appends the variants conv_patch.py lists
CONV_PATCH_WEIGHTS(conv_patch_weights)
CONV_PATCH(conv_patch_r8_c2_w32_n56, 8, 2, 32, 56, 3, 3)
#endif
