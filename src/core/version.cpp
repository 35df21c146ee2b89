#include "tessera/version.h"

namespace tessera {

const char* version() { return TESSERA_VERSION; }

}  // namespace tessera
