// Sharing memory with NumPy (the buffer protocol) and with any DLPack
// framework (PyTorch, NumPy >= 1.22, JAX, CuPy): no copy where the layout allows.
//
// Note [Zero-copy exchange]
// A tensor handed out (buffer, __dlpack__) keeps its storage alive through the
// exporting object; an array taken in (from_numpy, from_dlpack) becomes a
// tensor over the array's bytes whose storage deleter releases the array (for
// a Python object, with the GIL taken back, since the last tensor may die on
// any thread). Strides are kept. Only what Tessera cannot represent is
// copied: negative strides (np.flip), byte strides that are not a multiple of
// the element size. Dtypes without a Tessera twin (int16, uint32, complex) are
// a TypeError that names the supported ones.
#include <dlpack/dlpack.h>

#include "bindings.h"
#include "tessera/core/error.h"

namespace tessera::python {

namespace {

// DLPack >= 0.7's bool code; the header Debian ships (0.6) predates it.
constexpr uint8_t kDLBoolCode = 6;

constexpr const char* kSupported = "bool, uint8, int8, int32, int64, float16, bfloat16, float32, float64";

std::string buffer_format(DType t) {
  switch (t) {
    case DType::Bool: return "?";
    case DType::U8: return "B";
    case DType::I8: return "b";
    case DType::I32: return "i";
    case DType::I64: return "q";
    case DType::F16: return "e";
    case DType::F32: return "f";
    case DType::F64: return "d";
    case DType::BF16: break;
  }
  throw py::type_error("a bfloat16 tensor has no NumPy dtype; convert it first (t.float())");
}

DType dtype_of_format(const std::string& format, ssize_t itemsize) {
  char c = format.empty() ? 0 : format.back();
  switch (c) {
    case '?': return DType::Bool;
    case 'e': return DType::F16;
    case 'f': return DType::F32;
    case 'd': return DType::F64;
    case 'B': if (itemsize == 1) return DType::U8; break;
    case 'b': case 'h': case 'i': case 'l': case 'q':
      if (itemsize == 1) return DType::I8;
      if (itemsize == 4) return DType::I32;
      if (itemsize == 8) return DType::I64;
      break;
    default: break;
  }
  throw py::type_error("an array of format '" + format + "' (" + std::to_string(itemsize) +
                       "-byte elements) has no Tessera dtype; the supported ones are " + kSupported);
}

void check_exportable(const Tensor& t, const char* what) {
  if (t.is_meta()) throw py::type_error(std::string(what) + ": a meta tensor has no data to share");
  if (t.device().type != DeviceType::CPU) throw py::type_error(std::string(what) + ": only CPU tensors can be shared; call .cpu() first");
  if (t.requires_grad())
    throw py::type_error(std::string(what) + ": the tensor requires grad; call .detach() first (the array would not be tracked)");
}

py::buffer_info buffer_of(const Tensor& t) {
  check_exportable(t, "buffer");
  std::vector<ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(static_cast<ssize_t>(s * t.itemsize()));
  return py::buffer_info(t.raw_data(), static_cast<ssize_t>(t.itemsize()), buffer_format(t.dtype()),
                         static_cast<ssize_t>(t.dim()), shape, strides, /*readonly=*/false);
}

// A tensor over a Python object's bytes; the tensor keeps the object alive.
Tensor over_python_memory(void* data, const Shape& shape, const Shape& strides, DType dtype, py::object owner) {
  auto* keep = new py::object(std::move(owner));
  return from_blob(data, shape, strides, dtype, [keep](void*) {
    py::gil_scoped_acquire gil;
    delete keep;
  });
}

Tensor from_numpy(py::buffer array) {
  py::buffer_info info = array.request();
  DType dtype = dtype_of_format(info.format, info.itemsize);
  Shape shape(info.shape.begin(), info.shape.end()), strides;
  bool shareable = true;
  for (ssize_t s : info.strides) {
    if (s < 0 || s % info.itemsize != 0) shareable = false;
    strides.push_back(s / info.itemsize);
  }
  if (!shareable) {
    // Negative or odd strides: a C-contiguous copy (said in docs/python.md).
    py::object contiguous = py::module_::import("numpy").attr("ascontiguousarray")(array);
    return from_numpy(contiguous.cast<py::buffer>());
  }
  return over_python_memory(info.ptr, shape, strides, dtype, array);
}

// ---- DLPack ----------------------------------------------------------------

struct Exported {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed;
};

DLDataType dl_dtype(DType t) {
  switch (t) {
    case DType::Bool: return {kDLBoolCode, 8, 1};
    case DType::U8: return {kDLUInt, 8, 1};
    case DType::I8: return {kDLInt, 8, 1};
    case DType::I32: return {kDLInt, 32, 1};
    case DType::I64: return {kDLInt, 64, 1};
    case DType::F16: return {kDLFloat, 16, 1};
    case DType::BF16: return {kDLBfloat, 16, 1};
    case DType::F32: return {kDLFloat, 32, 1};
    case DType::F64: return {kDLFloat, 64, 1};
  }
  return {kDLFloat, 32, 1};
}

DType from_dl_dtype(DLDataType d) {
  if (d.lanes != 1) throw py::type_error("DLPack: vector lanes (" + std::to_string(d.lanes) + ") are not supported");
  if (d.code == kDLBoolCode && d.bits == 8) return DType::Bool;
  if (d.code == kDLUInt && d.bits == 8) return DType::U8;
  if (d.code == kDLInt && d.bits == 8) return DType::I8;
  if (d.code == kDLInt && d.bits == 32) return DType::I32;
  if (d.code == kDLInt && d.bits == 64) return DType::I64;
  if (d.code == kDLFloat && d.bits == 16) return DType::F16;
  if (d.code == kDLBfloat && d.bits == 16) return DType::BF16;
  if (d.code == kDLFloat && d.bits == 32) return DType::F32;
  if (d.code == kDLFloat && d.bits == 64) return DType::F64;
  throw py::type_error("DLPack: type code " + std::to_string(d.code) + " with " + std::to_string(d.bits) +
                       " bits has no Tessera dtype; the supported ones are " + kSupported);
}

py::capsule to_dlpack(const Tensor& t) {
  check_exportable(t, "__dlpack__");
  auto* e = new Exported{t, std::vector<int64_t>(t.shape().begin(), t.shape().end()),
                         std::vector<int64_t>(t.strides().begin(), t.strides().end()), {}};
  DLTensor& d = e->managed.dl_tensor;
  // data points at the element at offset 0; byte_offset stays 0 (what NumPy and PyTorch expect on the CPU).
  d.data = t.raw_data();
  d.device = {kDLCPU, 0};
  d.ndim = static_cast<int32_t>(t.dim());
  d.dtype = dl_dtype(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Exported*>(m->manager_ctx); };
  // A capsule never consumed frees the tensor itself; a consumer renames it to "used_dltensor".
  return py::capsule(&e->managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m && m->deleter) m->deleter(m);
    } else {
      PyErr_Clear();
    }
  });
}

Tensor from_dlpack(py::object obj) {
  py::object capsule = obj;
  if (py::hasattr(obj, "__dlpack__")) {
    if (py::hasattr(obj, "__dlpack_device__")) {
      py::tuple dev = obj.attr("__dlpack_device__")();
      if (dev[0].cast<int>() != kDLCPU)
        throw py::type_error("from_dlpack: the tensor lives on DLPack device type " + py::str(dev[0]).cast<std::string>() +
                             "; only CPU memory (1) can be shared");
    }
    capsule = obj.attr("__dlpack__")();
  }
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    throw py::type_error("from_dlpack: expected an object with __dlpack__ or a 'dltensor' capsule, got " + type_name(obj));
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  const DLTensor& d = m->dl_tensor;
  if (d.device.device_type != kDLCPU) throw py::type_error("from_dlpack: only CPU memory can be shared");
  DType dtype = from_dl_dtype(d.dtype);
  if (d.ndim < 0 || d.ndim > 64) throw py::value_error("from_dlpack: " + std::to_string(d.ndim) + " dims");
  Shape shape(d.shape, d.shape + d.ndim), strides;
  if (d.strides) {
    strides.assign(d.strides, d.strides + d.ndim);
  } else {  // compact row-major
    std::vector<int64_t> s(d.ndim, 1);
    for (int i = d.ndim - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
    strides.assign(s.begin(), s.end());
  }
  for (int64_t s : strides)
    if (s < 0) throw py::value_error("from_dlpack: negative strides cannot be shared; make the array contiguous first");
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  return from_blob(data, shape, strides, dtype, [m](void*) {
    py::gil_scoped_acquire gil;  // the producer's deleter may touch Python objects (NumPy's does)
    if (m->deleter) m->deleter(m);
  });
}

}  // namespace

void bind_interop(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  cls.def_buffer(&buffer_of);
  cls.def("__dlpack__", [](const Tensor& t, py::object stream) { return to_dlpack(t); }, py::arg("stream") = py::none(),
          "Exports the tensor as a DLPack capsule sharing its memory (CPU tensors).");
  cls.def("__dlpack_device__", [](const Tensor& t) { return py::make_tuple(static_cast<int>(kDLCPU), 0); });
  cls.def("numpy", [](const Tensor& t) {
    check_exportable(t, "numpy()");
    return py::module_::import("numpy").attr("asarray")(py::cast(t));
  }, "A NumPy array sharing this tensor's memory (CPU tensors, not bfloat16; .detach() first under autograd).");
  cls.def("__array__", [](const Tensor& t, py::object dtype) {
    py::object np = py::module_::import("numpy");
    py::object a = np.attr("asarray")(py::cast(t));
    return dtype.is_none() ? a : a.attr("astype")(dtype);
  }, py::arg("dtype") = py::none());
  m.def("from_numpy", &from_numpy, py::arg("array"),
        "A tensor sharing the NumPy array's memory (kept alive by the tensor), like torch.from_numpy.");
  m.def("from_dlpack", &from_dlpack, py::arg("ext_tensor"),
        "A tensor sharing the memory of any object with __dlpack__ (a PyTorch tensor, a NumPy array) or of a capsule.");
}

}  // namespace tessera::python
