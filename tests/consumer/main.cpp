// A program outside the ruda tree, built against an installed ruda to check its packaging.
#include <ruda/ruda.hpp>

#include <cstdio>

int main()
{
    auto t = ruda::tensor_data::from_values(std::vector<float>{0.5f, -1.25f}, {2});
    if (!t) {
        return 1;
    }
    auto h = t.value().convert(ruda::dtype::bf16());
    auto bad = t.value().convert(ruda::dtype::qfloat(ruda::quant_scheme{}));
    const bool ok = h && h.value().bytes().size() == 4 && bad.has_error() &&
                    bad.error() == ruda::errc::invalid_dtype;
    std::printf("ruda %s consumer: %s\n", RUDA_VERSION_STRING, ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
