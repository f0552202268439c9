// tag.cu - Tag (taggers chase runners; _numpy.py beside it) as CUDA kernels:
// one block per environment, its threads striding over the agents.
//
// The rules are the module docstring of _numpy.py beside it; the arithmetic follows its
// NumPy physics term for term and in the same association order, so that the
// -DMSRL_REAL=double build (on the CPU emulation, without FMA contraction)
// reproduces the NumPy backend bit for bit.  Autoreset happens on the device,
// in the same step, as in cartpole.cu.
//
// Layout.  Block b is environment b (grid = n blocks); thread k handles agents
// k, k + blockDim.x, k + 2 blockDim.x, ... so any number of agents runs on any
// block size (the host launches min(threads_per_block, N) threads).  The state
// stays in global memory, updated in place; a step is four phases separated by
// __syncthreads(), in each of which a thread writes only its own agents'
// entries and reads nothing another thread writes in the same phase:
//   1. move: every active agent turns, accelerates, moves and is clipped to the
//      world; its edge hit is parked in its reward slot (0/1), read back (after
//      a barrier, so by whichever thread) in phase 2 or 3;
//   2. taggers: each tagger scans the runners (positions after the move, the
//      active flags of the start of the step) and counts its tags -> its reward;
//   3. runners: each runner scans the taggers -> tagged or not, its reward, its
//      new active flag (it reads only taggers' flags and its own, so writing its
//      own is safe); the runners still in the game are counted per thread and
//      summed by a block tree reduction in shared memory (no atomics);
//   4. time limit, termination, same-step autoreset (Philox), observations.
// Shared memory: one int per thread (the reduction), nothing per agent, so the
// number of agents is not bounded by shared memory.  The one limit is the
// random stream: agent i's reset draws use Philox stream blocks 2i and 2i+1 of
// its environment's index (24-bit blocks), so N <= 2^23
// (msrl.envs._kernels.MAX_KERNEL_AGENTS, checked on the host).
//
// Dtypes (all arrays C-contiguous, plain device pointers; T taggers, R runners,
// N = T + R, D = 7 + 5 M the observation size):
//   state          real    (n, 5N+1)  x[N], y[N], speed[N], heading[N], active[N], t   in/out
//   elapsed        int64   (n,)       steps the running episode has taken (read only)   in
//   tagger_actions int64   (n, T)     acceleration level * TAG_NUM_TURN_LEVELS + turn level  in
//   runner_actions int64   (n, R)                                                      in
//   tagger_obs     float32 (n, T, D)                                                   out
//   runner_obs     float32 (n, R, D)                                                   out
//   tagger_reward  float32 (n, T)                                                      out
//   runner_reward  float32 (n, R)                                                      out
//   terminated     float32 (n,)       0/1: no runner is left in the game               out
//   truncated      float32 (n,)       0/1: elapsed + 1 reached TAG_MAX_EPISODE_STEPS    out
// Observations and rewards are computed in `real` and rounded to float32 once.
// Every constant comes from the host (Tag.kernel_defines()): one build per
// configuration.
#include "msrl_rng.cuh"

#ifndef MSRL_TAG_TAG_RESET
#define MSRL_TAG_TAG_RESET 6u  // Philox stream tag of Tag's reset draws (see msrl_rng.cuh's list)
#endif

#if !defined(TAG_NUM_TAGGERS) || !defined(TAG_NUM_RUNNERS) || !defined(TAG_WORLD_SIZE) ||                     \
    !defined(TAG_MAX_EPISODE_STEPS) || !defined(TAG_NUM_ACCELERATION_LEVELS) || !defined(TAG_MIN_ACCELERATION) || \
    !defined(TAG_MAX_ACCELERATION) || !defined(TAG_NUM_TURN_LEVELS) || !defined(TAG_MIN_TURN) ||                 \
    !defined(TAG_MAX_TURN) || !defined(TAG_TAGGER_MAX_SPEED) || !defined(TAG_RUNNER_MAX_SPEED) ||                \
    !defined(TAG_TAGGING_DISTANCE) || !defined(TAG_TAG_REWARD_FOR_TAGGER) ||                                     \
    !defined(TAG_TAG_PENALTY_FOR_RUNNER) || !defined(TAG_STEP_PENALTY_FOR_TAGGER) ||                             \
    !defined(TAG_STEP_REWARD_FOR_RUNNER) || !defined(TAG_EDGE_HIT_PENALTY) ||                                    \
    !defined(TAG_END_OF_GAME_REWARD_FOR_RUNNER) || !defined(TAG_RUNNER_EXITS) || !defined(TAG_NUM_OBSERVED)
#error "tag.cu is built with every TAG_* constant defined (msrl.envs.tag.Tag.kernel_defines())"
#endif

#define TAG_T (TAG_NUM_TAGGERS)
#define TAG_R (TAG_NUM_RUNNERS)
#define TAG_N (TAG_NUM_TAGGERS + TAG_NUM_RUNNERS)
#define TAG_M (TAG_NUM_OBSERVED)  // the others each agent observes (N - 1: all of them)
#define TAG_OBS_DIM (7 + 5 * TAG_M)
#define TAG_STATE_DIM (5 * TAG_N + 1)
#define TAG_MAX_THREADS 1024  // CUDA's most threads per block: the size of the reduction array

#if TAG_NUM_TAGGERS < 1 || TAG_NUM_RUNNERS < 1 || TAG_M < 0 || TAG_M > TAG_N - 1
#error "Tag needs at least one tagger and one runner, and 0 <= TAG_NUM_OBSERVED <= N - 1"
#endif

// Row offsets of the state's fields.
#define TAG_X 0
#define TAG_Y (TAG_N)
#define TAG_SPEED (2 * TAG_N)
#define TAG_HEADING (3 * TAG_N)
#define TAG_ACTIVE (4 * TAG_N)
#define TAG_TIME (5 * TAG_N)

// Level k of n evenly spaced values in [low, high] (low when n == 1).
__device__ __forceinline__ real tag_level(long long k, int n, real low, real high) {
    if (n == 1) return low;
    return low + (real)k * (high - low) / (real)(n - 1);
}

#if MSRL_REAL_IS_DOUBLE
__device__ __forceinline__ real tag_floor(real x) { return floor(x); }
#else
__device__ __forceinline__ real tag_floor(real x) { return floorf(x); }
#endif

__device__ __forceinline__ real tag_max_speed(int i) {
    return i < TAG_T ? (real)TAG_TAGGER_MAX_SPEED : (real)TAG_RUNNER_MAX_SPEED;
}

// An agent is in the game while its flag is > 0 (what NumPy reads too).
__device__ __forceinline__ bool tag_is_active(const real* s, int i) { return s[TAG_ACTIVE + i] > (real)0.0; }

// Squared distance between agents i and j of row s (j's position minus i's).
__device__ __forceinline__ real tag_distance2(const real* s, int i, int j) {
    const real dx = s[TAG_X + j] - s[TAG_X + i];
    const real dy = s[TAG_Y + j] - s[TAG_Y + i];
    return dx * dx + dy * dy;
}

// Whether tagger i and runner j, both active at the start of the step, are within
// tagging distance (squared distances against the squared distance, as NumPy does).
__device__ __forceinline__ bool tag_within(const real* s, int i, int j) {
    const real reach2 = (real)TAG_TAGGING_DISTANCE * (real)TAG_TAGGING_DISTANCE;
    return tag_is_active(s, i) && tag_is_active(s, j) && tag_distance2(s, i, j) <= reach2;
}

// Agent i's reset: x, y ~ U[0, W), heading ~ U[0, 2 pi), speed 0, active.
__device__ __forceinline__ void tag_draw_agent(unsigned long long seed, unsigned long long counter, long long env,
                                               int i, real* s) {
    real u0, u1, u2, u3;
    msrl_uniform2(seed, counter, (unsigned long long)env, MSRL_TAG_TAG_RESET, 2u * (unsigned int)i, &u0, &u1);
    msrl_uniform2(seed, counter, (unsigned long long)env, MSRL_TAG_TAG_RESET, 2u * (unsigned int)i + 1u, &u2, &u3);
    (void)u3;
    s[TAG_X + i] = (real)TAG_WORLD_SIZE * u0;
    s[TAG_Y + i] = (real)TAG_WORLD_SIZE * u1;
    s[TAG_SPEED + i] = (real)0.0;
    s[TAG_HEADING + i] = (real)(2 * MSRL_PI) * u2;
    s[TAG_ACTIVE + i] = (real)1.0;
}

// Phase 1 for agent i: move if active; returns whether it hit an edge.  An
// out-of-range action (only unvalidated torch memory lets one through) is clamped
// into range, as the torch backend does.
__device__ __forceinline__ bool tag_move(real* s, int i, long long action) {
    const real two_pi = (real)(2 * MSRL_PI), world = (real)TAG_WORLD_SIZE;
    const long long last_action = (long long)TAG_NUM_ACCELERATION_LEVELS * TAG_NUM_TURN_LEVELS - 1;
    action = action < 0 ? 0 : (action > last_action ? last_action : action);
    const real acceleration = tag_level(action / TAG_NUM_TURN_LEVELS, TAG_NUM_ACCELERATION_LEVELS,
                                        (real)TAG_MIN_ACCELERATION, (real)TAG_MAX_ACCELERATION);
    const real turn = tag_level(action % TAG_NUM_TURN_LEVELS, TAG_NUM_TURN_LEVELS, (real)TAG_MIN_TURN,
                                (real)TAG_MAX_TURN);
    real heading = s[TAG_HEADING + i] + turn;
    heading = heading - two_pi * tag_floor(heading / two_pi);
    const real speed = msrl_fmin(msrl_fmax(s[TAG_SPEED + i] + acceleration, (real)0.0), tag_max_speed(i));
    const real x = s[TAG_X + i] + speed * msrl_cos(heading);
    const real y = s[TAG_Y + i] + speed * msrl_sin(heading);
    const real cx = msrl_fmin(msrl_fmax(x, (real)0.0), world);
    const real cy = msrl_fmin(msrl_fmax(y, (real)0.0), world);
    s[TAG_X + i] = cx;
    s[TAG_Y + i] = cy;
    s[TAG_SPEED + i] = speed;
    s[TAG_HEADING + i] = heading;
    return cx != x || cy != y;
}

// Agent j as agent i sees it: 5 floats at o.
__device__ __forceinline__ void tag_write_other(const real* s, int i, int j, float* o) {
    const real world = (real)TAG_WORLD_SIZE;
    o[0] = (float)((s[TAG_X + j] - s[TAG_X + i]) / world);
    o[1] = (float)((s[TAG_Y + j] - s[TAG_Y + i]) / world);
    o[2] = (float)(s[TAG_SPEED + j] / tag_max_speed(j));
    o[3] = j < TAG_T ? 1.0f : 0.0f;
    o[4] = (float)s[TAG_ACTIVE + j];
}

// The observation of agent i (D floats at out) in row s at time t.
__device__ void tag_write_obs(const real* s, real t, int i, float* out) {
    const real world = (real)TAG_WORLD_SIZE;
    const real heading = s[TAG_HEADING + i];
    out[0] = (float)(s[TAG_X + i] / world);
    out[1] = (float)(s[TAG_Y + i] / world);
    out[2] = (float)(s[TAG_SPEED + i] / tag_max_speed(i));
    out[3] = (float)msrl_cos(heading);
    out[4] = (float)msrl_sin(heading);
    out[5] = (float)s[TAG_ACTIVE + i];
    out[6] = (float)(t / (real)TAG_MAX_EPISODE_STEPS);
    float* o = out + 7;
#if TAG_M == TAG_N - 1
    // Every other agent, in index order.
    for (int j = 0; j < TAG_N; ++j) {
        if (j == i) continue;
        tag_write_other(s, i, j, o);
        o += 5;
    }
#else
    // The M nearest by the key (squared distance, index), an inactive agent's
    // distance being +inf, in ascending key order: one pass over the others,
    // each distance computed once and inserted into the M smallest kept so far
    // (M keys of the thread's own, in registers or local memory).  Keys are
    // distinct (indices are) and j rises, so a new key goes after every kept
    // key of equal distance.  O(N) per agent when few insertions happen.
    real near_d[TAG_M];
    int near_j[TAG_M];
    int kept = 0;
    for (int j = 0; j < TAG_N; ++j) {
        if (j == i) continue;
        const real d = tag_is_active(s, j) ? tag_distance2(s, i, j) : (real)INFINITY;
        if (kept == TAG_M && !(d < near_d[TAG_M - 1])) continue;
        int k = kept < TAG_M ? kept++ : TAG_M - 1;
        for (; k > 0 && d < near_d[k - 1]; --k) {
            near_d[k] = near_d[k - 1];
            near_j[k] = near_j[k - 1];
        }
        near_d[k] = d;
        near_j[k] = j;
    }
    for (int m = 0; m < TAG_M; ++m) {
        tag_write_other(s, i, near_j[m], o);
        o += 5;
    }
#endif
}

// Where agent i's observation goes.
__device__ __forceinline__ float* tag_obs_slot(float* tagger_obs, float* runner_obs, long long env, int i) {
    return i < TAG_T ? tagger_obs + (env * TAG_T + i) * (long long)TAG_OBS_DIM
                     : runner_obs + (env * TAG_R + (i - TAG_T)) * (long long)TAG_OBS_DIM;
}

extern "C" __global__ void tag_reset(real* state, long long n, unsigned long long seed, unsigned long long counter) {
    const long long env = blockIdx.x;
    if (env >= n) return;  // the whole block, and no barrier in this kernel
    real* s = state + env * TAG_STATE_DIM;
    for (int i = threadIdx.x; i < TAG_N; i += blockDim.x) tag_draw_agent(seed, counter, env, i, s);
    if (threadIdx.x == 0) s[TAG_TIME] = (real)0.0;
}

// Observations of the current state, without stepping.
extern "C" __global__ void tag_observe(const real* state, float* tagger_obs, float* runner_obs, long long n) {
    const long long env = blockIdx.x;
    if (env >= n) return;
    const real* s = state + env * TAG_STATE_DIM;
    const real t = s[TAG_TIME];
    for (int i = threadIdx.x; i < TAG_N; i += blockDim.x)
        tag_write_obs(s, t, i, tag_obs_slot(tagger_obs, runner_obs, env, i));
}

extern "C" __global__ void tag_step(real* state, const long long* elapsed, const long long* tagger_actions,
                                    const long long* runner_actions, float* tagger_obs, float* runner_obs,
                                    float* tagger_reward, float* runner_reward, float* terminated, float* truncated,
                                    long long n, unsigned long long seed, unsigned long long counter) {
    MSRL_SHARED(int, active_count, TAG_MAX_THREADS);
    const long long env = blockIdx.x;
    if (env >= n) return;  // the whole block returns together: the barriers below see every thread or none
    const int tid = threadIdx.x, threads = blockDim.x;
    real* s = state + env * TAG_STATE_DIM;
    // Read before the first barrier; only thread 0 writes it, after the last one.
    const real t_new = s[TAG_TIME] + (real)1.0;
    const bool game_over = t_new == (real)TAG_MAX_EPISODE_STEPS;

    // 1. Move; the edge hit waits in the agent's reward slot.
    for (int i = tid; i < TAG_N; i += threads) {
        bool hit = false;
        if (tag_is_active(s, i)) {
            const long long action =
                i < TAG_T ? tagger_actions[env * TAG_T + i] : runner_actions[env * TAG_R + (i - TAG_T)];
            hit = tag_move(s, i, action);
        }
        if (i < TAG_T)
            tagger_reward[env * TAG_T + i] = hit ? 1.0f : 0.0f;
        else
            runner_reward[env * TAG_R + (i - TAG_T)] = hit ? 1.0f : 0.0f;
    }
    __syncthreads();

    // 2. Taggers count the runners they tag (runners' `active` is still the step's start).
    for (int i = tid; i < TAG_T; i += threads) {
        float* slot = tagger_reward + env * TAG_T + i;
        real reward = (real)0.0;
        if (tag_is_active(s, i)) {
            long long tags = 0;
            for (int j = TAG_T; j < TAG_N; ++j) tags += tag_within(s, i, j);
            // NumPy's order: edge, step, tags (as the float64 product count * reward).
            reward = *slot != 0.0f ? (real)TAG_EDGE_HIT_PENALTY : (real)0.0;
            reward += (real)TAG_STEP_PENALTY_FOR_TAGGER;
            reward += (real)tags * (real)TAG_TAG_REWARD_FOR_TAGGER;
        }
        *slot = (float)reward;
    }
    __syncthreads();

    // 3. Runners: tagged or not, leave the game, count those still in it.
    int still_active = 0;
    for (int i = TAG_T + tid; i < TAG_N; i += threads) {
        float* slot = runner_reward + env * TAG_R + (i - TAG_T);
        real reward = (real)0.0;
        if (tag_is_active(s, i)) {
            bool tagged = false;
            for (int j = 0; j < TAG_T && !tagged; ++j) tagged = tag_within(s, j, i);
            // NumPy's order: edge, step, tag penalty, end of game.
            reward = *slot != 0.0f ? (real)TAG_EDGE_HIT_PENALTY : (real)0.0;
            reward += (real)TAG_STEP_REWARD_FOR_RUNNER;
            if (tagged) reward += (real)TAG_TAG_PENALTY_FOR_RUNNER;
            const bool exits = TAG_RUNNER_EXITS && tagged;
            if (exits) s[TAG_ACTIVE + i] = (real)0.0;
            if (!exits) {
                ++still_active;
                if (game_over) reward += (real)TAG_END_OF_GAME_REWARD_FOR_RUNNER;
            }
        }
        *slot = (float)reward;
    }
    // Block reduction of the per-thread counts (any blockDim: pairs beyond the end are skipped).
    active_count[tid] = still_active;
    __syncthreads();
    int width = 1;
    while (width < threads) width *= 2;
    for (int stride = width / 2; stride > 0; stride /= 2) {
        if (tid < stride && tid + stride < threads) active_count[tid] += active_count[tid + stride];
        __syncthreads();
    }
    const bool term = active_count[0] == 0;
    const bool trunc = elapsed[env] + 1 >= TAG_MAX_EPISODE_STEPS;

    // 4. Same-step autoreset, then the observations of the final state.
    const bool done = term || trunc;  // the same in every thread of the block
    if (done)
        for (int i = tid; i < TAG_N; i += threads) tag_draw_agent(seed, counter, env, i, s);
    const real t = done ? (real)0.0 : t_new;
    __syncthreads();
    for (int i = tid; i < TAG_N; i += threads) tag_write_obs(s, t, i, tag_obs_slot(tagger_obs, runner_obs, env, i));
    if (tid == 0) {
        s[TAG_TIME] = t;
        terminated[env] = term ? 1.0f : 0.0f;
        truncated[env] = trunc ? 1.0f : 0.0f;
    }
}
