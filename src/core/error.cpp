#include "tessera/core/error.h"

namespace tessera::detail {

void throw_error(std::string msg) { throw Error(std::move(msg)); }
void throw_internal_error(std::string msg) { throw InternalError(std::move(msg)); }

}  // namespace tessera::detail
