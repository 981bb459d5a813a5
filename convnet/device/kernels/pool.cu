// Average and max pooling layers: activation and delta backpropagation (Equations 1-7 and 1-19).
// Activations are (case, row, col, slice), slice fastest. Grid x covers the neurons of one case
// (one thread each, adjacent threads on adjacent slices); each thread then walks through the
// cases grid y apart, so a neuron's position is worked out once for many cases.

#include "common.cuh"

// Neuron j of a pooled layer of one case (slice fastest): its slice d, column ow and row oh.
__device__ __forceinline__ void pooled_neuron(int j, int PD, int W, int& d, int& ow, int& oh)
{
    d = j % PD;
    const int q = j / PD;
    ow = q % W;
    oh = q / W;
}

// out: (cases, H, W, PD); ids (max pooling only, unless null): row * PW + col of the winner in
// the prior slice. The first maximum in row-then-column order wins.
extern "C" __global__ void pool_forward(
    const float* __restrict__ in, int PH, int PW, int PD, int H, int W, int wv, int wh,
    int sv, int sh, int is_max, float* __restrict__ out, int* __restrict__ ids, int nb)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int nhid = H * W * PD;
    if (j >= nhid) return;
    int d, ow, oh;
    pooled_neuron(j, PD, W, d, ow, oh);
    const int r0 = oh * sv, c0 = ow * sh;
    const i64 prior_n = (i64)PH * PW * PD;
    for (int cs = blockIdx.y; cs < nb; cs += gridDim.y) {
        const float* x = in + cs * prior_n;
        const i64 o = (i64)cs * nhid + j;
        if (is_max) {
            float best = x[(r0 * PW + c0) * PD + d];
            int id = r0 * PW + c0;
            for (int r = r0; r < r0 + wv; ++r)
                for (int c = c0; c < c0 + wh; ++c) {
                    const float v = x[(r * PW + c) * PD + d];
                    if (v > best) {
                        best = v;
                        id = r * PW + c;
                    }
                }
            out[o] = best;
            if (ids) ids[o] = id;
        } else {
            float s = 0.f;
            for (int r = r0; r < r0 + wv; ++r)
                for (int c = c0; c < c0 + wh; ++c) s += x[(r * PW + c) * PD + d];
            out[o] = s / (float)(wv * wh);
        }
    }
}

// delta of the prior layer (cases, PH, PW, PD) from the pooled layer's delta (cases, H, W, PD);
// prior_act is the prior layer's activation when it has a tanh (NULL after another pooling layer).
extern "C" __global__ void pool_backward(
    const float* __restrict__ delta, const int* __restrict__ ids, int PH, int PW, int PD, int H,
    int W, int wv, int wh, int sv, int sh, int is_max, const float* __restrict__ prior_act,
    float* __restrict__ out, int nb)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int nprior = PH * PW * PD;
    if (j >= nprior) return;
    const int s = j % PD;
    const int q = j / PD;
    const int c = q % PW;
    const int r = q / PW;
    // pooled rows whose window holds r: oh * sv <= r <= oh * sv + wv - 1
    const int rlo = r - wv + 1 <= 0 ? 0 : (r - wv + 1 + sv - 1) / sv;
    const int rhi = min(r / sv, H - 1);
    const int clo = c - wh + 1 <= 0 ? 0 : (c - wh + 1 + sh - 1) / sh;
    const int chi = min(c / sh, W - 1);
    const int me = r * PW + c;
    const int nhid = H * W * PD;
    for (int cs = blockIdx.y; cs < nb; cs += gridDim.y) {
        const i64 base = (i64)cs * nhid;
        const i64 o = (i64)cs * nprior + j;
        const float a = prior_act ? prior_act[o] : 0.f;     // issued before the window's loads
        float sum = 0.f;
        for (int oh = rlo; oh <= rhi; ++oh)
            for (int ow = clo; ow <= chi; ++ow) {
                const i64 k = base + (oh * W + ow) * PD + s;
                const float dv = delta[k];
                if (is_max) {
                    const int id = ids[k];
                    if (id == me) sum += dv;
                } else {
                    sum += dv;
                }
            }
        if (!is_max) sum /= (float)(wv * wh);
        if (prior_act) sum *= 1.f - a * a;
        out[o] = sum;
    }
}

// pool_backward for max pooling whose windows tile the prior layer exactly (strides equal to the
// widths, PH = H * wv, PW = W * wh), so every prior neuron lies in one window: one thread per
// pooled neuron reads its delta and winner once and writes its whole window (the winner's delta,
// zeros elsewhere), instead of one thread per prior neuron reading the window's delta and winner
// again. pooled is the pooling layer's activation when the prior layer has a tanh (NULL
// otherwise): the winner's activation is the pooled value itself, so tanh' = 1 - a^2 needs no read
// of the prior layer. Same bits as pool_backward: 0 + delta, times 1 - a^2, and +0 elsewhere
// (tanh values lie in [-1, 1], so pool_backward's 0 * (1 - a^2) is +0 there too).
extern "C" __global__ void pool_backward_tiles(
    const float* __restrict__ delta, const int* __restrict__ ids, const float* __restrict__ pooled,
    int PW, int PD, int H, int W, int wv, int wh, float* __restrict__ out, int nb)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int nhid = H * W * PD;
    if (j >= nhid) return;
    int d, ow, oh;
    pooled_neuron(j, PD, W, d, ow, oh);
    const int r0 = oh * wv, c0 = ow * wh;
    const i64 nprior = (i64)nhid * wv * wh;
    for (int cs = blockIdx.y; cs < nb; cs += gridDim.y) {
        const i64 k = (i64)cs * nhid + j;
        const int id = ids[k];
        float g = 0.f;
        g += delta[k];
        if (pooled) {
            const float a = pooled[k];
            g *= 1.f - a * a;
        }
        float* o = out + cs * nprior + d;
        for (int r = r0; r < r0 + wv; ++r)
            for (int c = c0; c < c0 + wh; ++c) {
                const int me = r * PW + c;
                o[(i64)me * PD] = me == id ? g : 0.f;
            }
    }
}
