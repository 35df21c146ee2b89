// tessera.Tensor: properties, Python's operators, indexing, printing.
// The ops of ops.def become methods in ops.cpp; NumPy and DLPack are in interop.cpp.
#include <pybind11/operators.h>

#include "bindings.h"
#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::python {

namespace {
PyTypeObject* g_tensor_type = nullptr;  // tessera.Tensor, set when the class is made
}  // namespace

py::object tensor_object(Tensor t) { return py::cast(std::move(t)); }
bool is_tensor(py::handle h) { return PyObject_TypeCheck(h.ptr(), g_tensor_type); }
const Tensor& tensor_ref(py::handle h) {
  // The C++ value inside a pybind11 instance of tessera.Tensor (or a subclass), without the caster's lookups.
  auto* inst = reinterpret_cast<py::detail::instance*>(h.ptr());
  return *static_cast<const Tensor*>(inst->get_value_and_holder().value_ptr());
}

namespace {

namespace ops = tessera::ops;

// The other operand of a binary operator: a tensor or a Python number.
Tensor operand(py::handle h, const char* op) {
  if (is_tensor(h)) return h.cast<Tensor>();
  if (is_number(h)) return wrap_number(h);
  throw py::type_error(std::string("unsupported operand type for ") + op + ": 'Tensor' and '" + type_name(h) + "'");
}

// Python's arithmetic operators as the type's number slots: called by the
// interpreter directly, without the lookup of __add__ and pybind11's
// dispatcher a slot would otherwise go through (about a third of a
// 1-element add's time). Either side may be the tensor (a + 1, 1 + a).
template <Tensor (*F)(const Tensor&, const Tensor&)>
PyObject* number_slot(PyObject* a, PyObject* b) {
  try {
    const bool ta = is_tensor(a), tb = is_tensor(b);
    if ((!ta && !is_number(a)) || (!tb && !is_number(b))) Py_RETURN_NOTIMPLEMENTED;
    Tensor x = ta ? tensor_ref(a) : wrap_number(a);
    Tensor y = tb ? tensor_ref(b) : wrap_number(b);
    Tensor r;
    {
      py::gil_scoped_release nogil;
      r = F(x, y);
    }
    return tensor_object(std::move(r)).release().ptr();
  } catch (...) {
    set_python_error(std::current_exception());
    return nullptr;
  }
}
Tensor add2(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor sub2(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
Tensor mul2(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
Tensor div2(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
Tensor matmul2(const Tensor& a, const Tensor& b) { return ops::matmul(a, b); }

// Binary operators: NotImplemented for an operand that is neither a tensor nor
// a number, so Python tries the other side's reflected operator.
template <typename F>
py::object binary(const Tensor& a, py::handle b, F f) {
  if (!is_tensor(b) && !is_number(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  Tensor o = operand(b, "operator");
  Tensor r;
  {
    py::gil_scoped_release nogil;
    r = f(a, o);
  }
  return tensor_object(std::move(r));
}

std::string python_repr(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  if (t.is_meta()) {
    std::string s = "tensor(..., device='meta', size=(";
    for (int64_t i = 0; i < t.dim(); ++i) s += std::to_string(t.size(i)) + (t.dim() == 1 || i + 1 < t.dim() ? "," : "");
    s += ")";
    if (t.dtype() != DType::F32) s += std::string(", dtype=") + py::repr(dtype_object(t.dtype())).cast<std::string>();
    return s + ")";
  }
  std::string s;
  {
    py::gil_scoped_release nogil;
    s = t.str();
  }
  // The library prints dtypes by their short names (", dtype=f64"); Python shows the objects.
  std::string key = std::string(", dtype=") + dtype_name(t.dtype());
  if (auto at = s.find(key); at != std::string::npos)
    s.replace(at, key.size(), ", dtype=" + py::repr(dtype_object(t.dtype())).cast<std::string>());
  return s;
}

// ---- indexing ---------------------------------------------------------------

// One entry of an index expression, after the basic entries (ints, slices,
// None, ...) have been applied as views: the tensor indices that remain.
struct AdvancedIndex {
  int64_t dim;
  Tensor index;  // i64 indices or a bool mask
};

Tensor index_tensor_from(py::handle h) {
  if (is_tensor(h)) return h.cast<Tensor>();
  // A list of ints or bools: a tensor index, as in NumPy.
  py::list l = py::reinterpret_borrow<py::list>(h);
  bool all_bool = true;
  std::vector<int64_t> v;
  for (py::handle e : l) {
    if (!PyBool_Check(e.ptr())) all_bool = false;
    if (!PyLong_Check(e.ptr()) && !PyBool_Check(e.ptr()))
      throw py::type_error("a list index must hold ints or bools, got " + type_name(e));
    v.push_back(e.cast<int64_t>());
  }
  if (all_bool && !v.empty()) {
    return tensor(std::vector<uint8_t>(v.begin(), v.end())).to(DType::Bool);
  }
  return tensor(v);
}

// Applies ints, slices, None and Ellipsis as views of `t`; collects tensor
// and list indices into `adv` with the dim they apply to (in the result).
Tensor basic_index(const Tensor& t, py::handle index, std::vector<AdvancedIndex>& adv) {
  py::tuple items = py::isinstance<py::tuple>(index) ? py::reinterpret_borrow<py::tuple>(index) : py::make_tuple(index);
  // How many dims the entries consume (None adds one and consumes none; a bool mask consumes its dims).
  int64_t consumed = 0, ellipses = 0;
  for (py::handle it : items) {
    if (it.is_none()) continue;
    if (it.ptr() == Py_Ellipsis) { ++ellipses; continue; }
    if (is_tensor(it) && it.cast<Tensor>().dtype() == DType::Bool) consumed += std::max<int64_t>(it.cast<Tensor>().dim(), 1);
    else ++consumed;
  }
  if (ellipses > 1) throw py::index_error("an index can only have a single ellipsis ('...')");
  if (consumed > t.dim())
    throw py::index_error("too many indices for tensor of dimension " + std::to_string(t.dim()) + " (got " +
                          std::to_string(consumed) + ")");
  Tensor r = t;
  int64_t d = 0;  // the dim of r the next entry applies to
  for (py::handle it : items) {
    if (it.is_none()) {
      r = r.unsqueeze(d++);
    } else if (it.ptr() == Py_Ellipsis) {
      d += t.dim() - consumed;
    } else if (!is_tensor(it) && !PyBool_Check(it.ptr()) && index_value(it)) {
      int64_t i = *index_value(it);
      int64_t n = r.size(d);
      if (i < -n || i >= n)
        throw py::index_error("index " + std::to_string(i) + " is out of bounds for dimension " + std::to_string(d) +
                              " with size " + std::to_string(n));
      r = r.select(d, i < 0 ? i + n : i);
    } else if (py::isinstance<py::slice>(it)) {
      Py_ssize_t start, stop, step, length;
      if (PySlice_GetIndicesEx(it.ptr(), r.size(d), &start, &stop, &step, &length) != 0) throw py::error_already_set();
      if (step <= 0) throw py::value_error("step must be greater than zero, got " + std::to_string(step));
      r = r.slice(d, start, length == 0 ? start : stop, step);
      ++d;
    } else if (is_tensor(it) || py::isinstance<py::list>(it)) {
      Tensor idx = index_tensor_from(it);
      adv.push_back({d, idx});
      d += idx.dtype() == DType::Bool ? std::max<int64_t>(idx.dim(), 1) : 1;
    } else if (PyBool_Check(it.ptr())) {
      throw py::index_error("a bool index is not supported; use a bool tensor");
    } else {
      throw py::index_error("only integers, slices (`:`), ellipsis (`...`), None and integer or boolean tensors are "
                            "valid indices, got " + type_name(it));
    }
  }
  return r;
}

void check_integer_index(const Tensor& i) {
  TS_CHECK(i.dtype() == DType::I64 || i.dtype() == DType::I32 || i.dtype() == DType::U8 || i.dtype() == DType::I8,
           "tensors used as indices must be integer or bool tensors, got ", dtype_name(i.dtype()));
}

// Note [Several tensor indices]
// x[i, j] with several tensor (or list, or mask) indices follows NumPy's
// advanced indexing: a mask over d dims stands for d integer indices (its
// nonzero coordinates), the integer indices broadcast to one shape B, and
// the result holds x[i[b], j[b], ...] at each b of B, followed by the dims no
// tensor indexed. B takes the place of the indexed dims when they are
// adjacent (x[:, i, j]), else it comes first (x[i, :, j]). It is computed by
// ops, so autograd flows: the indexed dims are moved to the front and
// flattened, and one index_select reads the row-major positions
// i * size(j) + j.
Tensor gather_advanced(const Tensor& r, const std::vector<AdvancedIndex>& adv) {
  std::vector<std::pair<int64_t, Tensor>> idx;  // (dim of r, i64 indices)
  for (const AdvancedIndex& a : adv) {
    if (a.index.dtype() == DType::Bool) {
      const Tensor& mask = a.index;
      TS_CHECK(mask.dim() > 0, "a 0-dim boolean index cannot be combined with other tensor indices");
      TS_CHECK(a.dim + mask.dim() <= r.dim(), "the boolean mask has ", mask.dim(), " dims; the tensor has only ",
               r.dim() - a.dim, " left to index");
      for (int64_t i = 0; i < mask.dim(); ++i)
        TS_CHECK(mask.size(i) == r.size(a.dim + i), "the shape of the mask ", shape_str(mask.shape()), " at index ", i,
                 " does not match the shape of the indexed tensor ", shape_str(r.shape()));
      Tensor nz = ops::nonzero(mask);
      for (int64_t c = 0; c < mask.dim(); ++c) idx.emplace_back(a.dim + c, nz.select(1, c));
    } else {
      check_integer_index(a.index);
      idx.emplace_back(a.dim, a.index.to(DType::I64));
    }
  }
  Shape b;  // the indices' common shape
  for (size_t k = 0; k < idx.size(); ++k) {
    auto& [d, i] = idx[k];
    const int64_t n = r.size(d);
    if (i.numel() > 0) {
      const int64_t lo = i.min().item<int64_t>(), hi = i.max().item<int64_t>();
      if (lo < -n || hi >= n)  // a C++ exception until translated (with the GIL), so it may be thrown here
        throw py::index_error("index " + std::to_string(hi >= n ? hi : lo) + " is out of bounds for dimension " +
                              std::to_string(d) + " with size " + std::to_string(n));
    }
    i = ops::remainder(i, Scalar(n));  // negative indices count from the end
    b = k == 0 ? i.shape() : broadcast_shapes(b, i.shape(), "indexing (the tensor indices' shapes)");
  }
  Tensor linear;
  int64_t stride = 1;  // ends as the number of positions the indexed dims hold
  for (size_t k = idx.size(); k-- > 0;) {
    Tensor term = ops::mul(idx[k].second.expand(b), Scalar(stride));
    linear = linear.defined() ? ops::add(linear, term) : term;
    stride *= r.size(idx[k].first);
  }
  std::vector<int64_t> perm;
  std::vector<bool> indexed(r.dim(), false);
  for (auto& [d, i] : idx) perm.push_back(d), indexed[d] = true;
  Shape rest;
  for (int64_t d = 0; d < r.dim(); ++d)
    if (!indexed[d]) perm.push_back(d), rest.push_back(r.size(d));
  Shape flat_shape{stride};
  for (int64_t v : rest) flat_shape.push_back(v);
  Tensor out = ops::index_select(r.permute(perm).reshape(flat_shape), 0, linear.reshape({-1}));
  Shape out_shape = b;
  for (int64_t v : rest) out_shape.push_back(v);
  out = out.reshape(out_shape);
  bool adjacent = true;
  for (size_t k = 1; k < idx.size(); ++k) adjacent = adjacent && idx[k].first == idx[k - 1].first + 1;
  const int64_t first = idx.front().first, nb = static_cast<int64_t>(b.size());
  if (!adjacent || first == 0) return out;
  std::vector<int64_t> back;  // the dims before the indexed ones, then B, then the others
  for (int64_t d = 0; d < first; ++d) back.push_back(nb + d);
  for (int64_t d = 0; d < nb; ++d) back.push_back(d);
  for (int64_t d = nb + first; d < out.dim(); ++d) back.push_back(d);
  return out.permute(back);
}

// r indexed by the tensor indices basic_index left (one or more).
Tensor gather_or_select(const Tensor& r, const std::vector<AdvancedIndex>& adv) {
  if (adv.size() > 1) return gather_advanced(r, adv);
  const AdvancedIndex& a = adv[0];
  if (a.index.dtype() == DType::Bool) {
    // A mask over dims [dim, dim + mask.dim()): the selected entries, flattened into one dim.
    const Tensor& mask = a.index;
    int64_t md = std::max<int64_t>(mask.dim(), 1);
    TS_CHECK(a.dim + md <= r.dim(), "the boolean mask has ", md, " dims; the tensor has only ", r.dim() - a.dim, " left to index");
    for (int64_t i = 0; i < mask.dim(); ++i)
      TS_CHECK(mask.size(i) == r.size(a.dim + i), "the shape of the mask ", shape_str(mask.shape()), " at index ", i,
               " does not match the shape of the indexed tensor ", shape_str(r.shape()));
    Tensor nz = ops::nonzero(mask.dim() == 0 ? mask.unsqueeze(0) : mask);  // [k, md] coordinates
    Tensor flat_r = mask.dim() == 0 ? r.unsqueeze(a.dim) : r.flatten(a.dim, a.dim + md - 1);  // the mask's dims as one
    // Row-major positions of the coordinates within the mask's dims.
    std::vector<int64_t> strides(md, 1);
    for (int64_t i = md - 2; i >= 0; --i) strides[i] = strides[i + 1] * (mask.dim() == 0 ? 1 : mask.size(i + 1));
    Tensor linear = ops::sum(ops::mul(nz, tensor(strides)), {1});
    return ops::index_select(flat_r, a.dim, linear);
  }
  check_integer_index(a.index);
  Tensor flat = ops::index_select(r, a.dim, a.index.reshape({-1}));
  if (a.index.dim() == 1) return flat;
  Shape s(r.shape().begin(), r.shape().begin() + a.dim);
  for (int64_t v : a.index.shape()) s.push_back(v);
  for (int64_t i = a.dim + 1; i < r.dim(); ++i) s.push_back(r.size(i));
  return flat.reshape(s);
}

Tensor getitem(const Tensor& t, py::handle index) {
  std::vector<AdvancedIndex> adv;
  Tensor r = basic_index(t, index, adv);
  if (adv.empty()) return r;
  py::gil_scoped_release nogil;
  return gather_or_select(r, adv);
}

void setitem(Tensor& t, py::handle index, py::handle value) {
  std::vector<AdvancedIndex> adv;
  Tensor view = basic_index(t, index, adv);
  bool number = is_number(value);
  Tensor v = number ? Tensor() : (is_tensor(value) ? value.cast<Tensor>() : Tensor());
  if (!number && !v.defined()) throw py::type_error("can only assign a number or a Tensor, got " + type_name(value));
  Scalar s = number ? to_scalar(value) : Scalar();
  py::gil_scoped_release nogil;
  if (adv.empty()) {
    if (number) view.fill_(s);
    else view.copy_(v.to(view.dtype()).expand(view.shape()));
    return;
  }
  AdvancedIndex& a = adv[0];
  if (adv.size() == 1 && (number || v.numel() == 1)) {  // one index, one value: a fill
    if (a.index.dtype() == DType::Bool) {
      Tensor mask = a.index;
      for (int64_t i = 0; i < a.dim; ++i) mask = mask.unsqueeze(0);
      view.masked_fill_(mask, number ? s : v.item());
      return;
    }
    check_integer_index(a.index);
    view.index_fill_(a.dim, a.index.reshape({-1}).to(DType::I64), number ? s : v.item());
    return;
  }
  // Any other (several indices, or a tensor of values broadcast to what the
  // index selects): indexing the positions of `view` gives the flat positions
  // it selects, in the selection's shape; the values are scattered there.
  Tensor where = gather_or_select(arange(Scalar(view.numel()), DType::I64).reshape(view.shape()), adv);
  Tensor values = number ? full(where.shape(), s, view.dtype()) : v.to(view.dtype()).expand(where.shape());
  Tensor updated = ops::scatter(view.contiguous().reshape({-1}), 0, where.reshape({-1}), values.contiguous().reshape({-1}));
  view.copy_(updated.reshape(view.shape()));
}

py::tuple shape_tuple(const Shape& s) {
  py::tuple r(s.size());
  for (size_t i = 0; i < s.size(); ++i) r[i] = py::int_(s[i]);
  return r;
}

int64_t wrap_dim(int64_t d, int64_t n) {
  int64_t m = std::max<int64_t>(n, 1);
  if (d < -m || d >= m)
    throw py::index_error("dimension out of range (expected to be in range of [" + std::to_string(-m) + ", " +
                          std::to_string(m - 1) + "], but got " + std::to_string(d) + ")");
  return d < 0 ? d + m : d;
}

py::object tolist(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  if (c.dim() == 0) return scalar_object(c.item());
  py::list l;
  for (int64_t i = 0; i < c.size(0); ++i) l.append(tolist(c.select(0, i)));
  return l;
}

Tensor to_any(const Tensor& t, py::args args, py::kwargs kwargs) {
  // t.to(dtype), t.to(device), t.to(device, dtype), t.to(other), with keywords dtype= and device=.
  std::optional<DType> dtype;
  std::optional<Device> device;
  auto take = [&](py::handle h) {
    if (h.is_none()) return;
    if (is_dtype(h)) dtype = to_dtype(h);
    else if (is_tensor(h)) { Tensor o = h.cast<Tensor>(); dtype = o.dtype(); device = o.device(); }
    else device = to_device(h);
  };
  for (py::handle a : args) take(a);
  for (auto [k, v] : kwargs) {
    std::string key = py::str(k);
    if (key == "dtype") { if (!v.is_none()) dtype = to_dtype(v); }
    else if (key == "device") { if (!v.is_none()) device = to_device(v); }
    else if (key == "non_blocking" || key == "copy") {}
    else throw py::type_error("to() got an unexpected keyword argument '" + key + "'");
  }
  py::gil_scoped_release nogil;
  Tensor r = t;
  if (device && *device != r.device()) r = r.to(*device);
  if (dtype && *dtype != r.dtype()) r = r.to(*dtype);
  return r;
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<Tensor> cls(m, "Tensor", py::dynamic_attr(), py::buffer_protocol(), R"(A strided n-dimensional array with autograd.

Made by tessera.tensor, the factories (zeros, ones, randn, ...), tessera.from_numpy
or tessera.from_dlpack, and returned by every op.)");
  g_tensor_type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  cls.def(py::init([](const Tensor& t) { return t; }), py::arg("data"),
          "A tensor sharing `data`'s storage and autograd history (the base of Parameter).")
      .def_property_readonly("shape", [](const Tensor& t) { return shape_tuple(t.shape()); })
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_object(t.dtype()); })
      .def_property_readonly("device", [](const Tensor& t) { return PyDevice{t.device()}; })
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("is_meta", &Tensor::is_meta)
      .def_property_readonly("is_cuda", [](const Tensor& t) { return t.device().type == DeviceType::CUDA; })
      .def_property_readonly("T", [](const Tensor& t) {
        Shape p;
        for (int64_t i = t.dim() - 1; i >= 0; --i) p.push_back(i);
        return t.permute(p);
      })
      .def_property_readonly("mT", &Tensor::mT)
      .def_property("requires_grad", &Tensor::requires_grad, [](Tensor& t, bool r) { t.requires_grad_(r); })
      .def_property(
          "grad", [](const Tensor& t) -> py::object {
            Tensor g = t.grad();
            return g.defined() ? tensor_object(g) : py::none();
          },
          [](Tensor& t, py::handle g) { t.set_grad(g.is_none() ? Tensor() : g.cast<Tensor>()); })
      .def_property(
          "data", [](const Tensor& t) { return t.detach(); }, [](Tensor& t, const Tensor& src) { t.set_data(src); })
      .def_property_readonly("grad_fn", [](const Tensor& t) -> py::object {
        const auto& fn = t.grad_fn();
        if (!fn) return py::none();
        return py::str(fn->name());
      })
      .def("size", [](const Tensor& t, py::object dim) -> py::object {
             if (dim.is_none()) return shape_tuple(t.shape());
             return py::int_(t.size(wrap_dim(dim.cast<int64_t>(), t.dim())));
           }, py::arg("dim") = py::none())
      .def("stride", [](const Tensor& t, py::object dim) -> py::object {
             if (dim.is_none()) return shape_tuple(t.strides());
             return py::int_(t.stride(wrap_dim(dim.cast<int64_t>(), t.dim())));
           }, py::arg("dim") = py::none())
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nelement", &Tensor::numel)
      .def("element_size", &Tensor::itemsize)
      .def("storage_offset", &Tensor::offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", &Tensor::is_floating_point)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.is_meta() ? nullptr : t.raw_data()); })
      .def("item", [](const Tensor& t) {
        TS_CHECK(t.numel() == 1, "a Tensor with ", t.numel(), " elements cannot be converted to a Python number");
        return scalar_object(t.item());
      })
      .def("tolist", [](const Tensor& t) { return tolist(t); })
      .def("__len__", [](const Tensor& t) {
        if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
        return t.size(0);
      })
      .def("__iter__", [](const Tensor& t) {
        if (t.dim() == 0) throw py::type_error("iteration over a 0-d tensor");
        py::list l;
        for (int64_t i = 0; i < t.size(0); ++i) l.append(tensor_object(t.select(0, i)));
        return py::iter(l);
      })
      .def("__bool__", [](const Tensor& t) {
        TS_CHECK(t.numel() == 1, "the truth value of a Tensor with ", t.numel(), " elements is ambiguous");
        return t.item().to<double>() != 0;
      })
      .def("__float__", [](const Tensor& t) {
        TS_CHECK(t.numel() == 1, "only one-element tensors can be converted to Python scalars");
        return t.item().to<double>();
      })
      .def("__int__", [](const Tensor& t) {
        TS_CHECK(t.numel() == 1, "only one-element tensors can be converted to Python scalars");
        return t.item().to<int64_t>();
      })
      .def("__index__", [](const Tensor& t) {
        TS_CHECK(t.numel() == 1 && !t.is_floating_point(), "only integer tensors of a single element can be converted to an index");
        return t.item().to<int64_t>();
      })
      .def("__hash__", [](py::handle self) { return py::hash(py::int_(reinterpret_cast<uintptr_t>(self.ptr()))); })
      .def("__repr__", &python_repr)
      .def("__str__", &python_repr)
      .def("__getitem__", &getitem)
      .def("__setitem__", &setitem)
      .def("__copy__", [](const Tensor& t) { return t; })
      .def("__deepcopy__", [](const Tensor& t, py::handle) {
        py::gil_scoped_release nogil;
        Tensor c = t.detach().clone();
        if (t.requires_grad() && t.is_leaf()) c.requires_grad_(true);
        return c;
      }, py::arg("memo"))
      // autograd
      .def("backward", [](const Tensor& t, py::object gradient, bool retain_graph, bool create_graph) {
             Tensor g = gradient.is_none() ? Tensor() : (is_tensor(gradient) ? gradient.cast<Tensor>() : wrap_number(gradient));
             py::gil_scoped_release nogil;
             t.backward(g, retain_graph, create_graph);
           }, py::arg("gradient") = py::none(), py::arg("retain_graph") = false, py::arg("create_graph") = false,
           "Computes the gradient of this tensor with respect to the leaves that require grad (into their .grad).")
      .def("requires_grad_", [](Tensor& t, bool r) { t.requires_grad_(r); return t; }, py::arg("requires_grad") = true)
      .def("detach_", [](Tensor& t) { t.detach_(); return t; })
      .def("retain_grad", &Tensor::retain_grad)
      .def_property_readonly("retains_grad", &Tensor::retains_grad)
      .def("register_hook", [](Tensor& t, py::function fn) {
             // The hook runs in the backward pass, with the GIL taken back; None keeps the gradient.
             auto hook = hold(std::move(fn));
             std::function<Tensor(const Tensor&)> h = [hook](const Tensor& g) -> Tensor {
               py::gil_scoped_acquire gil;
               py::object r = (*hook)(g);
               return r.is_none() ? g : r.cast<Tensor>();
             };
             return t.register_hook(std::move(h));
           }, py::arg("hook"))
      .def("register_post_accumulate_grad_hook", [](Tensor& t, py::function fn) {
             // Runs after backward has summed a gradient into this leaf's .grad, with the GIL taken back.
             auto hook = hold(std::move(fn));
             return t.register_post_accumulate_grad_hook([hook](const Tensor& leaf) {
               py::gil_scoped_acquire gil;
               (*hook)(leaf);
             });
           }, py::arg("hook"))
      // in place
      .def("zero_", [](Tensor& t) { py::gil_scoped_release nogil; t.zero_(); return t; })
      .def("fill_", [](Tensor& t, py::handle v) {
        Scalar s = is_tensor(v) ? v.cast<Tensor>().item() : to_scalar(v);
        py::gil_scoped_release nogil;
        t.fill_(s);
        return t;
      }, py::arg("value"))
      .def("copy_", [](Tensor& t, const Tensor& src) { py::gil_scoped_release nogil; t.copy_(src); return t; }, py::arg("src"))
      .def("add_", [](Tensor& t, py::handle o, py::handle alpha) {
        Scalar a = alpha.is_none() ? Scalar(1) : to_scalar(alpha);
        Tensor x = operand(o, "add_");
        py::gil_scoped_release nogil;
        t.add_(x, a);
        return t;
      }, py::arg("other"), py::kw_only(), py::arg("alpha") = py::none())
      .def("sub_", [](Tensor& t, py::handle o) {
        if (is_number(o)) { Scalar s = to_scalar(o); py::gil_scoped_release nogil; t.sub_(s); return t; }
        Tensor x = o.cast<Tensor>(); py::gil_scoped_release nogil; t.sub_(x); return t;
      }, py::arg("other"))
      .def("mul_", [](Tensor& t, py::handle o) {
        if (is_number(o)) { Scalar s = to_scalar(o); py::gil_scoped_release nogil; t.mul_(s); return t; }
        Tensor x = o.cast<Tensor>(); py::gil_scoped_release nogil; t.mul_(x); return t;
      }, py::arg("other"))
      .def("div_", [](Tensor& t, py::handle o) {
        if (is_number(o)) { Scalar s = to_scalar(o); py::gil_scoped_release nogil; t.div_(s); return t; }
        Tensor x = o.cast<Tensor>(); py::gil_scoped_release nogil; t.div_(x); return t;
      }, py::arg("other"))
      .def("clamp_", [](Tensor& t, py::handle lo, py::handle hi) {
        std::optional<Scalar> l, h;
        if (!lo.is_none()) l = to_scalar(lo);
        if (!hi.is_none()) h = to_scalar(hi);
        py::gil_scoped_release nogil;
        t.clamp_(l, h);
        return t;
      }, py::arg("min") = py::none(), py::arg("max") = py::none())
      .def("masked_fill_", [](Tensor& t, const Tensor& mask, py::handle v) {
        Scalar s = is_tensor(v) ? v.cast<Tensor>().item() : to_scalar(v);
        py::gil_scoped_release nogil;
        t.masked_fill_(mask, s);
        return t;
      }, py::arg("mask"), py::arg("value"))
      // conversions
      .def("to", &to_any)
      .def("cpu", [](const Tensor& t) { return t.to(Device::cpu()); })
      .def("float", [](const Tensor& t) { return t.to(DType::F32); })
      .def("double", [](const Tensor& t) { return t.to(DType::F64); })
      .def("half", [](const Tensor& t) { return t.to(DType::F16); })
      .def("bfloat16", [](const Tensor& t) { return t.to(DType::BF16); })
      .def("long", [](const Tensor& t) { return t.to(DType::I64); })
      .def("int", [](const Tensor& t) { return t.to(DType::I32); })
      .def("bool", [](const Tensor& t) { return t.to(DType::Bool); })
      .def("byte", [](const Tensor& t) { return t.to(DType::U8); })
      .def("type_as", [](const Tensor& t, const Tensor& o) { return t.to(o.dtype()); }, py::arg("other"))
      .def("view_as", [](const Tensor& t, const Tensor& o) { return t.view(o.shape()); }, py::arg("other"))
      .def("reshape_as", [](const Tensor& t, const Tensor& o) { return t.reshape(o.shape()); }, py::arg("other"))
      .def("expand_as", [](const Tensor& t, const Tensor& o) { return t.expand(o.shape()); }, py::arg("other"))
      .def("t", &Tensor::t)
      .def("narrow", &Tensor::narrow, py::arg("dim"), py::arg("start"), py::arg("length"))
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("unflatten", [](const Tensor& t, int64_t dim, std::vector<int64_t> sizes) { return t.unflatten(dim, sizes); },
           py::arg("dim"), py::arg("sizes"));

  // Python's operators. The GIL is released around each (Note [The GIL]).
  auto def_binary = [&](const char* name, auto f) {
    cls.def(name, [f](const Tensor& a, py::handle b) { return binary(a, b, f); }, py::is_operator());
  };
  auto def_reflected = [&](const char* name, auto f) {
    cls.def(name, [f](const Tensor& a, py::handle b) {
      return binary(a, b, [f](const Tensor& x, const Tensor& y) { return f(y, x); });
    }, py::is_operator());
  };
  auto def_inplace = [&](const char* name, auto f) {
    cls.def(name, [f, name](Tensor& a, py::handle b) -> py::object {
      if (!is_tensor(b) && !is_number(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
      Tensor o = operand(b, name);
      {
        py::gil_scoped_release nogil;
        f(a, o);
      }
      return tensor_object(a);
    }, py::is_operator());
  };
  using T = const Tensor&;
  def_binary("__add__", [](T a, T b) { return ops::add(a, b); });
  def_reflected("__radd__", [](T a, T b) { return ops::add(a, b); });
  def_binary("__sub__", [](T a, T b) { return ops::sub(a, b); });
  def_reflected("__rsub__", [](T a, T b) { return ops::sub(a, b); });
  def_binary("__mul__", [](T a, T b) { return ops::mul(a, b); });
  def_reflected("__rmul__", [](T a, T b) { return ops::mul(a, b); });
  def_binary("__truediv__", [](T a, T b) { return ops::div(a, b); });
  def_reflected("__rtruediv__", [](T a, T b) { return ops::div(a, b); });
  def_binary("__floordiv__", [](T a, T b) { return ops::floor_divide(a, b); });
  def_reflected("__rfloordiv__", [](T a, T b) { return ops::floor_divide(a, b); });
  def_binary("__mod__", [](T a, T b) { return ops::remainder(a, b); });
  def_reflected("__rmod__", [](T a, T b) { return ops::remainder(a, b); });
  def_binary("__pow__", [](T a, T b) { return ops::pow(a, b); });
  def_reflected("__rpow__", [](T a, T b) { return ops::pow(a, b); });
  def_binary("__matmul__", [](T a, T b) { return ops::matmul(a, b); });
  def_reflected("__rmatmul__", [](T a, T b) { return ops::matmul(a, b); });
  def_binary("__eq__", [](T a, T b) { return ops::eq(a, b); });
  def_binary("__ne__", [](T a, T b) { return ops::ne(a, b); });
  def_binary("__lt__", [](T a, T b) { return ops::lt(a, b); });
  def_binary("__le__", [](T a, T b) { return ops::le(a, b); });
  def_binary("__gt__", [](T a, T b) { return ops::gt(a, b); });
  def_binary("__ge__", [](T a, T b) { return ops::ge(a, b); });
  def_binary("__and__", [](T a, T b) { return ops::logical_and(a, b); });
  def_binary("__or__", [](T a, T b) { return ops::logical_or(a, b); });
  def_binary("__xor__", [](T a, T b) { return ops::logical_xor(a, b); });
  def_inplace("__iadd__", [](Tensor& a, T b) { a.add_(b); });
  def_inplace("__isub__", [](Tensor& a, T b) { a.sub_(b); });
  def_inplace("__imul__", [](Tensor& a, T b) { a.mul_(b); });
  def_inplace("__itruediv__", [](Tensor& a, T b) { a.div_(b); });
  cls.def("__neg__", [](T a) { py::gil_scoped_release nogil; return ops::neg(a); });
  cls.def("__pos__", [](T a) { return a; });
  cls.def("__abs__", [](T a) { py::gil_scoped_release nogil; return ops::abs(a); });
  cls.def("__invert__", [](T a) { py::gil_scoped_release nogil; return ops::logical_not(a); });

  // The slots last: assigning an operator above would have reset them.
  auto* heap = reinterpret_cast<PyHeapTypeObject*>(cls.ptr());
  heap->as_number.nb_add = &number_slot<add2>;
  heap->as_number.nb_subtract = &number_slot<sub2>;
  heap->as_number.nb_multiply = &number_slot<mul2>;
  heap->as_number.nb_true_divide = &number_slot<div2>;
  heap->as_number.nb_matrix_multiply = &number_slot<matmul2>;
  PyType_Modified(reinterpret_cast<PyTypeObject*>(cls.ptr()));

  m.def("is_tensor", [](py::handle h) { return is_tensor(h); });
  m.def("numel", [](const Tensor& t) { return t.numel(); });
}

}  // namespace tessera::python
