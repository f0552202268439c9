// cpu_native.h - compile msrl's .cu kernels as plain C++ (g++ -O3 -fopenmp) and
// run them natively on the CPU, for speed.  Force-included (-include) before the
// .cu source; fragments/_native.py generates the launch wrappers.
//
// Unlike cpu_emulation.h (built for checking), nothing here creates an OS
// thread per CUDA thread:
//
// * A launch splits the blocks (environments) into contiguous ranges, one per
//   OpenMP thread; a block's CUDA threads run as a plain loop inside it.  The
//   host asks for one OS thread for small launches, which then run in the
//   calling thread without entering an OpenMP region at all.  The built-ins
//   (threadIdx...) are thread-locals of this library, written per CUDA thread
//   and read by the kernel (x86-64 builds use TLS descriptors, which make
//   that cheap in a dlopen-ed library).
//
// * __syncthreads() is a no-op, which is only correct when a block has one
//   thread: then every phase of the kernel runs in program order.  The launcher
//   refuses a kernel that may reach a barrier with more than one thread per
//   block (Python checks it from the source scan; the barrier itself reports it
//   too, as a second line of defence).  msrl's multi-agent kernels (one block
//   per environment) stride over agents
//   (`for (i = threadIdx.x; i < N; i += blockDim.x)`), so with blockDim = 1
//   each phase is a plain loop over the agents, and a block reduction over
//   them degenerates to reading its own count.
//
// * Shared memory (MSRL_SHARED) is a slice of a per-OS-thread arena; the slice
//   offsets restart for every CUDA thread, so all threads of a block get the same
//   addresses (as in the emulation).  Not poisoned between blocks: kernels that
//   read shared memory before writing it are caught by the emulation's tests.
//
// * Arguments arrive packed in 8-byte slots (one ctypes argument per launch),
//   arrays as the CPython object addresses of NumPy arrays (the host passes
//   id(array)): the generated wrapper reads the data pointer and the flags
//   (C-contiguous, writeable) from NumPy's public object layout
//   (PyArrayObject_fields: data, nd, dimensions, strides, base, descr, flags).
//   fragments/_native.py checks these offsets against `array.ctypes` once, and
//   passes plain data pointers instead (MSRL_NATIVE_RAW_POINTERS) if they
//   ever disagree.
//
// * Floating point: -ffp-contract=off and no -ffast-math, so double results
//   equal NumPy's bit for bit, exactly as in the emulation.
#ifndef MSRL_CPU_NATIVE_H
#define MSRL_CPU_NATIVE_H

#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#define MSRL_NATIVE 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
// Use MSRL_SHARED(type, name, size) instead (msrl_common.cuh).
#define __shared__ msrl_native_error_use_MSRL_SHARED_instead_of___shared__

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;

// Constant-initialised and internal to this library: no TLS wrapper calls.
static thread_local dim3 threadIdx;
static thread_local dim3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;

namespace msrl_native {

constexpr size_t kSharedBytes = 48 * 1024;
constexpr int kOk = 0;
constexpr int kBadLaunchConfig = 1;
constexpr int kBarrierWithThreads = 3;
constexpr int kSharedOverflow = 4;
constexpr int kBadArray = 100;  // + index of the parameter: not C-contiguous, or read-only but written

struct alignas(64) Arena {
    unsigned char bytes[kSharedBytes];
};

static thread_local unsigned char* shared_base = nullptr;
static thread_local size_t shared_offset = 0;
static thread_local int thread_error = kOk;

inline Arena* thread_arena() {
    static thread_local Arena* arena = nullptr;
    if (arena == nullptr) arena = new Arena;
    return arena;
}

template <class T>
T* shared_alloc(size_t count) {
    const size_t align = alignof(T) < 16 ? 16 : alignof(T);
    const size_t offset = (shared_offset + align - 1) & ~(align - 1);
    const size_t bytes = count * sizeof(T);
    if (shared_base == nullptr || offset + bytes > kSharedBytes) {
        thread_error = kSharedOverflow;  // would not build for CUDA either (> 48 KiB static shared)
        static thread_local Arena* overflow = nullptr;  // a pointer: the TLS block stays small
        if (overflow == nullptr) overflow = new Arena;
        return reinterpret_cast<T*>(overflow->bytes);
    }
    shared_offset = offset + bytes;
    return reinterpret_cast<T*>(shared_base + offset);
}

// NumPy's PyArrayObject_fields after the PyObject header (offsets in bytes from
// the object's address; checked from Python at load time).
#ifndef MSRL_NATIVE_ARRAY_DATA
#define MSRL_NATIVE_ARRAY_DATA 16
#endif
#ifndef MSRL_NATIVE_ARRAY_FLAGS
#define MSRL_NATIVE_ARRAY_FLAGS 64
#endif
constexpr int kCContiguous = 0x0001;  // NPY_ARRAY_C_CONTIGUOUS
constexpr int kWriteable = 0x0400;    // NPY_ARRAY_WRITEABLE

// The data pointer of the NumPy array at `obj` (NULL for NULL), or false when
// the array is not C-contiguous or, for `written` parameters, not writeable.
template <class T>
inline bool array_data(const void* obj, bool written, T** out) {
#ifdef MSRL_NATIVE_RAW_POINTERS
    *out = (T*)obj;
    (void)written;
    return true;
#else
    if (obj == nullptr) {
        *out = nullptr;
        return true;
    }
    const char* base = (const char*)obj;
    int flags;
    memcpy(&flags, base + MSRL_NATIVE_ARRAY_FLAGS, sizeof flags);
    const int need = kCContiguous | (written ? kWriteable : 0);
    if ((flags & need) != need) return false;
    memcpy(out, base + MSRL_NATIVE_ARRAY_DATA, sizeof(T*));
    return true;
#endif
}

// Argument `i` of a packed launch: 8-byte slots (fragments/_native.py packs them
// with `struct`: one ctypes argument per launch instead of one per parameter).
template <class T>
inline T arg(const unsigned char* args, int i) {
    T value;
    memcpy(&value, args + 8 * (size_t)i, sizeof(T));
    return value;
}

// Run `body` (one CUDA thread's work) over grid x block: blocks split over
// `os_threads` OpenMP threads (static schedule), a block's threads in order.
template <class Body>
int launch(dim3 grid, dim3 block, int os_threads, Body body) {
    const size_t threads = (size_t)block.x * block.y * block.z;
    const size_t blocks = (size_t)grid.x * grid.y * grid.z;
    if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || blocks == 0 ||
        grid.y > 65535 || grid.z > 65535)
        return kBadLaunchConfig;  // CUDA's limits, so what runs here also launches there
    std::atomic<int> error{kOk};
    // Indices advance with carries, not divisions: a 64-bit division per CUDA
    // thread cost as much as CartPole's physics.
    auto blocks_from = [&](long long first, long long last) {
        if (first >= last) return;
        dim3 b((unsigned int)(first % grid.x), (unsigned int)((first / grid.x) % grid.y),
               (unsigned int)(first / ((long long)grid.x * grid.y)));
        for (long long count = first; count < last; ++count) {
            blockIdx = b;
            for (unsigned int tz = 0; tz < block.z; ++tz)
                for (unsigned int ty = 0; ty < block.y; ++ty)
                    for (unsigned int tx = 0; tx < block.x; ++tx) {
                        threadIdx = dim3(tx, ty, tz);
                        shared_offset = 0;
                        body();
                    }
            if (++b.x == grid.x) {
                b.x = 0;
                if (++b.y == grid.y) {
                    b.y = 0;
                    ++b.z;
                }
            }
        }
    };
    auto per_thread = [&](long long first, long long last) {
        thread_error = kOk;
        shared_base = thread_arena()->bytes;
        gridDim = grid;
        blockDim = block;
        blocks_from(first, last);
        shared_base = nullptr;
        if (thread_error != kOk) {
            int expected = kOk;
            error.compare_exchange_strong(expected, thread_error);
        }
    };
    if (os_threads > 1 && blocks > 1) {
        // Contiguous ranges of blocks per OS thread (what schedule(static) does).
#pragma omp parallel num_threads(os_threads)
        {
            const long long count = omp_get_num_threads(), me = omp_get_thread_num();
            const long long nb = (long long)blocks;
            per_thread(nb * me / count, nb * (me + 1) / count);
        }
    } else {
        per_thread(0, (long long)blocks);  // no OpenMP region at all: ~1 us less per small launch
    }
    return error.load();
}

// Whether every action is an index in [0, n_actions) (msrl.envs's check of Discrete
// actions, done here for the fused step).
inline bool discrete_ok(const long long* actions, long long count, long long n_actions) {
    for (long long i = 0; i < count; ++i)
        if ((unsigned long long)actions[i] >= (unsigned long long)n_actions) return false;
    return true;
}

// msrl.envs.EpisodeTracker.record for one step, in the same order and precision:
// total += reward (float32 into float64), lengths += 1, and for each finished
// episode (terminated + truncated > 0) start = total, lengths = 0.  Returns the
// number of finished episodes.
inline long long record_step(const float* reward, const float* terminated, const float* truncated, double* total,
                             double* start, long long* lengths, long long n) {
    long long finished = 0;
    for (long long i = 0; i < n; ++i) {
        total[i] += (double)reward[i];
        lengths[i] += 1;
        if (terminated[i] + truncated[i] > 0.0f) {
            start[i] = total[i];
            lengths[i] = 0;
            ++finished;
        }
    }
    return finished;
}

}  // namespace msrl_native

#define MSRL_SHARED(type, name, size) type* const name = ::msrl_native::shared_alloc<type>(size)

inline void __syncthreads() {
    // A barrier is a no-op only when the block is one thread (see the header comment).
    if (blockDim.x * blockDim.y * blockDim.z != 1) ::msrl_native::thread_error = ::msrl_native::kBarrierWithThreads;
}

inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int)(((unsigned long long)a * (unsigned long long)b) >> 32);
}

#endif  // MSRL_CPU_NATIVE_H
