#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0): one array with a
// Python-literal header {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}.
// The header is parsed by hand (no code runs); sizes are checked before use.
// Supported dtypes: bool, u1, i1, i4, i8, f2, f4, f8 (little-endian or '|').
#include <string>

#include "tessera/core/tensor.h"

namespace tessera::io {

Tensor load_npy(const std::string& path);
Tensor parse_npy(const char* data, size_t size, const std::string& what = "npy data");
void save_npy(const std::string& path, const Tensor& t);  // version 1.0, C order, atomic
std::string npy_bytes(const Tensor& t);

}  // namespace tessera::io
