// What the checkpoint manager's suites share (checkpoint_manager_test.cpp, for its files, its
// retention and its "latest"; checkpoint_manager_async_test.cpp, for its asynchronous saves):
// sample contents that say their step, file operations that count, fail or hold fsync, and the
// temporary files a save leaves.
#pragma once

#include "checkpoint_test_support.hpp"

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/checkpoint/file_ops.hpp>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace ruda::test {

/// Three 4×4 f32 gradients whose values say the step, and the step as the "step" section.
inline ruda::checkpoint contents_of(std::uint64_t step)
{
    std::vector<ruda::gradient_entry> entries;
    for (std::uint64_t id = 1; id <= 3; ++id) {
        std::vector<float> values(16, static_cast<float>(step * 10 + id));
        entries.push_back({ruda::param_id{id}, ruda::dtype::f32(),
                           ruda::tensor_data::from_values(std::move(values), {4, 4}).value()});
    }
    ruda::checkpoint c{ruda::gradients_params_record{std::move(entries)}};
    c.put("step", step).value();
    return c;
}


// Counts the file operations of a save and, when told to, fails one or blocks fsync.
class counting_ops : public ruda::file_ops {
public:
    int calls = 0;
    int fail_at = 0;
    bool exit_instead = false; // die (like a killed process) instead of failing

    ruda::result<int> create(const std::filesystem::path& p) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::create(p);
    }
    ruda::result<std::size_t> write(int fd, const void* d, std::size_t n) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::write(fd, d, n);
    }
    ruda::result<void> pwrite(int fd, const void* d, std::size_t n, std::uint64_t at) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::pwrite(fd, d, n, at);
    }
    ruda::result<void> fsync(int fd) override
    {
        BOOST_OUTCOME_TRY(step());
        std::unique_lock lock{mutex_};
        released_cv_.wait(lock, [this] { return released_; });
        return ruda::file_ops::fsync(fd);
    }
    ruda::result<void> close(int fd) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::close(fd);
    }
    ruda::result<void> rename(const std::filesystem::path& a, const std::filesystem::path& b) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::rename(a, b);
    }
    ruda::result<void> sync_directory(const std::filesystem::path& d) override
    {
        BOOST_OUTCOME_TRY(step());
        return ruda::file_ops::sync_directory(d);
    }

    /// fsync waits until `release()` once this is called.
    void hold_fsync()
    {
        const std::lock_guard lock{mutex_};
        released_ = false;
    }
    void release()
    {
        {
            const std::lock_guard lock{mutex_};
            released_ = true;
        }
        released_cv_.notify_all();
    }

private:
    ruda::result<void> step()
    {
        if (++calls != fail_at) {
            return ruda::success();
        }
        if (exit_instead) {
            std::_Exit(0);
        }
        return ruda::error{ruda::errc::io_error, "injected failure"};
    }
    std::mutex mutex_;
    std::condition_variable released_cv_;
    bool released_ = true;
};

/// The names of the temporary files in `dir`.
inline std::vector<std::string> tmp_files(const std::filesystem::path& dir)
{
    std::vector<std::string> found;
    for (const auto& item : std::filesystem::directory_iterator(dir)) {
        if (item.path().extension() == ".tmp") {
            found.push_back(item.path().filename().string());
        }
    }
    return found;
}

} // namespace ruda::test
