// libFuzzer target: cereal load paths behind the bounded section archive, the way a
// checkpoint section is read: a gradient record (dtypes, schemes, shapes, tensor bytes) and
// containers of strings, maps and optionals. Every container size is checked against the
// bytes left, so no input may make it allocate beyond a small multiple of its size
// (-malloc_limit_mb) or crash; a record that loads goes through restore validation.
#include "fuzz_input.hpp"

#include <ruda/checkpoint/checkpoint.hpp>
#include <ruda/optim/record_serialization.hpp>
#include <ruda/optim/validate_record.hpp>

#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

struct user_state {
    std::map<std::string, std::vector<double>> moments;
    std::optional<std::vector<std::string>> names;
    std::uint64_t step = 0;

    template <class Archive>
    void serialize(Archive& ar)
    {
        ar(moments, names, step);
    }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in{data, size};
    const std::uint8_t which = in.byte();
    ruda::checkpoint c;
    fuzz::require(c.put_bytes("s", {in.rest().begin(), in.rest().end()}).has_value());
    if (which % 2 == 0) {
        ruda::gradients_params_record record;
        if (c.get("s", record)) {
            (void)ruda::validate_gradients_record(record);
        }
    } else {
        user_state state;
        (void)c.get("s", state);
    }
    return 0;
}
