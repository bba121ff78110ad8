// What the CUDA backend tests need besides ruda: the driver itself (the test double or the
// real one), to allocate device memory, make streams standing for the trainer's, and move
// bytes to and from the device behind ruda's back.
#pragma once

#include <ruda/backend/cuda_backend.hpp>
#include <ruda/backend/detail/cuda_driver.hpp>

#include <boost/test/unit_test.hpp>

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ruda::test {

/// The test double's path: as the build gives it, or `RUDA_FAKE_CUDA` where the tests run
/// from another directory (scripts/gpu-check copies them to a GPU machine).
inline std::string fake_cuda_library()
{
    const char* moved = std::getenv("RUDA_FAKE_CUDA");
    return moved != nullptr ? moved : RUDA_FAKE_CUDA;
}

/// Raw driver calls on the test's thread, in the device's primary context.
class raw_gpu {
public:
    explicit raw_gpu(const std::string& library)
        : api_(*detail::cuda::open_driver(library).value())
    {
        BOOST_REQUIRE_EQUAL(api_.cuDevicePrimaryCtxRetain(&context_, 0), 0);
        make_current();
    }
    ~raw_gpu() { api_.cuDevicePrimaryCtxRelease(0); }
    raw_gpu(const raw_gpu&) = delete;
    raw_gpu& operator=(const raw_gpu&) = delete;

    void make_current() const { BOOST_REQUIRE_EQUAL(api_.cuCtxSetCurrent(context_), 0); }

    /// Device memory freed when the last handle goes.
    [[nodiscard]] std::shared_ptr<const cuda_device_ptr> alloc(std::size_t bytes) const
    {
        make_current();
        detail::cuda::CUdeviceptr address = 0;
        BOOST_REQUIRE_EQUAL(api_.cuMemAlloc(&address, bytes == 0 ? 1 : bytes), 0);
        const auto* api = &api_;
        const auto context = context_;
        return {new cuda_device_ptr{address}, [api, context](const cuda_device_ptr* p) {
                    api->cuCtxSetCurrent(context);
                    api->cuMemFree(*p);
                    delete p;
                }};
    }

    [[nodiscard]] cuda_stream new_stream() const
    {
        make_current();
        detail::cuda::CUstream stream = nullptr;
        BOOST_REQUIRE_EQUAL(api_.cuStreamCreate(&stream, detail::cuda::stream_non_blocking), 0);
        return stream;
    }
    void destroy_stream(cuda_stream stream) const
    {
        make_current();
        api_.cuStreamDestroy(static_cast<detail::cuda::CUstream>(stream));
    }

    /// Queues a copy of `bytes` to `address` on `stream` (the "trainer's" write); the host
    /// buffer lives until `finish(stream)`.
    void write_async(cuda_device_ptr address, std::span<const std::uint8_t> bytes,
                     cuda_stream stream)
    {
        make_current();
        auto& kept = pending_.emplace_back(bytes.begin(), bytes.end());
        BOOST_REQUIRE_EQUAL(api_.cuMemcpyHtoDAsync(address, kept.data(), kept.size(),
                                                   static_cast<detail::cuda::CUstream>(stream)),
                            0);
    }
    void finish(cuda_stream stream)
    {
        make_current();
        BOOST_REQUIRE_EQUAL(
            api_.cuStreamSynchronize(static_cast<detail::cuda::CUstream>(stream)), 0);
        pending_.clear();
    }
    void write(cuda_device_ptr address, std::span<const std::uint8_t> bytes, cuda_stream stream)
    {
        write_async(address, bytes, stream);
        finish(stream);
    }
    [[nodiscard]] std::vector<std::uint8_t> read(cuda_device_ptr address, std::size_t bytes,
                                                 cuda_stream stream) const
    {
        make_current();
        std::vector<std::uint8_t> out(bytes);
        BOOST_REQUIRE_EQUAL(api_.cuMemcpyDtoHAsync(out.data(), address, bytes,
                                                   static_cast<detail::cuda::CUstream>(stream)),
                            0);
        BOOST_REQUIRE_EQUAL(
            api_.cuStreamSynchronize(static_cast<detail::cuda::CUstream>(stream)), 0);
        return out;
    }

private:
    const detail::cuda::driver& api_;
    detail::cuda::CUcontext context_ = nullptr;
    std::vector<std::vector<std::uint8_t>> pending_;
};

/// Whether a real GPU and driver are here (the GPU suites run only then).
inline bool gpu_present()
{
    return static_cast<bool>(cuda_device::open());
}

// The test double's controls.
template <class F>
inline F* control(const char* name)
{
    void* handle = ::dlopen(fake_cuda_library().c_str(), RTLD_NOW | RTLD_NOLOAD);
    BOOST_REQUIRE(handle != nullptr);
    auto* f = reinterpret_cast<F*>(::dlsym(handle, name));
    BOOST_REQUIRE(f != nullptr);
    ::dlclose(handle);
    return f;
}

/// A fixture: the test double, reset before and after the test, and a device opened on it.
struct fake {
    // Opening the device loads the library; the controls are looked up in it afterwards.
    fake() { control<void()>("fake_cuda_reset")(); }
    ~fake() { control<void()>("fake_cuda_reset")(); }
    static cuda_device::options options() { return {.driver_library = fake_cuda_library()}; }
    static void fail(const char* entry, long nth, int code)
    {
        control<void(const char*, long, int)>("fake_cuda_fail")(entry, nth, code);
    }
    static void hold_copies(bool held) { control<void(bool)>("fake_cuda_hold_copies")(held); }
    /// The context fails as on a GPU fault: calls that queue or wait return `code`, and no
    /// queued copy or host function runs.
    static void fail_context(int code) { control<void(int)>("fake_cuda_fail_context")(code); }
    static void hold_stream(cuda_stream s, bool held)
    {
        control<void(void*, bool)>("fake_cuda_hold_stream")(s, held);
    }
    static long count(const char* name) { return control<long()>(name)(); }
    static long calls(const char* entry)
    {
        return control<long(const char*)>("fake_cuda_calls")(entry);
    }

    cuda_device device = cuda_device::open(options()).value();
};

} // namespace ruda::test
