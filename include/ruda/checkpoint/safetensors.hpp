// Gradients as safetensors files, the format Python tools (safetensors, numpy, Hugging Face)
// read: an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape
// and byte range, then the tensors' bytes back to back.
//
// Export names each tensor by its parameter's name ("fc1.weight"), or by its id in decimal
// ("7") when it has none, so `safetensors.torch.load_file` of an export of `from_module`'s
// gradients gives a state dict. Import takes decimal names back as ids and gives any other
// name the id `param_id::from_name` gives it, the id `from_module` uses, keeping the name: a
// file written by `safetensors.torch.save_file` of a model's gradients restores into the same
// model in C++. A named entry whose id is not its name's is exported with its id in the
// metadata ("ruda.id.<name>"), so every export imports back to the same record.
#pragma once

#include <ruda/checkpoint/file_ops.hpp>
#include <ruda/error.hpp>
#include <ruda/optim/gradients_params_record.hpp>

#include <cstdint>
#include <filesystem>
#include <span>

namespace ruda {

struct safetensors_limits {
    /// The largest JSON header accepted, whatever the file claims (safetensors' own limit).
    std::uint64_t max_header_bytes = std::uint64_t{100} << 20U;
};

/// Writes `record` to `path` atomically and durably (temporary file, fsync, rename, directory
/// fsync), tensors in id order. Each entry's stored data goes out as is; where its original
/// dtype differs (a flex32 gradient, a record narrowed by a precision setting), the header's
/// `__metadata__` holds it under "ruda.original_dtype.<id>", so an import restores it.
/// Float tensors go out as F64, F32 (also for flex32), F16 and BF16; the integer and bool
/// tensors of a checkpoint's other groups as I64, I32, I16, I8, U64, U32, U16, U8 and BOOL;
/// other data (quantized tensors above all, which safetensors has no layout for) is
/// `errc::invalid_dtype` naming the parameter. What an import would refuse is refused before
/// a byte is written, with the import's code: `validate_for_saving`'s checks (those of a tensor
/// group other than the gradients), and a header
/// over `limits.max_header_bytes` (`errc::allocation_too_large`). `errc::io_error` names the
/// failed operation. Returns the file size.
[[nodiscard]] result<std::uint64_t> export_safetensors(const gradients_params_record& record,
                                                       const std::filesystem::path& path,
                                                       const safetensors_limits& limits,
                                                       file_ops& ops = posix_file_ops());
/// The same with the default limits.
[[nodiscard]] result<std::uint64_t> export_safetensors(const gradients_params_record& record,
                                                       const std::filesystem::path& path,
                                                       file_ops& ops = posix_file_ops());

/// Reads a safetensors file into a record (entries in id order), checking everything before a
/// tensor's bytes are allocated: the header's length and JSON, each name, dtype, shape and
/// byte range, and that the ranges cover the data exactly once. Errors:
/// `errc::malformed_record` (a broken header or ranges), `errc::duplicate_param_id` (two names
/// with one id), `errc::invalid_dtype` (a dtype ruda lacks: F8_E4M3, C64…), the record's
/// checks as a tensor group (`validate_tensor_group`),
/// `errc::shape_overflow`, `errc::byte_count_mismatch`, `errc::allocation_too_large` (a header
/// over the limit), `errc::io_error`; each names the file and, where one is involved, the
/// tensor.
[[nodiscard]] result<gradients_params_record>
import_safetensors(const std::filesystem::path& path, const safetensors_limits& limits = {});

/// The same for a file held in memory.
[[nodiscard]] result<gradients_params_record>
import_safetensors_bytes(std::span<const std::uint8_t> bytes,
                         const safetensors_limits& limits = {});

} // namespace ruda
