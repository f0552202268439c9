// pendulum.cu - Pendulum-v1 (gymnasium) as CUDA kernels, one thread per env.
//
// Follows _numpy.py beside it term for term, including its dtype promotion
// for float32 torques: `3.0 * u` and `0.001 * (u * u)` are float32 products
// (NumPy's rule for a Python float times a float32 array) while the state
// stays in `real`.  So the -DMSRL_REAL=double build matches the float64 NumPy
// backend bit for bit when both get the same float32 actions.
//
// Dtypes (C-contiguous device pointers):
//   state      real    (n, 2)  th, thdot                      in/out
//   elapsed    int64   (n,)    steps the running episode has taken (the host's
//                              episode tracker; read only)     in
//   actions    float32 (n,) or (n, 1)  torque, clipped to [-2, 2]  in
//   obs        float32 (n, 3)  cos th, sin th, thdot          out
//   reward     float32 (n,)    -(angle_normalize(th)^2 + .1 thdot^2 + .001 u^2)  out
// Observations and rewards are float32 whatever `real` is, as in every msrl
// backend (they feed a float32 policy); they are computed in `real` and
// rounded once, like NumPy's astype(np.float32).
//   terminated float32 (n,)    always 0                       out
//   truncated  float32 (n,)    1 when this step is the 200th  out
// Gravity is a compile-time constant: -DMSRL_PENDULUM_G=10.0 (gymnasium's default).
// pendulum_step_tracked also does the episode tracker's bookkeeping in the same
// launch (msrl_episodes.cuh: total, start, elapsed and finished are the tracker's).
#include "msrl_episodes.cuh"
#include "msrl_rng.cuh"

#ifndef MSRL_PENDULUM_G
#define MSRL_PENDULUM_G 10.0
#endif
#define PENDULUM_MAX_EPISODE_STEPS 200

// gymnasium's angle_normalize: ((x + pi) % (2 pi)) - pi with Python's (floored)
// modulo, written as NumPy computes it (fmod, then shift a negative remainder).
__device__ __forceinline__ real pendulum_angle_normalize(real x) {
    const real pi = (real)MSRL_PI, two_pi = (real)(2 * MSRL_PI);
    real m = msrl_fmod(x + pi, two_pi);
    if (m != (real)0.0) {
        if (m < (real)0.0) m += two_pi;
    } else {
        m = (real)0.0;  // +0, the sign of the divisor
    }
    return m - pi;
}

// One step; s = [th, thdot] is updated in place, the reward returned.
__device__ __forceinline__ real pendulum_physics(real* s, float action) {
    const real k_gravity = (real)(3 * MSRL_PENDULUM_G / (2 * 1.0));  // 3 g / (2 l)
    const float k_torque = 3.0f;                                     // 3 / (m l^2)
    const real dt = (real)0.05;
    const real max_speed = (real)8.0;

    const float u = fminf(fmaxf(action, -2.0f), 2.0f);
    const real th = s[0], thdot = s[1];
    const real an = pendulum_angle_normalize(th);
    const real costs = an * an + (real)0.1 * (thdot * thdot) + (real)(0.001f * (u * u));
    real newthdot = thdot + (k_gravity * msrl_sin(th) + (real)(k_torque * u)) * dt;
    newthdot = msrl_fmin(msrl_fmax(newthdot, -max_speed), max_speed);
    s[0] = th + newthdot * dt;
    s[1] = newthdot;
    return -costs;
}

// gymnasium's reset: th ~ U(-pi, pi), thdot ~ U(-1, 1).
__device__ __forceinline__ void pendulum_draw_reset(unsigned long long seed, unsigned long long counter, long long i,
                                                    real* s) {
    real u0, u1;
    msrl_uniform2(seed, counter, (unsigned long long)i, MSRL_TAG_PENDULUM_RESET, 0u, &u0, &u1);
    s[0] = -(real)MSRL_PI + ((real)MSRL_PI - -(real)MSRL_PI) * u0;
    s[1] = (real)-1.0 + (real)2.0 * u1;
}

__device__ __forceinline__ void pendulum_write_obs(float* obs, long long i, const real* s) {
    obs[3 * i] = (float)msrl_cos(s[0]);  // computed in real, rounded once, like NumPy's astype(float32)
    obs[3 * i + 1] = (float)msrl_sin(s[0]);
    obs[3 * i + 2] = (float)s[1];
}

extern "C" __global__ void pendulum_reset(real* state, long long n, unsigned long long seed,
                                          unsigned long long counter) {
    const long long i = msrl_global_index();
    if (i >= n) return;  // no barrier in this kernel, so an early exit is safe
    real s[2];
    pendulum_draw_reset(seed, counter, i, s);
    state[2 * i] = s[0];
    state[2 * i + 1] = s[1];
}

// obs (float32 (n, 3)) of the current state, without stepping.
extern "C" __global__ void pendulum_observe(const real* state, float* obs, long long n) {
    const long long i = msrl_global_index();
    if (i >= n) return;
    const real s[2] = {state[2 * i], state[2 * i + 1]};
    pendulum_write_obs(obs, i, s);
}

// One env's step: physics, time limit, autoreset, outputs written.
__device__ __forceinline__ msrl_step_result pendulum_step_env(real* state, long long elapsed, float action, float* obs,
                                                              float* reward, float* terminated, float* truncated,
                                                              long long i, unsigned long long seed,
                                                              unsigned long long counter) {
    real s[2] = {state[2 * i], state[2 * i + 1]};
    const float r = (float)pendulum_physics(s, action);
    const bool trunc = elapsed + 1 >= PENDULUM_MAX_EPISODE_STEPS;  // Pendulum never terminates
    if (trunc) pendulum_draw_reset(seed, counter, i, s);
    state[2 * i] = s[0];
    state[2 * i + 1] = s[1];
    pendulum_write_obs(obs, i, s);
    reward[i] = r;
    terminated[i] = 0.0f;
    truncated[i] = trunc ? 1.0f : 0.0f;
    return {r, trunc};
}

extern "C" __global__ void pendulum_step(real* state, const long long* elapsed, const float* actions, float* obs,
                                         float* reward, float* terminated, float* truncated, long long n,
                                         unsigned long long seed, unsigned long long counter) {
    const long long i = msrl_global_index();
    if (i >= n) return;
    pendulum_step_env(state, elapsed[i], actions[i], obs, reward, terminated, truncated, i, seed, counter);
}

// pendulum_step and the episode tracker's record of it (msrl_episodes.cuh), in one launch.
extern "C" __global__ void pendulum_step_tracked(real* state, long long* elapsed, const float* actions, float* obs,
                                                 float* reward, float* terminated, float* truncated, double* total,
                                                 double* start, long long* finished, long long n,
                                                 unsigned long long seed, unsigned long long counter) {
    const long long i = msrl_global_index();
    if (i >= n) return;
    const msrl_step_result step =
        pendulum_step_env(state, elapsed[i], actions[i], obs, reward, terminated, truncated, i, seed, counter);
    msrl_record_step(i, step, total, start, elapsed, finished);
}
