// msrl_rng.cuh - counter-based random numbers: Philox4x32-10 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11), no curand.
//
// Why counter-based: a draw is a pure function of (seed, counter, index,
// stream), so the GPU, the CPU emulation and any thread schedule produce the
// same numbers, and an environment's whole random state is two integers
// (seed, counter) that a checkpoint stores exactly.
//
//   key     = (seed.lo, seed.hi)
//   counter = (index, stream, launch_counter.lo, launch_counter.hi)
//
// `index` is the env (or row) index, `launch_counter` is advanced by the host
// once per launch, and `stream` = (tag << 24) | block number separates the
// different uses (reset state, actions, Gumbel noise...) inside one launch.
//
// Uniforms come two per Philox block, word pairs (w0, w1) and (w2, w3): the
// double build uses 52 bits (32 from the first word, 20 from the second), the
// float build 23 bits of the first word, so float and double runs draw the
// same numbers up to float rounding.  Both lie strictly inside (0, 1), so
// log(u) and log(-log(u)) are always finite.
#ifndef MSRL_RNG_CUH
#define MSRL_RNG_CUH

#include "msrl_common.cuh"

#define MSRL_TAG_CARTPOLE_RESET 1u
#define MSRL_TAG_CARTPOLE_ACTION 2u
#define MSRL_TAG_PENDULUM_RESET 3u
#define MSRL_TAG_CATEGORICAL 4u
#define MSRL_TAG_GAUSSIAN 5u

struct msrl_u32x4 {
    unsigned int v[4];
};

__device__ __forceinline__ msrl_u32x4 msrl_philox4x32_10(msrl_u32x4 ctr, unsigned int k0, unsigned int k1) {
    const unsigned int M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
    const unsigned int W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int round = 0; round < 10; ++round) {
        const unsigned int hi0 = __umulhi(M0, ctr.v[0]);
        const unsigned int lo0 = M0 * ctr.v[0];
        const unsigned int hi1 = __umulhi(M1, ctr.v[2]);
        const unsigned int lo1 = M1 * ctr.v[2];
        msrl_u32x4 next;
        next.v[0] = hi1 ^ ctr.v[1] ^ k0;
        next.v[1] = lo1;
        next.v[2] = hi0 ^ ctr.v[3] ^ k1;
        next.v[3] = lo0;
        ctr = next;
        k0 += W0;
        k1 += W1;
    }
    return ctr;
}

// Four random words for (seed, launch counter, index, stream).
__device__ __forceinline__ msrl_u32x4 msrl_random4(unsigned long long seed, unsigned long long counter,
                                                    unsigned long long index, unsigned int stream) {
    msrl_u32x4 ctr;
    ctr.v[0] = (unsigned int)index;
    ctr.v[1] = stream;
    ctr.v[2] = (unsigned int)counter;
    ctr.v[3] = (unsigned int)(counter >> 32);
    return msrl_philox4x32_10(ctr, (unsigned int)seed, (unsigned int)(seed >> 32));
}

// A uniform in (0, 1) from a word pair (see the header comment).
__device__ __forceinline__ real msrl_uniform_from(unsigned int a, unsigned int b) {
#if MSRL_REAL_IS_DOUBLE
    const unsigned long long k = ((unsigned long long)a << 20) | (unsigned long long)(b >> 12);  // 52 bits
    return ((double)k + 0.5) * 2.220446049250313080847e-16;                                     // 2^-52
#else
    (void)b;
    return ((float)(a >> 9) + 0.5f) * 1.1920928955078125e-07f;  // 23 bits, 2^-23
#endif
}

// The uniforms number 2*block and 2*block+1 of stream `tag` for this (seed, counter, index).
__device__ __forceinline__ void msrl_uniform2(unsigned long long seed, unsigned long long counter,
                                              unsigned long long index, unsigned int tag, unsigned int block,
                                              real* u0, real* u1) {
    const msrl_u32x4 r = msrl_random4(seed, counter, index, (tag << 24) | (block & 0xFFFFFFu));
    *u0 = msrl_uniform_from(r.v[0], r.v[1]);
    *u1 = msrl_uniform_from(r.v[2], r.v[3]);
}

// Kernel exposing the raw generator, for known-answer tests and host-side checks.
// out: unsigned int (uint32) array of shape (n, 4); row i = Philox(ctr=(i + ctr0, ctr1, ctr2, ctr3), key).
extern "C" __global__ void msrl_philox_raw(unsigned int* out, long long n, unsigned int ctr0, unsigned int ctr1,
                                           unsigned int ctr2, unsigned int ctr3, unsigned int key0,
                                           unsigned int key1) {
    const long long i = msrl_global_index();
    if (i >= n) return;
    msrl_u32x4 c;
    c.v[0] = ctr0 + (unsigned int)i;
    c.v[1] = ctr1;
    c.v[2] = ctr2;
    c.v[3] = ctr3;
    const msrl_u32x4 r = msrl_philox4x32_10(c, key0, key1);
    for (int k = 0; k < 4; ++k) out[4 * i + k] = r.v[k];
}

#endif  // MSRL_RNG_CUH
