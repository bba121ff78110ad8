// A program outside the ruda tree, built against an installed ruda to check its packaging.
#include <ruda/ruda.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

int main()
{
    auto t = ruda::tensor_data::from_values(std::vector<float>{0.5f, -1.25f}, {2});
    if (!t) {
        return 1;
    }
    auto h = t.value().convert(ruda::dtype::bf16());
    auto bad = t.value().convert(ruda::dtype::qfloat(ruda::quant_scheme{}));
    bool ok = h && h.value().bytes().size() == 4 && bad.has_error() &&
                    bad.error() == ruda::errc::invalid_dtype;
    // The checkpoint layer links too: a file written, read back and compared.
    const ruda::checkpoint contents{
        ruda::gradients_params_record{{{ruda::param_id{7}, ruda::dtype::f32(), t.value()}}}};
    // A name of this process's own: the checks of two installs run at once.
    const auto path = std::filesystem::temp_directory_path() /
                      ("ruda-consumer-check-" + std::to_string(::getpid()) + ".ruda");
    const bool saved = ruda::save_checkpoint_file(path, contents).has_value();
    const auto loaded = ruda::load_checkpoint_file(path);
    std::filesystem::remove(path);
    ok = ok && saved && loaded && loaded.value() == contents;
    std::printf("ruda %s consumer: %s\n", RUDA_VERSION_STRING, ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
