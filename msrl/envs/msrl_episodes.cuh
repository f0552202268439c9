// msrl_episodes.cuh - the per-step episode bookkeeping of a single-agent step kernel.
//
// msrl.envs.EpisodeTracker (msrl/envs/_episodes.py) owns the accounting: its
// arrays, the metrics windows, the checkpoints.  What it does to each env in a
// step, `record(reward, rows)`, is this function, so that a `<name>_step_tracked`
// kernel does the whole step in one launch (the tracker hands it its arrays
// through `EpisodeTracker.record_by`):
//
//   total    double (n,)  running sum of rewards; `total += (double)reward` is
//                         float64 += float32 as torch and NumPy promote it
//   start    double (n,)  `total` at the end of the env's last finished episode
//   elapsed  int64  (n,)  the running length, zeroed when an episode ends
//   finished int64  (n,)  episodes this env finished since the tracker last folded
//                         the counts in (metrics(), state_dict()): one counter per
//                         env, so no two threads ever add to one address
#ifndef MSRL_EPISODES_CUH
#define MSRL_EPISODES_CUH

#include "msrl_common.cuh"

// What one env's step gave the bookkeeping: the float32 reward written, and
// whether the episode ended (terminated or truncated).
struct msrl_step_result {
    float reward;
    bool done;
};

__device__ __forceinline__ void msrl_record_step(long long i, msrl_step_result step, double* total, double* start,
                                                 long long* elapsed, long long* finished) {
    const double t = total[i] + (double)step.reward;
    total[i] = t;
    if (step.done) {
        start[i] = t;
        elapsed[i] = 0;
        finished[i] += 1;
    } else {
        elapsed[i] += 1;
    }
}

#endif  // MSRL_EPISODES_CUH
