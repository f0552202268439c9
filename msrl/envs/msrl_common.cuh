// msrl_common.cuh - what every msrl kernel source shares.
//
// * `real`: the floating type of states, observations and logits, chosen at
//   compile time with -DMSRL_REAL=float (default) or -DMSRL_REAL=double.  The
//   double build exists so that the CPU emulation can be compared *bit for bit*
//   with the float64 NumPy backends; the float build is what runs on the GPU.
// * msrl_* math wrappers picking the float or double libm/CUDA function, so the
//   kernels never rely on C++ overload resolution (which differs between nvcc
//   device code and a host C++ compiler).
// * MSRL_SHARED(type, name, size): declares a block's shared array.  On CUDA it
//   is `__shared__ type name[size]`; cpu_emulation.h defines it first, as a slice
//   of the emulated block's own shared arena.  Declare shared arrays once, at
//   the top level of a kernel (never in a loop or a branch).
// * Thread mapping convention.  Single-agent envs: one thread per env,
//   env = blockIdx.x * blockDim.x + threadIdx.x, bounds-checked against n.
//   A multi-agent env would use one block per env and one thread per agent
//   (env = blockIdx.x, agent = threadIdx.x), with __syncthreads() between
//   phases that read other agents' state from shared memory.
#ifndef MSRL_COMMON_CUH
#define MSRL_COMMON_CUH

#ifndef MSRL_REAL
#define MSRL_REAL float
#endif

#define MSRL_REAL_KIND_float 1
#define MSRL_REAL_KIND_double 2
#define MSRL_CAT_(a, b) a##b
#define MSRL_CAT(a, b) MSRL_CAT_(a, b)
#if MSRL_CAT(MSRL_REAL_KIND_, MSRL_REAL) == 2
#define MSRL_REAL_IS_DOUBLE 1
#elif MSRL_CAT(MSRL_REAL_KIND_, MSRL_REAL) == 1
#define MSRL_REAL_IS_DOUBLE 0
#else
#error "MSRL_REAL must be float or double"
#endif

typedef MSRL_REAL real;

#ifndef MSRL_SHARED
#define MSRL_SHARED(type, name, size) __shared__ type name[size]
#endif

// math.pi as a double literal (M_PI is not guaranteed in device code).
#define MSRL_PI 3.141592653589793

#if MSRL_REAL_IS_DOUBLE
__device__ __forceinline__ real msrl_sin(real x) { return sin(x); }
__device__ __forceinline__ real msrl_cos(real x) { return cos(x); }
__device__ __forceinline__ real msrl_exp(real x) { return exp(x); }
__device__ __forceinline__ real msrl_log(real x) { return log(x); }
__device__ __forceinline__ real msrl_sqrt(real x) { return sqrt(x); }
__device__ __forceinline__ real msrl_fabs(real x) { return fabs(x); }
__device__ __forceinline__ real msrl_fmod(real x, real y) { return fmod(x, y); }
__device__ __forceinline__ real msrl_fmin(real x, real y) { return fmin(x, y); }
__device__ __forceinline__ real msrl_fmax(real x, real y) { return fmax(x, y); }
#else
__device__ __forceinline__ real msrl_sin(real x) { return sinf(x); }
__device__ __forceinline__ real msrl_cos(real x) { return cosf(x); }
__device__ __forceinline__ real msrl_exp(real x) { return expf(x); }
__device__ __forceinline__ real msrl_log(real x) { return logf(x); }
__device__ __forceinline__ real msrl_sqrt(real x) { return sqrtf(x); }
__device__ __forceinline__ real msrl_fabs(real x) { return fabsf(x); }
__device__ __forceinline__ real msrl_fmod(real x, real y) { return fmodf(x, y); }
__device__ __forceinline__ real msrl_fmin(real x, real y) { return fminf(x, y); }
__device__ __forceinline__ real msrl_fmax(real x, real y) { return fmaxf(x, y); }
#endif

// The global index of this thread along x: the env index for one-thread-per-env kernels.
__device__ __forceinline__ long long msrl_global_index() {
    return (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
}

#endif  // MSRL_COMMON_CUH
