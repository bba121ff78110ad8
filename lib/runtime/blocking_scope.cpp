// The per-thread depth of `no_blocking_scope`s; one definition for every translation unit.
#include <ruda/runtime/blocking_scope.hpp>

namespace ruda {
namespace {

thread_local int no_blocking_depth = 0;

} // namespace

no_blocking_scope::no_blocking_scope() noexcept { ++no_blocking_depth; }

no_blocking_scope::~no_blocking_scope() { --no_blocking_depth; }

bool blocking_forbidden_on_this_thread() noexcept { return no_blocking_depth > 0; }

} // namespace ruda
