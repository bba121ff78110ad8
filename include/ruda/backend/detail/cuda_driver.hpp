// The few CUDA driver API types and entry points ruda uses, declared here so that nothing
// needs the CUDA toolkit to build: the driver (`libcuda.so.1`) is opened at run time and each
// entry point is looked up under its versioned name (`cuMemcpyDtoHAsync_v2`, …), the ABI the
// toolkit's own header binds. Internal: the public types are in `cuda_device.hpp`.
#pragma once

#include <ruda/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ruda::detail::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = std::uint64_t;
struct CUctx_st;
using CUcontext = CUctx_st*;
struct CUstream_st;
using CUstream = CUstream_st*;
struct CUevent_st;
using CUevent = CUevent_st*;
using CUhostFn = void (*)(void* user_data);

inline constexpr CUresult cuda_success = 0;     // CUDA_SUCCESS
inline constexpr CUresult cuda_not_ready = 600; // CUDA_ERROR_NOT_READY: work still queued
inline constexpr unsigned stream_non_blocking = 0x1;  // CU_STREAM_NON_BLOCKING
inline constexpr unsigned event_disable_timing = 0x2; // CU_EVENT_DISABLE_TIMING
inline constexpr unsigned event_default = 0x0;

// The entry points: member, the name `dlsym` finds it by, and its function type.
#define RUDA_CUDA_ENTRY_POINTS(X)                                                              \
    X(cuInit, "cuInit", CUresult(unsigned))                                                \
    X(cuDriverGetVersion, "cuDriverGetVersion", CUresult(int*))                            \
    X(cuGetErrorName, "cuGetErrorName", CUresult(CUresult, const char**))                  \
    X(cuGetErrorString, "cuGetErrorString", CUresult(CUresult, const char**))              \
    X(cuDeviceGetCount, "cuDeviceGetCount", CUresult(int*))                                \
    X(cuDeviceGet, "cuDeviceGet", CUresult(CUdevice*, int))                                \
    X(cuDeviceGetName, "cuDeviceGetName", CUresult(char*, int, CUdevice))                  \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult(CUcontext*, CUdevice)) \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult(CUdevice))       \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult(CUcontext))                             \
    X(cuStreamCreate, "cuStreamCreate", CUresult(CUstream*, unsigned))                     \
    X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult(CUstream))                           \
    X(cuStreamWaitEvent, "cuStreamWaitEvent", CUresult(CUstream, CUevent, unsigned))       \
    X(cuStreamSynchronize, "cuStreamSynchronize", CUresult(CUstream))                      \
    X(cuStreamQuery, "cuStreamQuery", CUresult(CUstream))                                  \
    X(cuLaunchHostFunc, "cuLaunchHostFunc", CUresult(CUstream, CUhostFn, void*))           \
    X(cuEventCreate, "cuEventCreate", CUresult(CUevent*, unsigned))                        \
    X(cuEventDestroy, "cuEventDestroy_v2", CUresult(CUevent))                              \
    X(cuEventRecord, "cuEventRecord", CUresult(CUevent, CUstream))                         \
    X(cuEventSynchronize, "cuEventSynchronize", CUresult(CUevent))                         \
    X(cuEventElapsedTime, "cuEventElapsedTime", CUresult(float*, CUevent, CUevent))        \
    X(cuMemAlloc, "cuMemAlloc_v2", CUresult(CUdeviceptr*, std::size_t))                    \
    X(cuMemFree, "cuMemFree_v2", CUresult(CUdeviceptr))                                    \
    X(cuMemGetAddressRange, "cuMemGetAddressRange_v2",                                       \
      CUresult(CUdeviceptr*, std::size_t*, CUdeviceptr))                                        \
    X(cuMemHostRegister, "cuMemHostRegister_v2", CUresult(void*, std::size_t, unsigned))   \
    X(cuMemHostUnregister, "cuMemHostUnregister", CUresult(void*))                         \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2",                                               \
      CUresult(void*, CUdeviceptr, std::size_t, CUstream))                                 \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                               \
      CUresult(CUdeviceptr, const void*, std::size_t, CUstream))                           \
    X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2",                                               \
      CUresult(CUdeviceptr, CUdeviceptr, std::size_t, CUstream))

template <class Function>
using entry = Function*;

/// The opened driver. Never closed: the process may hold device memory until it exits.
struct driver {
#define RUDA_CUDA_DECLARE(member, symbol, type) entry<type> member = nullptr;
    RUDA_CUDA_ENTRY_POINTS(RUDA_CUDA_DECLARE)
#undef RUDA_CUDA_DECLARE
    std::string library;
    int version = 0; ///< cuDriverGetVersion: 12040 is CUDA 12.4

    /// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)", or the number when the driver has no name.
    [[nodiscard]] std::string describe(CUresult code) const;
};

/// The driver in `library` (a file name the dynamic loader searches for, or a path), opened
/// and initialised once per process and name. `errc::device_unavailable` with the loader's or
/// the driver's reason when it cannot be opened, lacks an entry point, or `cuInit` fails.
result<const driver*> open_driver(const std::string& library);

/// `errc::read_failed`-style error for a failed call: "<what>: <driver's description>".
[[nodiscard]] error driver_error(const driver& api, errc code, const std::string& what,
                                 CUresult result);

} // namespace ruda::detail::cuda
