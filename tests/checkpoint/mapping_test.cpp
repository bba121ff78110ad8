// How a load gets a payload's bytes: an ordinary file is read (runs of small payloads into one
// shared buffer), so truncating it afterwards harms nothing; a file the kernel keeps from
// changing (a sealed memfd, an immutable file) is mapped, tensors share the mapping's pages,
// and the truncation that would raise SIGBUS is refused by the kernel instead.
#include "checkpoint_test_support.hpp"

#include <ruda/backend/cpu_backend.hpp>
#include <ruda/checkpoint/checkpoint_file.hpp>
#include <ruda/optim/gradients_params.hpp>

#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace {

using ruda::errc;
using ruda::storage_origin;

// Three gradients (one large enough for a buffer of its own) and a section.
ruda::checkpoint mappable_checkpoint()
{
    std::vector<ruda::gradient_entry> entries;
    entries.push_back({ruda::param_id{3}, ruda::dtype::f32(), ruda::test::patterned(64, {16}, ruda::dtype::f32())});
    entries.push_back({ruda::param_id{5}, ruda::dtype::f32(), ruda::test::patterned(40, {10}, ruda::dtype::f32())});
    entries.push_back({ruda::param_id{9}, ruda::dtype::f32(),
                       ruda::test::patterned(std::size_t{1} << 20U, {1U << 18U}, ruda::dtype::f32())});
    ruda::checkpoint c{ruda::gradients_params_record{std::move(entries)}};
    c.put("step", std::uint64_t{42}).value();
    return c;
}

void require_same_gradients(const ruda::checkpoint& a, const ruda::checkpoint& b)
{
    BOOST_REQUIRE(a.gradients().entries().size() == b.gradients().entries().size());
    for (std::size_t i = 0; i < a.gradients().entries().size(); ++i) {
        BOOST_TEST((a.gradients().entries()[i] == b.gradients().entries()[i]));
    }
}

using ruda::test::sealed_memfd;

std::vector<std::uint8_t> saved_bytes(const ruda::test::temp_dir& dir, const ruda::checkpoint& c)
{
    const auto path = dir / "c.ruda";
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, c));
    return ruda::test::read_bytes(path);
}

} // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_mapping)

BOOST_AUTO_TEST_CASE(an_ordinary_file_is_read_so_truncating_it_later_harms_nothing)
{
    const ruda::test::temp_dir dir;
    const auto path = dir / "c.ruda";
    const auto original = mappable_checkpoint();
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, original));
    const auto reader = ruda::checkpoint_reader::open(path).value();
    BOOST_TEST(reader.mapping_reason().empty());
    const auto loaded = reader.load().value();
    for (const auto& e : loaded.gradients().entries()) {
        BOOST_TEST((e.data.bytes().origin() == storage_origin::owned));
    }
    // Truncated, then rewritten with other bytes: a mapping would fault (SIGBUS) or change.
    std::filesystem::resize_file(path, 0);
    ruda::test::write_bytes(path, std::vector<std::uint8_t>(4096, 0xEE));
    require_same_gradients(loaded, original);
}

BOOST_AUTO_TEST_CASE(a_sealed_memfd_is_mapped_shared_by_the_restore_and_cannot_shrink)
{
    const ruda::test::temp_dir dir;
    const auto original = mappable_checkpoint();
    std::optional<ruda::checkpoint> loaded;
    {
        const sealed_memfd file{saved_bytes(dir, original)};
        const auto reader = ruda::checkpoint_reader::open(file.path()).value();
        BOOST_TEST(reader.mapping_reason() == "sealed memfd");
        loaded = reader.load().value();

        // What would raise SIGBUS under a mapping is refused: no shrink, no write.
        BOOST_TEST(::ftruncate(file.fd(), 0) == -1);
        BOOST_TEST(errno == EPERM);
        const std::uint8_t byte = 1;
        BOOST_TEST(::pwrite(file.fd(), &byte, 1, 4096) == -1);
        BOOST_TEST(errno == EPERM);
    } // the file closed and the reader gone: the record keeps the mapping alive
    const auto& entries = loaded->gradients().entries();
    for (const auto& e : entries) {
        BOOST_TEST((e.data.bytes().origin() == storage_origin::mapped));
        BOOST_TEST(e.data.bytes().shares_memory_with(entries.front().data.bytes()));
    }
    require_same_gradients(*loaded, original);
    std::uint64_t step = 0;
    BOOST_TEST(loaded->get("step", step).has_value());
    BOOST_TEST(step == 42U);

    // from_record<cpu_backend> shares the mapped bytes when no conversion is needed.
    const auto restored = ruda::gradients_params::from_record<ruda::cpu_backend>(
                              loaded->gradients(), {})
                              .value();
    const auto tensor = restored.get<ruda::cpu_backend>(ruda::param_id{9}).value();
    const auto& data = std::get<ruda::cpu_backend::float_tensor>(tensor).data();
    BOOST_TEST(data.bytes().shares_memory_with(entries.front().data.bytes()));
    BOOST_TEST(data.values<float>().value().size() == (1U << 18U));
}

BOOST_AUTO_TEST_CASE(mapping_never_reads_even_an_unchangeable_file)
{
    const ruda::test::temp_dir dir;
    const auto original = mappable_checkpoint();
    const sealed_memfd file{saved_bytes(dir, original)};
    const auto reader = ruda::checkpoint_reader::open(file.path()).value();
    const ruda::checkpoint_load_options read{.mapping = ruda::load_mapping::never};
    BOOST_TEST(reader.mapping_reason(read).empty());
    const auto loaded = reader.load(read).value();
    BOOST_TEST((loaded.gradients().entries().front().data.bytes().origin() == storage_origin::owned));
    require_same_gradients(loaded, original);
}

BOOST_AUTO_TEST_CASE(a_memfd_that_can_still_change_is_read)
{
    const ruda::test::temp_dir dir;
    const sealed_memfd file{saved_bytes(dir, mappable_checkpoint()), false};
    BOOST_REQUIRE(::fcntl(file.fd(), F_ADD_SEALS, F_SEAL_WRITE) == 0); // it can still shrink
    const auto reader = ruda::checkpoint_reader::open(file.path()).value();
    BOOST_TEST(reader.mapping_reason().empty());
    BOOST_TEST((reader.load().value().gradients().entries().front().data.bytes().origin() ==
                storage_origin::owned));
}

BOOST_AUTO_TEST_CASE(a_mapped_file_gets_every_check_a_read_one_gets)
{
    const ruda::test::temp_dir dir;
    const auto bytes = saved_bytes(dir, mappable_checkpoint());
    const auto index = ruda::checkpoint_reader::open(dir / "c.ruda").value().index();
    const auto& second = index.entries[1].payload;

    // Mapped and read alike, the same refusal.
    const auto refused = [](const std::vector<std::uint8_t>& damaged, errc code, const char* text) {
        const sealed_memfd file{damaged};
        for (const auto mapping : {ruda::load_mapping::when_unchangeable, ruda::load_mapping::never}) {
            const auto loaded = ruda::load_checkpoint_file(file.path(), {.mapping = mapping});
            BOOST_REQUIRE(!loaded);
            BOOST_TEST(loaded.error() == code);
            BOOST_TEST(loaded.error().message().find(text) != std::string::npos);
        }
    };
    auto corrupt = bytes;
    corrupt[second.offset + 3] ^= 0x10U;
    refused(corrupt, errc::checksum_mismatch, "parameter 5");
    auto padded = bytes;
    padded[second.offset + second.length + 1] = 1; // in the padding after entry 5
    refused(padded, errc::malformed_record, "nonzero padding");

    // A partial load of a mapped file.
    const sealed_memfd file{bytes};
    const auto only = ruda::load_checkpoint_file(
        file.path(), {.only_ids = std::vector<ruda::param_id>{ruda::param_id{9}}});
    BOOST_REQUIRE(only);
    BOOST_TEST(only.value().gradients().entries().size() == 1U);
    BOOST_TEST((only.value().gradients().entries()[0].data.bytes().origin() == storage_origin::mapped));
}

// Root may set the immutable flag (CAP_LINUX_IMMUTABLE) on file systems that keep it (ext4,
// XFS, btrfs); elsewhere the case says so and checks that the file is read instead.
BOOST_AUTO_TEST_CASE(an_immutable_file_is_mapped_where_the_flag_can_be_set)
{
    const ruda::test::temp_dir dir;
    const auto path = dir / "c.ruda";
    const auto original = mappable_checkpoint();
    BOOST_REQUIRE(ruda::save_checkpoint_file(path, original));
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    BOOST_REQUIRE(fd >= 0);
    int flags = 0;
    const bool got = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    int with_immutable = flags | FS_IMMUTABLE_FL;
    const bool set = got && ::ioctl(fd, FS_IOC_SETFLAGS, &with_immutable) == 0;
    if (!set) {
        BOOST_TEST_MESSAGE("the immutable flag cannot be set here (" << std::strerror(errno)
                                                                     << "): checking the read path");
        BOOST_TEST(ruda::checkpoint_reader::open(path).value().mapping_reason().empty());
        ::close(fd);
        return;
    }
    struct clear_flag { // so the directory can be removed whatever happens
        int fd;
        int flags;
        ~clear_flag()
        {
            static_cast<void>(::ioctl(fd, FS_IOC_SETFLAGS, &flags));
            ::close(fd);
        }
    } const restore{fd, flags};
    const auto reader = ruda::checkpoint_reader::open(path).value();
    BOOST_TEST(reader.mapping_reason() == "immutable");
    const auto loaded = reader.load().value();
    BOOST_TEST((loaded.gradients().entries().back().data.bytes().origin() == storage_origin::mapped));
    std::error_code refused;
    std::filesystem::resize_file(path, 0, refused);
    BOOST_TEST(refused.value() == EPERM);
    require_same_gradients(loaded, original);
}

// Small payloads come in runs of up to 1 MiB that one buffer holds: each tensor costs its
// 24-byte handle and no allocation of its own (payloads of 64 bytes have no padding between).
BOOST_AUTO_TEST_CASE(small_payloads_share_one_buffer_per_run)
{
    const ruda::test::temp_dir dir;
    constexpr std::size_t count = 40000;
    std::vector<ruda::gradient_entry> entries;
    entries.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        entries.push_back({ruda::param_id{i + 1}, ruda::dtype::f32(), ruda::test::patterned(64, {16}, ruda::dtype::f32())});
    }
    const ruda::checkpoint original{ruda::gradients_params_record{std::move(entries)}};
    BOOST_REQUIRE(ruda::save_checkpoint_file(dir / "small.ruda", original));
    const auto loaded = ruda::load_checkpoint_file(dir / "small.ruda").value();
    const auto& got = loaded.gradients().entries();
    BOOST_REQUIRE(got.size() == count);
    std::size_t buffers = 1;
    for (std::size_t i = 1; i < count; ++i) {
        if (!got[i].data.bytes().shares_memory_with(got[i - 1].data.bytes())) {
            ++buffers;
        } else {
            BOOST_TEST(got[i].data.bytes().data() == got[i - 1].data.bytes().data() + 64);
        }
    }
    const std::size_t payload_bytes = count * 64;
    BOOST_TEST(buffers <= payload_bytes / (std::size_t{1} << 20U) + 1);
    require_same_gradients(loaded, original);
}

BOOST_AUTO_TEST_SUITE_END()
