// reduce.cu - block-level reductions, e.g. of finished-episode returns, on the device.
//
// block_sum is the textbook shared-memory tree reduction: each thread stores
// one value, then log2(blockDim.x) rounds halve the number of active threads,
// each round separated by __syncthreads() so no thread reads a partial sum
// before its owner has written it.  It is also the kernel the emulation tests
// use to prove the barrier works: without it the sums come out wrong.
//
// Dtypes (C-contiguous device pointers):
//   values     real    (n,)              in
//   mask       float32 (n,) or NULL      in: only entries with mask != 0 count (NULL: all)
//   block_sums real    (gridDim.x, 2)    out: [sum of masked values, number of masked entries]
// blockDim.x must be a power of two, at most 1024.
#include "msrl_common.cuh"

#define MSRL_REDUCE_MAX_THREADS 1024

extern "C" __global__ void block_sum(const real* values, const float* mask, long long n, real* block_sums) {
    MSRL_SHARED(real, partial_sum, MSRL_REDUCE_MAX_THREADS);
    MSRL_SHARED(real, partial_count, MSRL_REDUCE_MAX_THREADS);
    const unsigned int tid = threadIdx.x;
    const long long i = msrl_global_index();
    real v = (real)0.0, c = (real)0.0;
    if (i < n && (mask == 0 || mask[i] != 0.0f)) {  // no early return: every thread must reach the barriers
        v = values[i];
        c = (real)1.0;
    }
    partial_sum[tid] = v;
    partial_count[tid] = c;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) {
            partial_sum[tid] += partial_sum[tid + stride];
            partial_count[tid] += partial_count[tid + stride];
        }
        __syncthreads();
    }
    if (tid == 0) {
        block_sums[2 * blockIdx.x] = partial_sum[0];
        block_sums[2 * blockIdx.x + 1] = partial_count[0];
    }
}
