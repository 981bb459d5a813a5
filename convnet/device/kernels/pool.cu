// Average and max pooling layers: activation and delta backpropagation (Equations 1-7 and 1-19).
// Activations are (case, row, col, slice), slice fastest; one thread per neuron, so adjacent
// threads touch adjacent slices.

#include "common.cuh"

// out: (cases, H, W, PD); ids (max pooling only): row * PW + col of the winner in the prior slice.
// The first maximum in row-then-column order wins.
extern "C" __global__ void pool_forward(
    const float* __restrict__ in, int PH, int PW, int PD, int H, int W, int wv, int wh,
    int sv, int sh, int is_max, float* __restrict__ out, int* __restrict__ ids, i64 total)
{
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int d = (int)(idx % PD);
    i64 q = idx / PD;
    const int ow = (int)(q % W);
    q /= W;
    const int oh = (int)(q % H);
    const i64 c = q / H;
    const float* x = in + c * ((i64)PH * PW * PD);
    const int r0 = oh * sv, c0 = ow * sh;
    if (is_max) {
        float best = x[((i64)r0 * PW + c0) * PD + d];
        int id = r0 * PW + c0;
        for (int r = r0; r < r0 + wv; ++r)
            for (int cc = c0; cc < c0 + wh; ++cc) {
                const float v = x[((i64)r * PW + cc) * PD + d];
                if (v > best) {
                    best = v;
                    id = r * PW + cc;
                }
            }
        out[idx] = best;
        ids[idx] = id;
    } else {
        float s = 0.f;
        for (int r = r0; r < r0 + wv; ++r)
            for (int cc = c0; cc < c0 + wh; ++cc) s += x[((i64)r * PW + cc) * PD + d];
        out[idx] = s / (float)(wv * wh);
    }
}

// delta of the prior layer (cases, PH, PW, PD) from the pooled layer's delta (cases, H, W, PD);
// prior_act is the prior layer's activation when it has a tanh (NULL after another pooling layer).
extern "C" __global__ void pool_backward(
    const float* __restrict__ delta, const int* __restrict__ ids, int PH, int PW, int PD, int H,
    int W, int wv, int wh, int sv, int sh, int is_max, const float* __restrict__ prior_act,
    float* __restrict__ out, i64 total)
{
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total) return;
    const int s = (int)(idx % PD);
    i64 q = idx / PD;
    const int c = (int)(q % PW);
    q /= PW;
    const int r = (int)(q % PH);
    const i64 cs = q / PH;
    // pooled rows whose window holds r: oh * sv <= r <= oh * sv + wv - 1
    const int rlo = r - wv + 1 <= 0 ? 0 : (r - wv + 1 + sv - 1) / sv;
    const int rhi = min(r / sv, H - 1);
    const int clo = c - wh + 1 <= 0 ? 0 : (c - wh + 1 + sh - 1) / sh;
    const int chi = min(c / sh, W - 1);
    const i64 base = cs * ((i64)H * W * PD);
    const int me = r * PW + c;
    float sum = 0.f;
    for (int oh = rlo; oh <= rhi; ++oh)
        for (int ow = clo; ow <= chi; ++ow) {
            const i64 k = base + ((i64)oh * W + ow) * PD + s;
            if (is_max) {
                if (ids[k] == me) sum += delta[k];
            } else {
                sum += delta[k];
            }
        }
    if (!is_max) sum /= (float)(wv * wh);
    if (prior_act) {
        const float a = prior_act[idx];
        sum *= 1.f - a * a;
    }
    out[idx] = sum;
}
