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

// T consecutive floats from shared memory into registers, 16 bytes at a time where T allows
// (the caller keeps the address aligned to the access width).
template <int T>
__device__ __forceinline__ void load_frag(float* r, const float* p)
{
    if (T % 4 == 0) {
#pragma unroll
        for (int i = 0; i < T; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(p + i);
            r[i] = v.x; r[i + 1] = v.y; r[i + 2] = v.z; r[i + 3] = v.w;
        }
    } else if (T % 2 == 0) {
#pragma unroll
        for (int i = 0; i < T; i += 2) {
            const float2 v = *reinterpret_cast<const float2*>(p + i);
            r[i] = v.x; r[i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < T; ++i) r[i] = p[i];
    }
}
