// The durable writer: buffered appends, short writes retried, writeback started as the bytes
// go, and on any failure the temporary file closed and removed so that nothing but the
// previous state remains.
#include <ruda/checkpoint/detail/durable_writer.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <utility>

namespace ruda::detail {

std::filesystem::path durable_writer::temporary_path(const std::filesystem::path& path)
{
    return std::filesystem::path{path.string() + ".tmp"};
}

result<std::unique_ptr<durable_writer>> durable_writer::create(std::filesystem::path path,
                                                                file_ops& ops)
{
    const auto temporary = temporary_path(path);
    auto fd = ops.create(temporary);
    if (!fd) {
        return error{fd.error().code(), "Saving " + path.string() + ": " + fd.error().message()};
    }
    return std::unique_ptr<durable_writer>(new durable_writer(std::move(path), ops, fd.value()));
}

durable_writer::durable_writer(std::filesystem::path path, file_ops& ops, int fd)
    : path_(std::move(path)), temporary_(temporary_path(path_)), ops_(ops), fd_(fd)
{
    buffer_.reserve(buffer_size);
    struct stat info {};
    if (::fstat(fd, &info) == 0) {
        device_ = static_cast<std::uint64_t>(info.st_dev);
        inode_ = static_cast<std::uint64_t>(info.st_ino);
    }
}

durable_writer::~durable_writer()
{
    if (fd_ >= 0) {
        (void)ops_.close(fd_);
    }
    if (!committed_ && still_ours()) { // never another save's temporary file
        (void)ops_.remove(temporary_);
    }
}

bool durable_writer::still_ours() const noexcept
{
    struct stat info {};
    if (::lstat(temporary_.c_str(), &info) != 0) {
        return false;
    }
    return inode_ == 0 || (static_cast<std::uint64_t>(info.st_dev) == device_ &&
                           static_cast<std::uint64_t>(info.st_ino) == inode_);
}

error durable_writer::fail(const error& cause) const
{
    return error{cause.code(), "Saving " + path_.string() + ": " + cause.message()};
}

result<void> durable_writer::write_all(std::span<const std::uint8_t> bytes)
{
    while (!bytes.empty()) {
        auto written = ops_.write(fd_, bytes.data(), bytes.size());
        if (!written) {
            return fail(written.error());
        }
        const std::size_t n = std::min(written.value(), bytes.size());
        bytes = bytes.subspan(n);
        written_ += n;
    }
    if (written_ - writeback_ >= writeback_step) {
        ops_.start_writeback(fd_, writeback_, written_ - writeback_);
        writeback_ = written_;
    }
    return success();
}

result<void> durable_writer::flush()
{
    BOOST_OUTCOME_TRY(write_all(buffer_));
    buffer_.clear();
    return success();
}

result<void> durable_writer::write(std::span<const std::uint8_t> bytes)
{
    size_ += bytes.size();
    if (buffer_.size() + bytes.size() > buffer_size) {
        BOOST_OUTCOME_TRY(flush());
    }
    if (bytes.size() >= buffer_size) {
        return write_all(bytes); // large payloads go straight from the caller's memory
    }
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    return success();
}

result<void> durable_writer::write_at(std::span<const std::uint8_t> bytes,
                                      std::uint64_t offset) const
{
    if (auto done = ops_.pwrite(fd_, bytes.data(), bytes.size(), offset); !done) {
        return fail(done.error());
    }
    return success();
}

result<void> durable_writer::commit()
{
    BOOST_OUTCOME_TRY(flush());
    if (auto synced = ops_.fsync(fd_); !synced) {
        return fail(synced.error());
    }
    const int fd = std::exchange(fd_, -1);
    if (auto closed = ops_.close(fd); !closed) {
        return fail(closed.error());
    }
    if (!still_ours()) { // renaming would publish another save's unfinished file
        return fail(error{errc::io_error, "another save to the same path replaced the temporary "
                                          "file " + temporary_.string()});
    }
    if (auto renamed = ops_.rename(temporary_, path_); !renamed) {
        return fail(renamed.error());
    }
    committed_ = true; // the target now holds the new bytes, whatever follows
    const auto dir = path_.parent_path();
    if (auto synced = ops_.sync_directory(dir.empty() ? "." : dir); !synced) {
        return fail(synced.error());
    }
    return success();
}

} // namespace ruda::detail
