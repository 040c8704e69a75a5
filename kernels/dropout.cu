// dropout: element i is kept when the uniform of word offset + i is >= p; kept values are
// multiplied by `scale` (1 / (1 - p), computed on the host in f32 as on the CPU).
#include "philox.cuh"

extern "C" __global__ void dropout_philox(const float* x, float* y, unsigned char* mask, u64 n,
                                          u64 seed, u64 stream, u64 offset, float p, float scale) {
    u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        float u = philox_uniform(philox_word(seed, stream, offset + i));
        bool keep = u >= p;
        mask[i] = keep ? 1 : 0;
        y[i] = keep ? x[i] * scale : 0.0f;
    }
}
