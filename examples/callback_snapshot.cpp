// A snapshot for a plain callback: gradients on a device with 1 ms per read, snapshotted by
// `async_snapshot` on an io_context's executor, eight reads in flight. The callback receives
// the record (or the error naming the parameter) on that executor, after the call returned.
#include <ruda/ruda.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

int main()
{
    using gpu = ruda::async_backend;
    boost::asio::io_context io; // first: the device's worker posts completions to it
    const ruda::async_device device{{.latency = std::chrono::milliseconds(1)}};

    ruda::gradients_params grads;
    for (int layer = 0; layer < 32; ++layer) {
        const std::string name = "layers." + std::to_string(layer) + ".weight";
        auto values = ruda::tensor_data::from_values(std::vector<float>(256, float(layer)), {256});
        grads.insert<gpu>(ruda::param_id::from_name(name),
                          gpu::float_from_data(values.value(), device).value(), name);
    }

    std::optional<ruda::result<ruda::gradients_params_record>> snapshot;
    ruda::async_snapshot<gpu>(io.get_executor(), grads, {.max_in_flight = 8},
                              [&](ruda::result<ruda::gradients_params_record> record) {
                                  snapshot = std::move(record);
                              });
    // Nothing has run yet: the reads start, and the callback runs, inside io.run().
    const auto start = std::chrono::steady_clock::now();
    io.run();
    const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                              start)
                        .count();

    if (!snapshot || !*snapshot) {
        std::printf("snapshot failed: %s\n",
                    snapshot ? snapshot->error().message().c_str() : "no completion");
        return 1;
    }
    const auto& entries = snapshot->value().entries();
    std::printf("%zu gradients in %.1f ms (32 reads of 1 ms, 8 at a time); first: %s\n",
                entries.size(), ms, entries.front().name.c_str());
    const auto peak = device.stats().peak_in_flight;
    std::printf("peak reads in flight: %zu\n", peak);
    return entries.size() == 32 && peak <= 8 ? 0 : 1;
}
