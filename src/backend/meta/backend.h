#pragma once
// The meta backend (Note [The meta device]). Only backend/registry.cpp
// includes this.
#include "backend/backend.h"

namespace tessera::meta {
extern const backend::Backend kBackend;
}
