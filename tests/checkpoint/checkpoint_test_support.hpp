// Helpers for the checkpoint tests: a temporary directory, file bytes, sample contents, a
// sealed memfd, and rewriting a checkpoint's header with valid checksums, so a test reaches
// the checks that come after the checksums.
#pragma once

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/file_ops.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/version.hpp>

#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace ruda::test {

/// A fresh directory under the system's temporary directory, removed with its contents.
class temp_dir {
public:
    temp_dir()
    {
        std::string pattern = (std::filesystem::temp_directory_path() / "ruda-test-XXXXXX").string();
        path_ = ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
    }
    ~temp_dir()
    {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    [[nodiscard]] const std::filesystem::path& path() const { return path_; }
    [[nodiscard]] std::filesystem::path operator/(const std::string& name) const
    {
        return path_ / name;
    }

private:
    std::filesystem::path path_;
};

/// The file's bytes (none when it cannot be read), read at once: the tests read files of tens
/// of MiB, and they are compiled without optimization.
inline std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path)
{
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    std::ifstream in{path, std::ios::binary};
    if (ec || !in) {
        return {};
    }
    std::vector<std::uint8_t> bytes(size);
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
    bytes.resize(static_cast<std::size_t>(in.gcount()));
    return bytes;
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes)
{
    std::ofstream out{path, std::ios::binary | std::ios::trunc};
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::uint64_t le64(const std::vector<std::uint8_t>& bytes, std::size_t at)
{
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        v |= static_cast<std::uint64_t>(bytes[at + i]) << (8 * i);
    }
    return v;
}

/// `n` bytes of a pattern that repeats every 256 bytes; the repeats are copied, so that tensors
/// of tens of MiB are quick to make in tests compiled without optimization.
inline tensor_data patterned(std::size_t n, shape dims, dtype type)
{
    constexpr std::size_t period = 256;
    std::vector<std::uint8_t> bytes(n);
    for (std::size_t i = 0; i < std::min(n, period); ++i) {
        bytes[i] = static_cast<std::uint8_t>(i * 131 + 7);
    }
    for (std::size_t done = period; done < n; done *= 2) {
        std::memcpy(bytes.data() + done, bytes.data(), std::min(done, n - done));
    }
    return {std::move(bytes), std::move(dims), type};
}

inline dtype quantized(quant_value value, quant_param param, quant_store store,
                       quant_level level = quant_level::tensor())
{
    return dtype::qfloat({value, param, store, level, quant_mode::symmetric});
}

/// The step a checkpoint's "step" value says.
inline std::uint64_t step_in(const checkpoint& c)
{
    std::uint64_t step = 0;
    c.get("step", step).value();
    return step;
}

/// A loaded checkpoint without the run identity its manager recorded: what was saved.
inline checkpoint as_saved(checkpoint c)
{
    c.clear_identity();
    return c;
}

/// A record that passes restore validation: every float dtype (NaN payloads, infinities,
/// subnormals, signed zeros by way of patterned bytes), empty and rank-0 tensors, and
/// quantized layouts of every store and level.
inline gradients_params_record valid_sample()
{
    std::vector<gradient_entry> e;
    std::uint64_t id = 1;
    for (const dtype type : {dtype::f64(), dtype::f32(), dtype::flex32(), dtype::f16(), dtype::bf16()}) {
        e.push_back({ruda::param_id{id++}, type, patterned(6 * type.size(), {2, 3}, type)});
    }
    e.push_back({ruda::param_id{id++}, dtype::f32(), tensor_data{{}, {0}, dtype::f32()}});
    e.push_back({ruda::param_id{id++}, dtype::f16(), tensor_data{{}, {3, 0, 2}, dtype::f16()}});
    e.push_back({ruda::param_id{id++}, dtype::f64(), patterned(8, {}, dtype::f64())});
    e.push_back({ruda::param_id{id++}, dtype::bf16(), patterned(3 * 4, {3, 2}, dtype::f16())}); // stored narrower
    const auto q8 = quantized(quant_value::q8s, quant_param::f32, quant_store::native());
    e.push_back({ruda::param_id{id++}, q8, patterned(32 + 4, {4, 8}, q8)});
    const auto q4 = quantized(quant_value::q4f, quant_param::f32, quant_store::packed_u32(0));
    e.push_back({ruda::param_id{id++}, q4, patterned(3 * 4 + 4, {3, 3}, q4)}); // 3 words: div_ceil per row
    const auto fp4 = quantized(quant_value::e2m1, quant_param::ue8m0, quant_store::packed_native(0));
    e.push_back({ruda::param_id{id++}, fp4, patterned(16 + 1, {4, 8}, fp4)});
    const auto blocked = quantized(quant_value::q8f, quant_param::f16, quant_store::native(),
                                   quant_level::block(block_size{2, 4}));
    e.push_back({ruda::param_id{id++}, blocked, patterned(32 + 4 * 2, {4, 8}, blocked)});
    e.push_back({ruda::param_id{~std::uint64_t{0}}, dtype::f32(), patterned(4, {1}, dtype::f32())});
    return gradients_params_record{std::move(e)};
}

/// The file `bytes` with its header replaced by `header` and the frame rebuilt around it,
/// changed by `edit_frame`, every frame checksum recomputed: only the edited facts are wrong.
inline std::vector<std::uint8_t> reframe(const std::vector<std::uint8_t>& bytes,
                                         const std::vector<std::uint8_t>& header,
                                         const std::function<void(detail::frame&)>& edit_frame = {})
{
    const std::uint64_t header_offset = le64(bytes, 24);
    detail::frame f;
    f.producer = {RUDA_VERSION_MAJOR, RUDA_VERSION_MINOR, RUDA_VERSION_PATCH};
    f.header_offset = header_offset;
    f.header_length = header.size();
    f.header_checksum = detail::checksum(header);
    f.file_length = header_offset + header.size() + detail::trailer_size;
    if (edit_frame) {
        edit_frame(f);
    }
    std::vector<std::uint8_t> out(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header_offset));
    const auto preamble = detail::encode_preamble(f);
    std::copy(preamble.begin(), preamble.end(), out.begin());
    out.insert(out.end(), header.begin(), header.end());
    const auto trailer = detail::encode_trailer(f);
    out.insert(out.end(), trailer.begin(), trailer.end());
    return out;
}

/// Rewrites the checkpoint at `path` with its index changed by `edit_index` and its frame by
/// `edit_frame` (see `reframe`).
inline void rewrite(const std::filesystem::path& path,
                    const std::function<void(checkpoint_index&)>& edit_index,
                    const std::function<void(detail::frame&)>& edit_frame = {})
{
    auto index = checkpoint_reader::open(path).value().index();
    edit_index(index);
    write_bytes(path, reframe(read_bytes(path), detail::encode_header(index), edit_frame));
}

// A memfd holding `bytes`, sealed against every change; closed with the object.
class sealed_memfd {
public:
    explicit sealed_memfd(const std::vector<std::uint8_t>& bytes, bool seal = true)
        : fd_(::memfd_create("ruda-checkpoint", MFD_CLOEXEC | MFD_ALLOW_SEALING))
    {
        BOOST_REQUIRE(fd_ >= 0);
        BOOST_REQUIRE(::write(fd_, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
        // The kernel refuses F_SEAL_WRITE (EBUSY) while it still holds extra references to the
        // pages just written, for a moment on a busy machine; the seal is then tried again.
        for (int attempt = 0; seal; ++attempt) {
            if (::fcntl(fd_, F_ADD_SEALS,
                        F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0) {
                break;
            }
            BOOST_REQUIRE_MESSAGE(errno == EBUSY && attempt < 100,
                                  "cannot seal the memfd: " << std::strerror(errno));
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    ~sealed_memfd() { ::close(fd_); }
    sealed_memfd(const sealed_memfd&) = delete;
    sealed_memfd& operator=(const sealed_memfd&) = delete;
    [[nodiscard]] int fd() const { return fd_; }
    // The path another open of the same file goes through, as a user would pass it.
    [[nodiscard]] std::filesystem::path path() const
    {
        return "/proc/self/fd/" + std::to_string(fd_);
    }

private:
    int fd_;
};

/// File operations whose fsync fails once `fail` is set: a write that cannot be made durable.
class failing_fsync_ops : public file_ops {
public:
    bool fail = false;
    result<void> fsync(int fd) override
    {
        if (fail) {
            return error{errc::io_error, "injected fsync failure"};
        }
        return file_ops::fsync(fd);
    }
};

} // namespace ruda::test
