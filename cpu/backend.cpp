// placeholder until the cpu layer lands
#include "flashref/cpu/backend.hpp"
#include "flashref/error.hpp"
namespace flashref::cpu {
std::unique_ptr<Backend> make_backend() { throw Unsupported("cpu backend not built yet"); }
}  // namespace flashref::cpu
