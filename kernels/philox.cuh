// Philox4x32-10 and the stream mapping of src/rng.rs, bit for bit.
//
// Word `w` of stream `stream` under `seed` is word `w % 4` of the Philox block with counter
// [lo(w/4), hi(w/4), lo(stream), hi(stream)] and key [lo(seed), hi(seed)].
// Uniform f32 in [0, 1): (w >> 8) * 2^-24 (exact in f32).
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;

struct PhiloxBlock {
    u32 w[4];
};

__device__ __forceinline__ PhiloxBlock philox4x32_10(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1) {
    const u32 M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += W0;
            k1 += W1;
        }
        u32 hi0 = __umulhi(M0, c0), lo0 = M0 * c0;
        u32 hi1 = __umulhi(M1, c2), lo1 = M1 * c2;
        u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    PhiloxBlock b;
    b.w[0] = c0;
    b.w[1] = c1;
    b.w[2] = c2;
    b.w[3] = c3;
    return b;
}

// Philox block `block` of stream `stream` under `seed`.
__device__ __forceinline__ PhiloxBlock philox_block(u64 seed, u64 stream, u64 block) {
    return philox4x32_10((u32)block, (u32)(block >> 32), (u32)stream, (u32)(stream >> 32),
                         (u32)seed, (u32)(seed >> 32));
}

// Word `index` of stream `stream` under `seed`.
__device__ __forceinline__ u32 philox_word(u64 seed, u64 stream, u64 index) {
    return philox_block(seed, stream, index >> 2).w[index & 3];
}

// Uniform f32 in [0, 1) from one word.
__device__ __forceinline__ float philox_uniform(u32 w) {
    return (float)(w >> 8) * (1.0f / 16777216.0f);
}
