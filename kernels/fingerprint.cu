// The lanes' sums of the trace fingerprint (src/fingerprint.rs, docs/concepts/fingerprint.md)
// of several device buffers in one launch, so that an op's tensors cost one kernel and one
// 16-byte result each, whatever their size:
//
//   acc_L = sum_i mix(w_i ^ ((i + 1) * M_L))  mod 2^64    w_i: the i-th little-endian u64 of
//                                                          the buffer, the last zero-padded
//
// items[2 y] is buffer y's address and items[2 y + 1] its length in bytes; blockIdx.y picks the
// buffer, the blocks along x share its words (a grid-stride loop), each block sums its threads'
// words in shared memory and adds its two sums to out[2 y] and out[2 y + 1] (zeroed by the
// caller) with a 64-bit integer atomicAdd. Integer sums modulo 2^64 do not depend on the order
// of their terms, so any grid and any order of the atomics give the same value: unlike a float
// reduction, this one is deterministic. blockDim.x is FP_BLOCK (a power of two). The host makes
// the last mix (fingerprint::Fingerprint::finish).

typedef unsigned long long u64;

#define FP_BLOCK 256

// splitmix64's finalizer (fingerprint::mix).
__device__ __forceinline__ u64 fp_mix(u64 x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// Word i of the nbytes bytes at p, little-endian and zero-padded: one load where the word is
// whole and aligned, else byte by byte.
__device__ __forceinline__ u64 fp_word(const unsigned char* p, u64 i, u64 nbytes) {
    u64 at = 8 * i;
    if ((((u64)p) & 7) == 0 && at + 8 <= nbytes) return ((const u64*)p)[i];
    u64 w = 0;
    for (u64 b = 0; b < 8 && at + b < nbytes; ++b) w |= (u64)p[at + b] << (8 * b);
    return w;
}

extern "C" __global__ void fingerprint_sums(const u64* items, u64* out) {
    __shared__ u64 lane0[FP_BLOCK];
    __shared__ u64 lane1[FP_BLOCK];
    const unsigned char* p = (const unsigned char*)items[2 * blockIdx.y];
    u64 nbytes = items[2 * blockIdx.y + 1];
    u64 words = (nbytes + 7) / 8;
    u64 a0 = 0, a1 = 0;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        u64 w = fp_word(p, i, nbytes);
        a0 += fp_mix(w ^ ((i + 1) * 0x9e3779b97f4a7c15ULL));
        a1 += fp_mix(w ^ ((i + 1) * 0xd1b54a32d192ed03ULL));
    }
    unsigned t = threadIdx.x;
    lane0[t] = a0;
    lane1[t] = a1;
    __syncthreads();
    for (unsigned h = FP_BLOCK / 2; h > 0; h >>= 1) {
        if (t < h) {
            lane0[t] += lane0[t + h];
            lane1[t] += lane1[t + h];
        }
        __syncthreads();
    }
    if (t == 0) {
        atomicAdd(&out[2 * blockIdx.y], lane0[0]);
        atomicAdd(&out[2 * blockIdx.y + 1], lane1[0]);
    }
}
