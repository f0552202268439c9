// sampling.cu - action sampling for policies, on the device.
//
// sample_categorical: Gumbel-max, one thread per row.  A thread reading its own
// row of `num_actions` logits straight from global memory makes a warp touch
// 32 rows far apart (uncoalesced), so the block first copies its tile of
// blockDim.x rows into shared memory with consecutive threads reading
// consecutive addresses, waits at __syncthreads(), and only then lets every
// thread work on its row from shared memory.  The loop over tiles is a
// grid-stride loop, so any grid size covers any n; the barrier conditions
// (`staged`, the loop bound) are the same for every thread of a block, as
// __syncthreads() requires.
//
// sample_gaussian: Box-Muller, one thread per row, no shared memory.
//
// Dtypes (C-contiguous device pointers):
//   logits      real    (n, num_actions)   in
//   actions_out int64   (n,)               out (categorical)
//   mean        real    (n, dim)           in
//   log_std     real    (dim,)             in, shared by all rows (a state-independent parameter)
//   actions_out real    (n, dim)           out (gaussian)
//   logp_out    real    (n,)               log-probability of the sampled action
#include "msrl_rng.cuh"

// Reals of shared memory for the staged logits tile (16 KiB float / 32 KiB
// double, within the 48 KiB of static shared memory a block may use).  Wider
// tiles (blockDim.x * num_actions larger than this) read global memory directly.
#define MSRL_CATEGORICAL_TILE 4096

extern "C" __global__ void sample_categorical(const real* logits, long long n, int num_actions,
                                              unsigned long long seed, unsigned long long counter,
                                              long long* actions_out, real* logp_out) {
    MSRL_SHARED(real, tile, MSRL_CATEGORICAL_TILE);
    const long long A = num_actions;
    const long long threads = blockDim.x;
    const bool staged = threads * A <= MSRL_CATEGORICAL_TILE;  // uniform over the block
    for (long long base = (long long)blockIdx.x * threads; base < n; base += (long long)gridDim.x * threads) {
        const long long rows = (n - base < threads) ? (n - base) : threads;
        const real* row;
        if (staged) {
            for (long long k = threadIdx.x; k < rows * A; k += threads) tile[k] = logits[base * A + k];
            __syncthreads();  // the whole tile is loaded before any thread reads its row
            row = tile + (long long)threadIdx.x * A;
        } else {
            row = logits + (base + (long long)threadIdx.x) * A;
        }
        const long long i = base + threadIdx.x;
        if (threadIdx.x < rows) {
            // argmax_j logits_j + Gumbel_j; the max logit for a stable log-sum-exp.
            long long best = 0;
            real best_key = -(real)INFINITY, max_logit = -(real)INFINITY;
            for (long long j = 0; j < A; j += 2) {
                real u[2];
                msrl_uniform2(seed, counter, (unsigned long long)i, MSRL_TAG_CATEGORICAL, (unsigned int)(j / 2),
                              &u[0], &u[1]);
                for (long long k = 0; k < 2 && j + k < A; ++k) {
                    const real l = row[j + k];
                    const real key = l - msrl_log(-msrl_log(u[k]));
                    if (key > best_key) {
                        best_key = key;
                        best = j + k;
                    }
                    max_logit = msrl_fmax(max_logit, l);
                }
            }
            real sum = (real)0.0;
            for (long long j = 0; j < A; ++j) sum += msrl_exp(row[j] - max_logit);
            actions_out[i] = best;
            logp_out[i] = row[best] - max_logit - msrl_log(sum);
        }
        if (staged) __syncthreads();  // everybody is done with the tile before the next one overwrites it
    }
}

extern "C" __global__ void sample_gaussian(const real* mean, const real* log_std, long long n, int dim,
                                           unsigned long long seed, unsigned long long counter, real* actions_out,
                                           real* logp_out) {
    const long long i = msrl_global_index();
    if (i >= n) return;  // no barrier in this kernel
    const real half_log_two_pi = (real)0.91893853320467274178;  // 0.5 * log(2 pi)
    real logp = (real)0.0;
    for (int j = 0; j < dim; j += 2) {
        real u1, u2;
        msrl_uniform2(seed, counter, (unsigned long long)i, MSRL_TAG_GAUSSIAN, (unsigned int)(j / 2), &u1, &u2);
        const real radius = msrl_sqrt((real)-2.0 * msrl_log(u1));
        const real angle = (real)(2 * MSRL_PI) * u2;
        const real z[2] = {radius * msrl_cos(angle), radius * msrl_sin(angle)};
        for (int k = 0; k < 2 && j + k < dim; ++k) {
            const long long at = i * dim + j + k;
            const real ls = log_std[j + k];
            actions_out[at] = mean[at] + msrl_exp(ls) * z[k];
            logp += (real)-0.5 * z[k] * z[k] - ls - half_log_two_pi;
        }
    }
    logp_out[i] = logp;
}
