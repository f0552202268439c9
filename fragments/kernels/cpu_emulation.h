// cpu_emulation.h - compile msrl's .cu kernels as C++ (g++ -fopenmp) and run
// them on the CPU with CUDA's execution model, so kernels can be tested on a
// machine without a GPU.  Force-included (-include) before the .cu source.
//
// What is emulated, and how:
//
// * Kernel qualifiers (__global__, __device__, __forceinline__...) expand to
//   plain C++; dim3 and the built-ins threadIdx/blockIdx/blockDim/gridDim are
//   thread_local variables that the launcher sets in each OS thread.
//
// * A block with barriers runs as an OpenMP team of exactly blockDim threads
//   (`#pragma omp parallel num_threads(...)`), OpenMP thread t playing CUDA
//   thread t, and __syncthreads() is `#pragma omp barrier` (an orphaned
//   barrier, which binds to that team).  So a barrier really stops every
//   thread until the whole block has arrived, with real concurrency: a kernel
//   missing a barrier races here as it would on a GPU.  Blocks run one after
//   another.
//
// * A kernel that never reaches __syncthreads() (decided by a conservative
//   scan of the source in fragments/_kernel_source.py) runs its block's threads one
//   after another in one OS thread, and blocks in parallel (omp parallel for,
//   for launches of at least kParallelThreshold threads): any order of
//   barrier-free threads is a valid CUDA schedule, and spawning a 256-thread
//   team per block would cost milliseconds.  If such a "serial"
//   launch does reach __syncthreads(), the launch fails with an error code
//   instead of silently computing garbage.
//
// * Shared memory.  A plain `static` array would be shared by every block and
//   every concurrent launch in the process, so `__shared__` is deliberately
//   made a compile error here; kernels declare shared arrays with
//   MSRL_SHARED(type, name, size) (msrl_common.cuh), which on CUDA is
//   `__shared__ type name[size]` and here takes the next slice of the current
//   block's arena: one arena per team (block) in team mode, one per OS thread
//   in serial mode (where that thread runs whole blocks).  Every CUDA thread
//   executes the same declarations in the same order, so all threads of a
//   block get the same addresses.  The arena is 48 KiB (CUDA's static shared
//   memory limit per block) and is filled with 0xFF bytes (NaN for floats, -1
//   for ints) before each block, so reading shared memory that no thread of
//   the block has written yet gives garbage deterministically.
//
// * Math: <math.h> declares the same C names CUDA's device math library has
//   (sinf, cosf, expf, logf, fminf, fmod, sin...), so kernels call them as is;
//   CUDA intrinsics they use (__umulhi) are defined below.
//
// * Floating point: the build uses -ffp-contract=off, so a*b+c is never fused
//   into an FMA and double results match NumPy's exactly.
//
// Not emulated: warp-level intrinsics (__shfl_sync, __ballot_sync), atomics,
// dynamic shared memory, cooperative groups.  The kernels do not use them.
#ifndef MSRL_CPU_EMULATION_H
#define MSRL_CPU_EMULATION_H

#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <new>

#define MSRL_EMULATION 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
// Use MSRL_SHARED(type, name, size) instead: see the header comment.
#define __shared__ msrl_emulation_error_use_MSRL_SHARED_instead_of___shared__

struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;

inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace msrl_emu {

constexpr size_t kSharedBytes = 48 * 1024;
constexpr size_t kParallelThreshold = 65536;  // CUDA threads in a serial launch worth spreading over cores
constexpr int kOk = 0;
constexpr int kBadLaunchConfig = 1;
constexpr int kTeamTooSmall = 2;
constexpr int kBarrierInSerialLaunch = 3;
constexpr int kSharedOverflow = 4;

struct alignas(64) Arena {
    unsigned char bytes[kSharedBytes];
};

// Per OS thread: where this thread's current block keeps its shared memory,
// and where the running launch collects its error code.
inline thread_local unsigned char* shared_base = nullptr;
inline thread_local size_t shared_offset = 0;  // next free byte for this CUDA thread
inline thread_local bool in_team = false;      // running inside an OpenMP team (barriers allowed)
inline thread_local std::atomic<int>* launch_error = nullptr;

inline void fail(int code) {
    int expected = kOk;
    if (launch_error != nullptr) launch_error->compare_exchange_strong(expected, code);
}

template <class T>
T* shared_alloc(size_t count) {
    const size_t align = alignof(T) < 16 ? 16 : alignof(T);
    const size_t offset = (shared_offset + align - 1) & ~(align - 1);
    const size_t bytes = count * sizeof(T);
    if (shared_base == nullptr || offset + bytes > kSharedBytes) {
        // Would not build for CUDA either (static shared memory > 48 KiB).
        fail(kSharedOverflow);
        static thread_local Arena overflow;  // keeps the kernel from writing out of bounds
        return reinterpret_cast<T*>(overflow.bytes);
    }
    shared_offset = offset + bytes;
    return reinterpret_cast<T*>(shared_base + offset);
}

}  // namespace msrl_emu

#define MSRL_SHARED(type, name, size) type* const name = ::msrl_emu::shared_alloc<type>(size)

inline void __syncthreads() {
#ifdef MSRL_EMU_NO_BARRIER
    // Test-only build: a broken emulation whose barrier does nothing, to show
    // that the barrier tests can tell.
#else
    if (!::msrl_emu::in_team) {
        ::msrl_emu::fail(::msrl_emu::kBarrierInSerialLaunch);
        return;
    }
#pragma omp barrier
#endif
}

inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int)(((unsigned long long)a * (unsigned long long)b) >> 32);
}

namespace msrl_emu {

// The shared-memory arena of serial launches on this OS thread (blocks run one
// after another on it, so one arena per thread is one per running block).
inline Arena* serial_arena() {
    static thread_local Arena* arena = nullptr;
    if (arena == nullptr) arena = new Arena;
    return arena;
}

inline void set_thread(const dim3& grid, const dim3& block, size_t b, size_t t) {
    gridDim = grid;
    blockDim = block;
    blockIdx = dim3((unsigned int)(b % grid.x), (unsigned int)((b / grid.x) % grid.y),
                    (unsigned int)(b / ((size_t)grid.x * grid.y)));
    threadIdx = dim3((unsigned int)(t % block.x), (unsigned int)((t / block.x) % block.y),
                     (unsigned int)(t / ((size_t)block.x * block.y)));
    shared_offset = 0;
}

// Run `body` (one CUDA thread's work) over grid x block.  team: OpenMP team per
// block (barriers work); otherwise serial threads, parallel blocks.  Returns
// one of the k* codes above.
template <class Body>
int launch(dim3 grid, dim3 block, bool team, Body body) {
    const size_t threads = (size_t)block.x * block.y * block.z;
    const size_t blocks = (size_t)grid.x * grid.y * grid.z;
    if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || blocks == 0 ||
        grid.y > 65535 || grid.z > 65535)
        return kBadLaunchConfig;  // CUDA's limits, so what runs here also launches there
    std::atomic<int> error{kOk};
    if (team) {
        Arena* arena = new Arena;
        omp_set_dynamic(0);
        for (size_t b = 0; b < blocks && error.load() == kOk; ++b) {
            memset(arena->bytes, 0xFF, kSharedBytes);
#pragma omp parallel num_threads((int)threads)
            {
                launch_error = &error;
                // Every thread sees the same team size, so either all run or none does.
                if ((size_t)omp_get_num_threads() != threads) {
                    fail(kTeamTooSmall);
                } else {
                    set_thread(grid, block, b, (size_t)omp_get_thread_num());
                    shared_base = arena->bytes;
                    in_team = true;
                    body();
                    in_team = false;
                    shared_base = nullptr;
                }
                launch_error = nullptr;
            }
        }
        delete arena;
    } else {
        // Small launches finish sooner in the calling thread than it takes to wake another.
#pragma omp parallel if (blocks > 1 && blocks * threads >= kParallelThreshold)
        {
            launch_error = &error;
            Arena* arena = serial_arena();
            size_t used = kSharedBytes;  // poison everything before this launch's first block
#pragma omp for schedule(static)
            for (long long b = 0; b < (long long)blocks; ++b) {
                memset(arena->bytes, 0xFF, used);
                used = 0;
                shared_base = arena->bytes;
                for (size_t t = 0; t < threads; ++t) {
                    set_thread(grid, block, (size_t)b, t);
                    body();
                    if (shared_offset > used) used = shared_offset;
                }
                shared_base = nullptr;
            }
            launch_error = nullptr;
        }
    }
    return error.load();
}

}  // namespace msrl_emu

#endif  // MSRL_CPU_EMULATION_H
