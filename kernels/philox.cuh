// Philox4x32-10 and the stream mapping of src/rng.rs, bit for bit.
//
// Word `w` of stream `stream` under `seed` is word `w % 4` of the Philox block with counter
// [lo(w/4), hi(w/4), lo(stream), hi(stream)] and key [lo(seed), hi(seed)].
// Uniform f32 in [0, 1): (w >> 8) * 2^-24 (exact in f32). Normal f32: Box-Muller in f64 with
// det_ln / det_cos_2pi, which use only IEEE basic operations (same bits as the CPU).
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

// det_ln of src/rng.rs: ln(x) for x > 0 with IEEE basic operations only (same bits as the CPU
// under --fmad=false).
__device__ __forceinline__ double det_ln(double x) {
    const double INV_ODD[11] = {1.0,
                                0.3333333333333333,
                                0.2,
                                0.14285714285714285,
                                0.11111111111111111,
                                0.09090909090909091,
                                0.07692307692307692,
                                0.06666666666666667,
                                0.058823529411764705,
                                0.05263157894736842,
                                0.047619047619047616};
    u64 bits = (u64)__double_as_longlong(x);
    long long e = (long long)((bits >> 52) & 0x7ff) - 1023;
    double m = __longlong_as_double((long long)((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull));
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double p = INV_ODD[10];
    for (int i = 9; i >= 0; --i) p = p * s2 + INV_ODD[i];
    return (double)e * 0.6931471805599453 + 2.0 * s * p;
}

// det_cos_2pi of src/rng.rs: cos(2 pi u) for u in [0, 1) with IEEE basic operations only.
__device__ __forceinline__ double det_cos_2pi(double u) {
    const double COS[9] = {1.0, -0.5, 0.041666666666666664, -0.001388888888888889,
                           2.4801587301587302e-5, -2.755731922398589e-7, 2.08767569878681e-9,
                           -1.1470745597729725e-11, 4.779477332387385e-14};
    const double SIN[9] = {1.0, -0.16666666666666666, 0.008333333333333333, -0.0001984126984126984,
                           2.755731922398589e-6, -2.505210838544172e-8, 1.6059043836821613e-10,
                           -7.647163731819816e-13, 2.8114572543455206e-15};
    double t = u * 4.0;
    double k = floor(t + 0.5);
    double r = (t - k) * 1.5707963267948966;
    double r2 = r * r;
    double c = 0.0, sn = 0.0;
    for (int i = 8; i >= 0; --i) {
        c = c * r2 + COS[i];
        sn = sn * r2 + SIN[i];
    }
    switch (((long long)k) & 3) {
        case 0: return c;
        case 1: return -(r * sn);
        case 2: return -c;
        default: return r * sn;
    }
}

// Standard normal f32 from two words (Box-Muller, cosine branch), as rng::normal_from_words.
__device__ __forceinline__ float philox_normal(u32 w0, u32 w1) {
    double u1 = ((double)(w0 >> 8) + 1.0) * (1.0 / 16777216.0);
    double u2 = (double)(w1 >> 8) * (1.0 / 16777216.0);
    return (float)(sqrt(-2.0 * det_ln(u1)) * det_cos_2pi(u2));
}
