// The payload reads of a load: the file cut into jobs (runs of small payloads read into one
// buffer, large payloads alone), read or mapped by a few readers, each hashing what it got
// while it is still in cache and checking the zero padding between payloads.
#include "payload_request.hpp"

#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/checkpoint/detail/frame.hpp>
#include <ruda/checkpoint/detail/io_jobs.hpp>
#include <ruda/checkpoint/detail/progress_meter.hpp>
#include <ruda/tensor/detail/mapped_file.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ruda {
namespace {

// Payloads under this size share one buffer with their neighbours in the file (one read, one
// allocation, no bookkeeping of their own); larger ones get a buffer each.
constexpr std::size_t small_payload = std::size_t{256} << 10U;
// The most bytes one shared buffer spans, and the widest gap it bridges between payloads.
constexpr std::size_t run_limit = std::size_t{1} << 20U;
constexpr std::size_t run_gap = 4096;

} // namespace

// One job of a load: payloads in_order[first, last), and where the zero padding before them
// starts. A run of small payloads shares one buffer; a large payload is read alone.
struct checkpoint_reader::read_job {
    std::size_t first;
    std::size_t last;
    std::uint64_t padding_from;
};

// The jobs, where the last payload ends and the payload bytes in all.
struct checkpoint_reader::read_plan {
    std::vector<read_job> jobs;
    std::uint64_t end = detail::preamble_size;
    std::uint64_t bytes = 0;
};

// The whole file mapped once; every payload a slice of the mapping, hashed in place by the
// readers, each job checking the padding before its payloads and between them.
result<void> checkpoint_reader::map_payloads(std::vector<payload_request>& requests,
                                             const std::vector<std::uint32_t>& in_order,
                                             bool full, bool verify, unsigned readers,
                                             detail::progress_meter& progress) const
{
    BOOST_OUTCOME_TRY(auto file,
                      detail::map_unchangeable_file(
                          source_.fd(), static_cast<std::size_t>(source_.size()), path().string()));
    const auto padding = [&](std::uint64_t from, std::uint64_t to) -> result<void> {
        if (full && from < to && !detail::all_zero(file.span().subspan(from, to - from))) {
            return nonzero_padding(from, to);
        }
        return success();
    };
    const read_plan plan = plan_reads(requests, in_order);
    const auto map_job = [&](std::size_t j, unsigned) -> result<void> {
        const read_job& job = plan.jobs[j];
        std::uint64_t cursor = job.padding_from;
        for (std::size_t i = job.first; i < job.last; ++i) {
            payload_request& r = requests[in_order[i]];
            BOOST_OUTCOME_TRY(padding(cursor, r.payload.offset));
            r.bytes = file.slice(r.payload.offset, r.payload.length);
            if (verify && detail::checksum(r.bytes) != r.payload.checksum) {
                return mismatch(r.name());
            }
            cursor = std::max(cursor, r.payload.offset + r.payload.length);
            BOOST_OUTCOME_TRY(progress.add(r.payload.length));
        }
        return success();
    };
    BOOST_OUTCOME_TRY(
        detail::run_jobs(plan.jobs.size(), detail::io_threads(readers, plan.bytes), map_job));
    return padding(plan.end, header_offset_);
}

// The file in order, cut into jobs: runs of small payloads close enough to come in with one
// read into one buffer, each large payload on its own.
checkpoint_reader::read_plan checkpoint_reader::plan_reads(
    const std::vector<payload_request>& requests, const std::vector<std::uint32_t>& in_order)
{
    read_plan plan;
    for (std::size_t i = 0; i < in_order.size();) {
        const payload_location& first = requests[in_order[i]].payload;
        std::size_t end = i + 1;
        std::uint64_t run_end = first.offset + first.length;
        while (first.length < small_payload && end < in_order.size()) {
            const payload_location& next = requests[in_order[end]].payload;
            const std::uint64_t next_end = std::max(run_end, next.offset + next.length);
            if (next.length >= small_payload || next.offset > run_end + run_gap ||
                next_end - first.offset > run_limit) {
                break;
            }
            run_end = next_end;
            ++end;
        }
        plan.jobs.push_back({i, end, plan.end});
        plan.bytes += run_end - first.offset;
        plan.end = std::max(plan.end, run_end);
        i = end;
    }
    return plan;
}

// The jobs run on `readers` threads; each hashes what it read right after it arrived, while it
// is still in cache.
result<void> checkpoint_reader::read_payloads(std::vector<payload_request>& requests,
                                              const std::vector<std::uint32_t>& in_order,
                                              bool full, bool verify, unsigned readers,
                                              detail::progress_meter& progress) const
{
    const read_plan plan = plan_reads(requests, in_order);
    const auto read_job = [&](std::size_t j, unsigned) {
        return read_job_payloads(requests, in_order, plan.jobs[j], full, verify, progress);
    };
    BOOST_OUTCOME_TRY(
        detail::run_jobs(plan.jobs.size(), detail::io_threads(readers, plan.bytes), read_job));
    if (full) {
        BOOST_OUTCOME_TRY(check_padding(plan.end, header_offset_));
    }
    return success();
}

result<void> checkpoint_reader::read_job_payloads(std::vector<payload_request>& requests,
                                                  const std::vector<std::uint32_t>& in_order,
                                                  const read_job& job, bool full, bool verify,
                                                  detail::progress_meter& progress) const
{
    const payload_location& first = requests[in_order[job.first]].payload;
    if (full) {
        BOOST_OUTCOME_TRY(check_padding(job.padding_from, first.offset));
    }
    if (first.length >= small_payload) { // alone, read in pieces
        payload_request& r = requests[in_order[job.first]];
        BOOST_OUTCOME_TRY(r.bytes, storage::try_allocate(static_cast<std::size_t>(first.length)));
        std::uint8_t* data = r.bytes.writable_data();
        detail::running_checksum sum;
        for (std::size_t done = 0; done < r.bytes.size();) {
            const std::size_t n = std::min(r.bytes.size() - done, small_payload);
            BOOST_OUTCOME_TRY(read_at(data + done, n, first.offset + done));
            if (verify) {
                sum.update({data + done, n});
            }
            done += n;
            // Told before the whole payload is verified: its last piece is checked just below.
            BOOST_OUTCOME_TRY(progress.add(n));
        }
        if (verify && sum.digest() != first.checksum) {
            return mismatch(r.name());
        }
        return success();
    }
    // A run: one read, the payloads slices of it, the padding between them checked in place.
    std::uint64_t run_end = first.offset;
    for (std::size_t i = job.first; i < job.last; ++i) {
        const payload_location& p = requests[in_order[i]].payload;
        run_end = std::max(run_end, p.offset + p.length);
    }
    BOOST_OUTCOME_TRY(auto run,
                      storage::try_allocate(static_cast<std::size_t>(run_end - first.offset)));
    BOOST_OUTCOME_TRY(read_at(run.writable_data(), run.size(), first.offset));
    std::uint64_t cursor = first.offset;
    std::uint64_t run_bytes = 0; // the payloads' own bytes, for the progress report
    for (std::size_t i = job.first; i < job.last; ++i) {
        payload_request& r = requests[in_order[i]];
        run_bytes += r.payload.length;
        const std::uint64_t at = r.payload.offset;
        if (full && cursor < at &&
            !detail::all_zero(run.span().subspan(cursor - first.offset, at - cursor))) {
            return nonzero_padding(cursor, at);
        }
        r.bytes = run.slice(at - first.offset, r.payload.length);
        if (verify && detail::checksum(r.bytes) != r.payload.checksum) {
            return mismatch(r.name());
        }
        cursor = std::max(cursor, at + r.payload.length);
    }
    return progress.add(run_bytes);
}

} // namespace ruda
