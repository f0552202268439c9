// cartpole.cu - CartPole-v1 (gymnasium) as CUDA kernels, one thread per env.
//
// The physics is gymnasium's CartPoleEnv.step, term for term and in the same
// association order as _numpy.py beside it, so that the -DMSRL_REAL=double
// build (on the CPU emulation, without FMA contraction) reproduces the NumPy
// backend bit for bit.  Autoreset happens on the device, in the same step: an
// env whose episode ended gets a fresh state drawn from Philox and the
// observation written is the first one of its new episode.
//
// Dtypes (all arrays C-contiguous, plain device pointers e.g. tensor.data_ptr()):
//   state      real    (n, 4)  x, x_dot, theta, theta_dot          in/out
//   elapsed    int64   (n,)    steps the running episode has taken  in (step), in/out (rollout)
//   actions    int64   (n,)    0 = push left, nonzero = push right  in
//   obs        float32 (n, 4)  the state rounded to float32         out
//   reward     float32 (n,)                                         out
//   terminated float32 (n,)    0/1                                  out
//   truncated  float32 (n,)    0/1 (this step is the 500th)         out
//   returns_out real   (n, 2)  rollout: [sum of finished-episode returns, finished episodes] out
// Observations and rewards are float32 whatever `real` is, as in every msrl
// backend (they feed a float32 policy).
// seed, counter: the Philox key and launch counter (the host advances counter
// by 1 per launch, by `steps` per rollout).
// `elapsed` is the host's episode tracker (msrl.envs.EpisodeTracker.lengths):
// cartpole_step only reads it, and the host's shared bookkeeping counts the
// step and zeroes finished episodes, as it does for every backend;
// cartpole_step_tracked does that bookkeeping too, in the same launch
// (msrl_episodes.cuh: total, start, elapsed and finished are the tracker's).
#include "msrl_episodes.cuh"
#include "msrl_rng.cuh"

#define CARTPOLE_MAX_EPISODE_STEPS 500

// One Euler step of gymnasium's dynamics; returns `terminated`.
__device__ __forceinline__ bool cartpole_physics(real* s, long long action) {
    const real gravity = (real)9.8;
    const real masscart = (real)1.0;
    const real masspole = (real)0.1;
    const real total_mass = masspole + masscart;
    const real length = (real)0.5;  // half the pole's length
    const real polemass_length = masspole * length;
    const real force_mag = (real)10.0;
    const real tau = (real)0.02;
    const real theta_threshold = (real)(12 * 2 * MSRL_PI / 360);
    const real x_threshold = (real)2.4;

    const real x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    const real force = action != 0 ? force_mag : -force_mag;
    const real costheta = msrl_cos(theta);
    const real sintheta = msrl_sin(theta);
    const real temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
    const real thetaacc = (gravity * sintheta - costheta * temp) /
                          (length * ((real)(4.0 / 3.0) - masspole * (costheta * costheta) / total_mass));
    const real xacc = temp - polemass_length * thetaacc * costheta / total_mass;

    s[0] = x + tau * x_dot;
    s[1] = x_dot + tau * xacc;
    s[2] = theta + tau * theta_dot;
    s[3] = theta_dot + tau * thetaacc;
    return msrl_fabs(s[0]) > x_threshold || msrl_fabs(s[2]) > theta_threshold;
}

// gymnasium's reset: every state variable ~ U(-0.05, 0.05).
__device__ __forceinline__ void cartpole_draw_reset(unsigned long long seed, unsigned long long counter, long long i,
                                                    real* s) {
    const real low = (real)-0.05, width = (real)0.1;  // high - low = 0.05 - (-0.05), exact
    real u0, u1, u2, u3;
    msrl_uniform2(seed, counter, (unsigned long long)i, MSRL_TAG_CARTPOLE_RESET, 0u, &u0, &u1);
    msrl_uniform2(seed, counter, (unsigned long long)i, MSRL_TAG_CARTPOLE_RESET, 1u, &u2, &u3);
    s[0] = low + width * u0;
    s[1] = low + width * u1;
    s[2] = low + width * u2;
    s[3] = low + width * u3;
}

// The uniformly random action the rollout kernel takes (top bit of a Philox word).
__device__ __forceinline__ long long cartpole_random_action(unsigned long long seed, unsigned long long counter,
                                                            long long i) {
    return (long long)(msrl_random4(seed, counter, (unsigned long long)i, MSRL_TAG_CARTPOLE_ACTION << 24).v[0] >> 31);
}

extern "C" __global__ void cartpole_reset(real* state, long long n, unsigned long long seed,
                                          unsigned long long counter) {
    const long long i = msrl_global_index();
    if (i >= n) return;  // no barrier in this kernel, so an early exit is safe
    real s[4];
    cartpole_draw_reset(seed, counter, i, s);
    for (int k = 0; k < 4; ++k) state[4 * i + k] = s[k];
}

// One env's step: physics, time limit, same-step autoreset, outputs written.
__device__ __forceinline__ msrl_step_result cartpole_step_env(real* state, long long elapsed, long long action,
                                                              float* obs, float* reward, float* terminated,
                                                              float* truncated, long long i, unsigned long long seed,
                                                              unsigned long long counter) {
    real s[4];
    for (int k = 0; k < 4; ++k) s[k] = state[4 * i + k];
    const bool term = cartpole_physics(s, action);
    const bool trunc = elapsed + 1 >= CARTPOLE_MAX_EPISODE_STEPS;
    if (term || trunc) cartpole_draw_reset(seed, counter, i, s);  // same-step autoreset
    for (int k = 0; k < 4; ++k) {
        state[4 * i + k] = s[k];
        obs[4 * i + k] = (float)s[k];
    }
    reward[i] = 1.0f;  // +1 every step, the terminating one included
    terminated[i] = term ? 1.0f : 0.0f;
    truncated[i] = trunc ? 1.0f : 0.0f;
    return {1.0f, term || trunc};
}

extern "C" __global__ void cartpole_step(real* state, const long long* elapsed, const long long* actions, float* obs,
                                         float* reward, float* terminated, float* truncated, long long n,
                                         unsigned long long seed, unsigned long long counter) {
    const long long i = msrl_global_index();
    if (i >= n) return;
    cartpole_step_env(state, elapsed[i], actions[i], obs, reward, terminated, truncated, i, seed, counter);
}

// cartpole_step and the episode tracker's record of it (msrl_episodes.cuh), in one launch.
extern "C" __global__ void cartpole_step_tracked(real* state, long long* elapsed, const long long* actions, float* obs,
                                                 float* reward, float* terminated, float* truncated, double* total,
                                                 double* start, long long* finished, long long n,
                                                 unsigned long long seed, unsigned long long counter) {
    const long long i = msrl_global_index();
    if (i >= n) return;
    const msrl_step_result step =
        cartpole_step_env(state, elapsed[i], actions[i], obs, reward, terminated, truncated, i, seed, counter);
    msrl_record_step(i, step, total, start, elapsed, finished);
}

// obs (float32 (n, 4)) of the current state, without stepping.
extern "C" __global__ void cartpole_observe(const real* state, float* obs, long long n) {
    const long long i = msrl_global_index();
    if (i >= n) return;
    for (int k = 0; k < 4; ++k) obs[4 * i + k] = (float)state[4 * i + k];
}

// The actions cartpole_rollout takes at launch counter `counter` (int64, (n,)),
// so a rollout can be replayed step by step through cartpole_step.
extern "C" __global__ void cartpole_random_actions(long long* actions, long long n, unsigned long long seed,
                                                   unsigned long long counter) {
    const long long i = msrl_global_index();
    if (i >= n) return;
    actions[i] = cartpole_random_action(seed, counter, i);
}

// `steps` steps of every env with uniformly random actions, the state kept in
// registers: the "kernel alone" throughput benchmark.  Step t uses launch
// counter `counter + t` for both its action and its autoreset, i.e. exactly
// what cartpole_random_actions + cartpole_step at counter + t do.  CartPole
// pays +1 per step, so a finished episode's return is its length.
extern "C" __global__ void cartpole_rollout(real* state, long long* elapsed, long long n, int steps,
                                            unsigned long long seed, unsigned long long counter,
                                            real* returns_out) {
    const long long i = msrl_global_index();
    if (i >= n) return;
    real s[4];
    for (int k = 0; k < 4; ++k) s[k] = state[4 * i + k];
    long long e = elapsed[i];
    real finished_return = (real)0.0, finished = (real)0.0;
    for (int t = 0; t < steps; ++t) {
        const unsigned long long c = counter + (unsigned long long)t;
        const bool term = cartpole_physics(s, cartpole_random_action(seed, c, i));
        e += 1;
        if (term || e >= CARTPOLE_MAX_EPISODE_STEPS) {
            finished_return += (real)e;
            finished += (real)1.0;
            cartpole_draw_reset(seed, c, i, s);
            e = 0;
        }
    }
    for (int k = 0; k < 4; ++k) state[4 * i + k] = s[k];
    elapsed[i] = e;
    returns_out[2 * i] = finished_return;
    returns_out[2 * i + 1] = finished;
}
