// SHA-256 of fixed-size chunks, one thread per chunk: thread c hashes
// data[c * chunk_bytes, min((c + 1) * chunk_bytes, len)) and writes its 32-byte digest to
// out[32 c ..]. The host combines the chunk digests exactly as src/digest.rs does for large
// tensors, so the tensor digest is the CPU's.

typedef unsigned int u32;
typedef unsigned long long u64;

__constant__ u32 SHA256_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

__device__ __forceinline__ u32 rotr(u32 x, u32 n) { return (x >> n) | (x << (32 - n)); }

// One compression of the 64-byte block `b` into `h`.
__device__ void sha256_block(u32 h[8], const unsigned char* b) {
    u32 w[64];
    for (int i = 0; i < 16; ++i)
        w[i] = ((u32)b[4 * i] << 24) | ((u32)b[4 * i + 1] << 16) | ((u32)b[4 * i + 2] << 8) | (u32)b[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
        u32 s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        u32 s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    u32 a = h[0], bb = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
        u32 t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + SHA256_K[i] + w[i];
        u32 t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c));
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = bb;
        bb = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += bb;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

extern "C" __global__ void sha256_chunks(const unsigned char* data, u64 len, u64 chunk_bytes,
                                         unsigned char* out) {
    u64 chunks = (len + chunk_bytes - 1) / chunk_bytes;
    u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 c = (u64)blockIdx.x * blockDim.x + threadIdx.x; c < chunks; c += step) {
        const unsigned char* p = data + c * chunk_bytes;
        u64 n = len - c * chunk_bytes < chunk_bytes ? len - c * chunk_bytes : chunk_bytes;
        u32 h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
        u64 full = n / 64;
        for (u64 i = 0; i < full; ++i) sha256_block(h, p + 64 * i);
        // Tail: the remaining bytes, 0x80, zeros, and the bit length (big-endian) in 1 or 2 blocks.
        unsigned char tail[128];
        u32 rest = (u32)(n - 64 * full);
        for (u32 i = 0; i < 128; ++i) tail[i] = 0;
        for (u32 i = 0; i < rest; ++i) tail[i] = p[64 * full + i];
        tail[rest] = 0x80;
        u32 blocks = rest + 1 + 8 <= 64 ? 1 : 2;
        u64 bits = n * 8;
        for (int i = 0; i < 8; ++i) tail[64 * blocks - 1 - i] = (unsigned char)(bits >> (8 * i));
        for (u32 i = 0; i < blocks; ++i) sha256_block(h, tail + 64 * i);
        for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 4; ++j) out[32 * c + 4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
    }
}
