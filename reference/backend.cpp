// placeholder until the reference layer lands
#include "flashref/reference/backend.hpp"
#include "flashref/error.hpp"
namespace flashref::reference {
std::unique_ptr<Backend> make_backend() { throw Unsupported("reference backend not built yet"); }
}  // namespace flashref::reference
