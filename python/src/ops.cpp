// Every op of src/ops/ops.def, bound from its row of op_signatures.def by one
// generic caller: no op is written out by hand here.
//
// Note [Binding the op table]
// At import each row's parameter text is parsed once into a Signature. A call
// binds Python's arguments to it (positional, then keywords, then defaults),
// converts each to what the op's invoker reads — a tensor input in ops.def's
// order or an attribute of the same name — and runs ops::invoke with the GIL
// released. A name bound by several rows (torch.max) tries them in order, first
// strictly (a tensor parameter takes only tensors), then letting Python
// numbers stand for tensors, as PyTorch's argument parser does; when none
// binds, the TypeError lists the signatures. Errors inside the op are the
// library's own (tessera.Error).
#include <algorithm>
#include <pybind11/stl.h>

#include <array>
#include <cctype>
#include <deque>
#include <map>
#include <unordered_map>

#include "bindings.h"
#include "tessera/core/error.h"
#include "tessera/ops/capture.h"
#include "tessera/ops/op_table.h"

namespace tessera::python {

namespace {

namespace ops = tessera::ops;

constexpr size_t kMaxParams = 32;  // parameters of one signature (checked when a row is parsed)

struct SigRow {
  const char* op;
  const char* where;
  const char* params;
};
constexpr SigRow kRows[] = {
#define SIG(op, where, params) {#op, where, params},
#include "op_signatures.def"
#undef SIG
};

enum class Kind { Tensor, TensorList, TensorOrScalar, Int, IntList, Float, FloatList, Bool, Str, Scalar, ScalarType };

struct Param {
  std::string name, type_text;
  std::string attr;  // the attribute a value is stored as (the name, or what follows '/': "src/value")
  Kind kind;
  bool optional = false;  // "?": None is a value (the attribute left out, the tensor undefined)
  int repeat = 0;         // int[N]: an int stands for N copies
  bool keyword_only = false;
  bool has_default = false;
  py::object default_value;
  int input = -1;  // the op's tensor input this fills (Tensor kinds), in ops.def order
};

struct Signature {
  ops::OpId op;
  std::string name, text;
  std::vector<Param> params;
  int n_inputs = 0;        // the op's tensor inputs (without a variadic list)
  bool variadic = false;   // the op's inputs are one list
  bool list_output = false;
  int n_outputs = 1;
  PyTypeObject* named = nullptr;  // the outputs' named tuple (max, sort, topk: values and indices)
};

// "x index src?" -> {"x", "index", "src"}
std::vector<std::string> input_names(std::string_view s) {
  std::vector<std::string> r;
  for (size_t i = 0; i < s.size();) {
    while (i < s.size() && s[i] == ' ') ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ') ++j;
    if (j > i) {
      std::string n(s.substr(i, j - i));
      while (!n.empty() && (n.back() == '?' || n.back() == '*')) n.pop_back();
      r.push_back(n);
    }
    i = j;
  }
  return r;
}

std::string trim(std::string s) {
  size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Splits "a, b=[1, 2], c" at the commas outside brackets and quotes.
std::vector<std::string> split_params(const std::string& s) {
  std::vector<std::string> r;
  int depth = 0;
  char quote = 0;
  std::string cur;
  for (char c : s) {
    if (quote) { if (c == quote) quote = 0; }
    else if (c == '\'' || c == '"') quote = c;
    else if (c == '[' || c == '(') ++depth;
    else if (c == ']' || c == ')') --depth;
    else if (c == ',' && depth == 0) { r.push_back(trim(cur)); cur.clear(); continue; }
    cur += c;
  }
  if (!trim(cur).empty()) r.push_back(trim(cur));
  return r;
}

// Note [Named results]: as torch.return_types, an op whose outputs are values
// and indices returns a named tuple (structseq) of that op's name, so
// `torch.max(x, 1).indices` and `values, indices = x.sort()` both work; the
// types live in tessera.return_types.
PyTypeObject* return_type(const std::string& op, const std::vector<std::string>& fields, py::module_& types) {
  if (py::hasattr(types, op.c_str())) return reinterpret_cast<PyTypeObject*>(types.attr(op.c_str()).ptr());
  static std::deque<std::string>* texts = new std::deque<std::string>();  // structseq keeps the char pointers
  std::vector<PyStructSequence_Field>* fs = new std::vector<PyStructSequence_Field>();
  for (const std::string& f : fields) fs->push_back({texts->emplace_back(f).c_str(), nullptr});
  fs->push_back({nullptr, nullptr});
  auto* desc = new PyStructSequence_Desc{texts->emplace_back("tessera.return_types." + op).c_str(), nullptr, fs->data(),
                                         static_cast<int>(fields.size())};
  PyTypeObject* t = PyStructSequence_NewType(desc);
  if (!t) throw py::error_already_set();
  types.attr(op.c_str()) = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(t));
  return t;
}

[[noreturn]] void bad_row(const SigRow& row, const std::string& why) {
  throw std::runtime_error(std::string("op_signatures.def: the row of ") + row.op + ": " + why);
}

Signature parse(const SigRow& row, ops::OpId id) {
  const ops::OpEntry& e = ops::op_entry(id);
  Signature sig;
  sig.op = id;
  sig.name = row.op;
  sig.text = std::string(row.op) + "(" + row.params + ")";
  std::vector<std::string> inputs = input_names(e.inputs);
  sig.variadic = e.in.variadic;
  sig.n_inputs = sig.variadic ? 0 : e.in.max;
  sig.list_output = e.out.variadic;
  sig.n_outputs = e.out.max;
  py::object literal_eval = py::module_::import("ast").attr("literal_eval");
  bool keyword_only = false;
  for (const std::string& text : split_params(row.params)) {
    if (text == "*") { keyword_only = true; continue; }
    Param p;
    p.keyword_only = keyword_only;
    std::string decl = text;
    if (auto eq = text.find('='); eq != std::string::npos) {
      decl = trim(text.substr(0, eq));
      p.has_default = true;
      std::string lit = trim(text.substr(eq + 1));
      // A dtype by its Python name (float32, int64); any other literal as Python reads it.
      bool word = !lit.empty() && std::isalpha(static_cast<unsigned char>(lit[0])) && lit != "None" && lit != "True" && lit != "False";
      p.default_value = word ? dtype_object(to_dtype(py::str(lit))) : literal_eval(lit);
    }
    auto sp = decl.rfind(' ');
    if (sp == std::string::npos) bad_row(row, "parameter '" + text + "' has no type");
    p.type_text = decl.substr(0, sp);
    p.name = decl.substr(sp + 1);
    p.attr = p.name;
    if (auto slash = p.name.find('/'); slash != std::string::npos) {
      p.attr = p.name.substr(slash + 1);
      p.name = p.name.substr(0, slash);
    }
    std::string t = p.type_text;
    if (!t.empty() && t.back() == '?') { p.optional = true; t.pop_back(); }
    if (t == "Tensor") p.kind = Kind::Tensor;
    else if (t == "Tensor*") p.kind = Kind::TensorList;
    else if (t == "Tensor|Scalar") p.kind = Kind::TensorOrScalar;
    else if (t == "int") p.kind = Kind::Int;
    else if (t == "int[]") p.kind = Kind::IntList;
    else if (t.rfind("int[", 0) == 0) { p.kind = Kind::IntList; p.repeat = std::stoi(t.substr(4)); }
    else if (t == "float") p.kind = Kind::Float;
    else if (t == "float[]") p.kind = Kind::FloatList;
    else if (t == "bool") p.kind = Kind::Bool;
    else if (t == "str") p.kind = Kind::Str;
    else if (t == "Scalar") p.kind = Kind::Scalar;
    else if (t == "ScalarType") p.kind = Kind::ScalarType;
    else bad_row(row, "unknown type '" + p.type_text + "'");
    if (p.kind == Kind::Tensor || p.kind == Kind::TensorOrScalar) {
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i] == p.name) p.input = static_cast<int>(i);
      if (p.input < 0 && !(p.kind == Kind::TensorOrScalar)) bad_row(row, "'" + p.name + "' is not a tensor input of the op in ops.def");
    }
    if (p.kind == Kind::TensorList && !sig.variadic) bad_row(row, "'" + p.name + "' is a list but the op's inputs are not");
    sig.params.push_back(std::move(p));
  }
  if (sig.params.size() > kMaxParams) bad_row(row, "more than " + std::to_string(kMaxParams) + " parameters");
  return sig;
}

// Why an overload did not take the call (for the TypeError), or empty.
struct Bound {
  ops::Attrs attrs;
  TensorList inputs;
  std::string error;
  bool scalar_form = false;  // a Tensor|Scalar parameter was given a number
};

bool as_int(py::handle h, int64_t& out) {
  if (PyBool_Check(h.ptr())) return false;
  if (!is_tensor(h)) {
    auto i = index_value(h);
    if (i) out = *i;
    return i.has_value();
  }
  if (is_tensor(h)) {
    Tensor t = h.cast<Tensor>();
    if (t.numel() == 1 && is_integral(t.dtype(), false)) { out = t.item().to<int64_t>(); return true; }
  }
  return false;
}

// Converts one argument; false (with `why`) when its type does not fit.
bool convert(const Param& p, py::handle v, bool strict, Bound& b, std::string& why) {
  auto mismatch = [&](const char* expected) {
    why = "argument '" + p.name + "' must be " + expected + ", not " + type_name(v);
    return false;
  };
  if (v.is_none()) {
    if (p.kind == Kind::Tensor || p.kind == Kind::TensorOrScalar) {
      if (!p.optional) return mismatch("a Tensor");
      return true;  // the input stays undefined; the attribute absent reads as none
    }
    if (p.optional) { b.attrs.items().emplace_back(p.attr, ops::AttrValue{}); return true; }
    if (p.has_default && !p.default_value.is_none()) return convert(p, p.default_value, strict, b, why);
    return mismatch(p.type_text.c_str());
  }
  switch (p.kind) {
    case Kind::Tensor:
      if (is_tensor(v)) { b.inputs[p.input] = tensor_ref(v); return true; }
      if (!strict && is_number(v)) { b.inputs[p.input] = wrap_number(v); return true; }
      return mismatch("a Tensor");
    case Kind::TensorOrScalar:
      if (is_tensor(v) && p.input >= 0) { b.inputs[p.input] = tensor_ref(v); return true; }
      if (is_number(v)) {
        b.attrs.items().emplace_back(p.attr, to_scalar(v));
        b.scalar_form = true;
        return true;
      }
      return mismatch("a Tensor or a number");
    case Kind::TensorList: {
      if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) return mismatch("a list of Tensors");
      for (py::handle e : v) {
        if (!is_tensor(e)) return mismatch("a list of Tensors");
        b.inputs.push_back(tensor_ref(e));
      }
      return true;
    }
    case Kind::Int: {
      int64_t i;
      if (!as_int(v, i)) return mismatch("an int");
      b.attrs.items().emplace_back(p.attr, i);
      return true;
    }
    case Kind::IntList: {
      std::vector<int64_t> l;
      int64_t i;
      if (as_int(v, i) && !is_tensor(v)) {
        l.assign(p.repeat > 0 ? p.repeat : 1, i);
      } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
        for (py::handle e : v) {
          if (!as_int(e, i)) return mismatch("an int or a sequence of ints");
          l.push_back(i);
        }
      } else {
        return mismatch("an int or a sequence of ints");
      }
      b.attrs.items().emplace_back(p.attr, std::move(l));
      return true;
    }
    case Kind::Float:
      if (!is_number(v) || PyBool_Check(v.ptr())) return mismatch("a float");
      b.attrs.items().emplace_back(p.attr, to_scalar(v).to<double>());
      return true;
    case Kind::FloatList: {
      std::vector<double> l;
      if (is_number(v)) l.push_back(to_scalar(v).to<double>());
      else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v))
        for (py::handle e : v) {
          if (!is_number(e)) return mismatch("a float or a sequence of floats");
          l.push_back(to_scalar(e).to<double>());
        }
      else return mismatch("a float or a sequence of floats");
      b.attrs.items().emplace_back(p.attr, std::move(l));
      return true;
    }
    case Kind::Bool:
      if (!PyBool_Check(v.ptr())) return mismatch("a bool");
      b.attrs.items().emplace_back(p.attr, v.ptr() == Py_True);
      return true;
    case Kind::Str:
      if (!py::isinstance<py::str>(v)) return mismatch("a str");
      b.attrs.items().emplace_back(p.attr, v.cast<std::string>());
      return true;
    case Kind::Scalar:
      if (!is_number(v)) {
        if (is_tensor(v) && tensor_ref(v).numel() == 1) { b.attrs.items().emplace_back(p.attr, tensor_ref(v).item()); return true; }
        return mismatch("a number");
      }
      b.attrs.items().emplace_back(p.attr, to_scalar(v));
      return true;
    case Kind::ScalarType:
      if (!is_dtype(v)) return mismatch("a dtype");
      b.attrs.items().emplace_back(p.attr, to_dtype(v));
      return true;
  }
  return false;
}

// A call's arguments as CPython's vectorcall passes them: positional ones,
// then the values of the keywords named in `kwnames` (a tuple of str, or null).
struct CallArgs {
  PyObject* const* args;
  Py_ssize_t nargs;
  PyObject* kwnames;
  Py_ssize_t nkw() const { return kwnames ? PyTuple_GET_SIZE(kwnames) : 0; }
};

// Binds the call to `sig`; `b.error` says why when it does not fit.
Bound bind(const Signature& sig, const CallArgs& call, bool strict) {
  Bound b;
  b.inputs.assign(sig.n_inputs, Tensor());
  b.attrs.items().reserve(sig.params.size());
  const size_t npos = static_cast<size_t>(call.nargs);
  size_t next = 0;
  std::array<bool, kMaxParams> seen{};
  py::object rest;  // the rest of the positional arguments, when one list parameter takes them
  for (size_t k = 0; k < sig.params.size() && next < npos; ++k) {
    const Param& p = sig.params[k];
    if (p.keyword_only) break;
    py::handle v = call.args[next];
    // A list parameter given as the rest of the positional arguments:
    // x.view(2, 3), torch.einsum("ij,jk", a, b).
    bool last_positional = k + 1 == sig.params.size() || sig.params[k + 1].keyword_only;
    if (p.kind == Kind::TensorList && is_tensor(v)) {
      py::list l;
      for (; next < npos && is_tensor(call.args[next]); ++next) l.append(call.args[next]);
      rest = l;
      v = rest;
    } else if (p.kind == Kind::IntList && last_positional && npos - next > 1) {
      py::tuple t(npos - next);
      for (size_t i = 0; next < npos; ++next, ++i) t[i] = py::reinterpret_borrow<py::object>(call.args[next]);
      rest = t;
      v = rest;
    } else {
      ++next;
    }
    std::string why;
    if (!convert(p, v, strict, b, why)) { b.error = why; return b; }
    seen[k] = true;
  }
  if (next < npos) {
    b.error = "takes " + std::to_string(next) + " positional arguments but " + std::to_string(npos) + " were given";
    return b;
  }
  for (Py_ssize_t i = 0; i < call.nkw(); ++i) {
    PyObject* key = PyTuple_GET_ITEM(call.kwnames, i);
    Py_ssize_t len = 0;
    const char* name = PyUnicode_AsUTF8AndSize(key, &len);
    if (!name) throw py::error_already_set();
    std::string_view kname(name, static_cast<size_t>(len));
    size_t k = 0;
    while (k < sig.params.size() && sig.params[k].name != kname) ++k;
    if (k == sig.params.size()) { b.error = "got an unexpected keyword argument '" + std::string(kname) + "'"; return b; }
    if (seen[k]) { b.error = "got multiple values for argument '" + std::string(kname) + "'"; return b; }
    std::string why;
    if (!convert(sig.params[k], call.args[call.nargs + i], strict, b, why)) { b.error = why; return b; }
    seen[k] = true;
  }
  for (size_t k = 0; k < sig.params.size(); ++k) {
    if (seen[k]) continue;
    const Param& p = sig.params[k];
    if (!p.has_default) { b.error = "missing required argument '" + p.name + "'"; return b; }
    std::string why;
    if (!convert(p, p.default_value, strict, b, why)) { b.error = why; return b; }
  }
  // An op whose Tensor|Scalar argument came as a number takes it as an
  // attribute: its inputs end before the first such parameter (the invoker
  // tells the forms apart by how many inputs it gets: clamp, pow, scatter).
  if (b.scalar_form)
    for (const Param& p : sig.params)
      if (p.kind == Kind::TensorOrScalar && p.input >= 0 && static_cast<int>(b.inputs.size()) > p.input) {
        b.inputs.resize(p.input);
        break;
      }
  return b;
}

py::object result(const Signature& sig, TensorList&& out) {
  if (sig.list_output) {
    py::tuple t(out.size());
    for (size_t i = 0; i < out.size(); ++i) t[i] = tensor_object(std::move(out[i]));
    return t;
  }
  // Outputs asked for by an attribute ("values inverse? counts?") come back
  // undefined when not asked for; Python sees only the others, in order.
  std::vector<Tensor> defined;
  for (Tensor& t : out)
    if (t.defined()) defined.push_back(std::move(t));
  if (defined.size() == 1) return tensor_object(std::move(defined[0]));
  if (sig.named && defined.size() == static_cast<size_t>(sig.n_outputs)) {
    py::object t = py::reinterpret_steal<py::object>(PyStructSequence_New(sig.named));
    if (!t) throw py::error_already_set();
    for (size_t i = 0; i < defined.size(); ++i)
      PyStructSequence_SetItem(t.ptr(), static_cast<Py_ssize_t>(i), tensor_object(std::move(defined[i])).release().ptr());
    return t;
  }
  py::tuple t(defined.size());
  for (size_t i = 0; i < defined.size(); ++i) t[i] = tensor_object(std::move(defined[i]));
  return t;
}

// One Python name and the signatures it tries.
struct Overloads {
  std::string name;
  std::vector<const Signature*> sigs;
};

py::object call(const Overloads& o, const CallArgs& args) {
  std::string errors;
  for (bool strict : {true, false}) {
    for (const Signature* s : o.sigs) {
      Bound b = bind(*s, args, strict);
      if (!b.error.empty()) {
        if (!strict) errors += "\n  " + s->text + ": " + b.error;
        continue;
      }
      TensorList out;
      {
        py::gil_scoped_release nogil;
        out = ops::invoke(s->op, b.inputs, b.attrs);
      }
      return result(*s, std::move(out));
    }
  }
  if (o.sigs.size() == 1) throw py::type_error(o.name + "(): " + errors.substr(errors.find(": ") + 2) + "\n  signature: " + o.sigs[0]->text);
  throw py::type_error(o.name + "(): the arguments match none of its signatures:" + errors);
}

// The C entry of every bound op: CPython's vectorcall convention
// (METH_FASTCALL | METH_KEYWORDS), with `self` the capsule of its Overloads.
// It skips pybind11's dispatcher and its tuple and dict per call; a method
// (Tensor.sum) is the same function wrapped so that the tensor comes first.
PyObject* fastcall(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const auto* o = static_cast<const Overloads*>(PyCapsule_GetPointer(self, nullptr));
  try {
    return call(*o, CallArgs{args, PyVectorcall_NARGS(nargs), kwnames}).release().ptr();
  } catch (...) {
    set_python_error(std::current_exception());
    return nullptr;
  }
}

// A parameter's type as Python annotations write it (for help() and the .pyi stubs).
std::string annotation(const Param& p) {
  std::string t;
  switch (p.kind) {
    case Kind::Tensor: t = "Tensor"; break;
    case Kind::TensorList: t = "Iterable[Tensor]"; break;
    case Kind::TensorOrScalar: t = "Union[Tensor, float]"; break;
    case Kind::Int: t = "int"; break;
    case Kind::IntList: t = "Union[int, Iterable[int]]"; break;
    case Kind::Float: t = "float"; break;
    case Kind::FloatList: t = "Union[float, Iterable[float]]"; break;
    case Kind::Bool: t = "bool"; break;
    case Kind::Str: t = "str"; break;
    case Kind::Scalar: t = "float"; break;
    case Kind::ScalarType: t = "dtype"; break;
  }
  return p.optional ? "Optional[" + t + "]" : t;
}

std::string returns(const Signature& s) {
  const ops::OpEntry& e = ops::op_entry(s.op);
  if (e.out.variadic) return "List[Tensor]";  // a tuple at run time; scripts/python_stubs.py writes Tuple[Tensor, ...]
  if (e.out.max == 1) return "Tensor";
  if (e.out.min == e.out.max) {
    std::string r = "Tuple[Tensor";
    for (int i = 1; i < e.out.max; ++i) r += ", Tensor";
    return r + "]";
  }
  return "Any";  // outputs asked for by attributes: a Tensor or a tuple (max with dim, unique)
}

// One line per overload, "name(x: Tensor, dim: int = ...) -> Tensor", the
// form help() shows and mypy's stubgen reads; then what the op is. stubgen
// 1.0 reads neither a bare "*" nor "..." inside a type, so keyword-only
// parameters follow "*_: Any", which scripts/python_stubs.py turns into "*".
// Each op's shapes, dtypes, backward and notes (scripts/gen_ops_doc.py writes
// them with docs/ops.md), for its docstring.
struct OpDoc {
  const char *op, *shapes, *dtypes, *backward, *notes;
};
constexpr OpDoc kOpDocs[] = {
#define OPDOC(op, shapes, dtypes, backward, notes) {#op, shapes, dtypes, backward, notes},
#include "op_docs.inc"
#undef OPDOC
};

const OpDoc* op_doc(const std::string& op) {
  for (const OpDoc& d : kOpDocs)
    if (op == d.op) return &d;
  return nullptr;
}

std::string doc(const Overloads& o, bool method) {
  std::string d;
  for (const Signature* s : o.sigs) {
    d += o.name + "(";
    bool first = true, star = false;
    for (size_t i = 0; i < s->params.size(); ++i) {
      const Param& p = s->params[i];
      if (!first) d += ", ";
      first = false;
      if (method && i == 0) { d += "self"; continue; }
      if (p.keyword_only && !star) { d += "*_: Any, "; star = true; }
      d += p.name + ": " + annotation(p) + (p.has_default ? " = ..." : "");
    }
    d += ") -> " + returns(*s) + "\n";
  }
  std::vector<std::string> ops;  // the distinct ops the signatures call, in order
  for (const Signature* s : o.sigs)
    if (std::find(ops.begin(), ops.end(), s->name) == ops.end()) ops.push_back(s->name);
  std::string names;
  for (const std::string& n : ops) names += (names.empty() ? "" : ", ") + n;
  d += std::string("\nThe op") + (ops.size() == 1 ? " " : "s ") + names +
       " of Tessera's op table (docs/ops.md). Parameters as PyTorch's; a Python number may stand for a Tensor.\n";
  for (const std::string& n : ops) {
    const OpDoc* od = op_doc(n);
    if (!od) continue;
    if (ops.size() > 1) d += "\n" + n + ":";
    if (*od->shapes) d += std::string("\n  shapes: ") + od->shapes;
    d += std::string("\n  dtypes: ") + od->dtypes + "\n  backward: " + od->backward;
    if (*od->notes) d += std::string("\n  notes: ") + od->notes;
    d += "\n";
  }
  return d;
}

}  // namespace

void bind_ops(py::module_& m) {
  // Parsed once; the bound functions keep pointers into these.
  static std::vector<Signature>* sigs = new std::vector<Signature>();
  static std::map<std::string, std::map<std::string, Overloads>>* spaces = new std::map<std::string, std::map<std::string, Overloads>>();
  static std::deque<std::string>* docs = new std::deque<std::string>();
  std::vector<bool> covered(ops::op_count(), false);
  py::module_ types = m.def_submodule("return_types", "The named tuples ops return (as torch.return_types)");
  sigs->reserve(std::size(kRows));
  for (const SigRow& row : kRows) {
    auto id = ops::op_id(row.op);
    if (!id) bad_row(row, "no op of that name in ops.def");
    covered[static_cast<int>(*id)] = true;
    if (!op_doc(row.op)) bad_row(row, "no docs row in python/src/op_docs.inc (run scripts/gen_ops_doc.py)");
    sigs->push_back(parse(row, *id));
    std::vector<std::string> outputs = input_names(ops::op_entry(*id).outputs);
    if (outputs == std::vector<std::string>{"values", "indices"}) sigs->back().named = return_type(row.op, outputs, types);
  }
  for (int i = 0; i < ops::op_count(); ++i)
    if (!covered[i]) throw std::runtime_error("op_signatures.def has no row for the op '" + std::string(ops::op_table()[i].name) + "' of ops.def");
  // Every op under tessera.ops; then the names each row asks for.
  for (size_t k = 0; k < sigs->size(); ++k) {
    const Signature& s = (*sigs)[k];
    (*spaces)["ops"][s.name].sigs.push_back(&s);
    std::string where = kRows[k].where;
    size_t i = 0;
    while (i < where.size()) {
      while (i < where.size() && where[i] == ' ') ++i;
      size_t j = where.find(' ', i);
      if (j == std::string::npos) j = where.size();
      std::string tok = where.substr(i, j - i);
      i = j;
      if (tok.empty()) continue;
      std::string space = tok, name = s.name;
      if (auto dot = tok.find('.'); dot != std::string::npos) { space = tok.substr(0, dot); name = tok.substr(dot + 1); }
      if (space != "torch" && space != "F" && space != "Tensor" && space != "linalg") bad_row(kRows[k], "unknown place '" + tok + "'");
      (*spaces)[space][name].sigs.push_back(&s);
    }
  }
  py::module_ sub_ops = m.def_submodule("ops", "Every op of the op table, by its name in ops.def");
  py::module_ functional = m.def_submodule("_functional", "The ops PyTorch has in torch.nn.functional");
  py::module_ linalg = m.def_submodule("_linalg", "The ops PyTorch has in torch.linalg");
  py::object tensor_cls = m.attr("Tensor");
  static std::deque<PyMethodDef>* defs = new std::deque<PyMethodDef>();
  for (auto& [space, names] : *spaces) {
    for (auto& [name, o] : names) {
      o.name = name;
      bool method = space == "Tensor";
      if (method && py::hasattr(tensor_cls, name.c_str())) continue;  // methods the class defines itself win
      PyMethodDef& def = defs->emplace_back(PyMethodDef{
          o.name.c_str(), reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fastcall)),
          METH_FASTCALL | METH_KEYWORDS, docs->emplace_back(doc(o, method)).c_str()});
      py::capsule owner(static_cast<const void*>(&o), static_cast<const char*>(nullptr));
      py::module_& target = space == "ops" ? sub_ops : space == "F" ? functional : space == "linalg" ? linalg : m;
      py::object f = py::reinterpret_steal<py::object>(PyCFunction_NewEx(&def, owner.ptr(), method ? nullptr : target.attr("__name__").ptr()));
      if (!f) throw py::error_already_set();
      if (method) {
        // An instancemethod binds the tensor as the first argument, as a Python function would.
        tensor_cls.attr(name.c_str()) = py::reinterpret_steal<py::object>(PyInstanceMethod_New(f.ptr()));
      } else {
        target.attr(name.c_str()) = f;
      }
    }
  }
  // The table itself, for tests and tools: (op, where, parameters) rows.
  py::list rows;
  for (const SigRow& r : kRows) rows.append(py::make_tuple(r.op, r.where, r.params));
  m.attr("_op_signatures") = rows;
  py::list names;
  for (int i = 0; i < ops::op_count(); ++i) names.append(std::string(ops::op_table()[i].name));
  m.attr("_op_table") = names;
}

}  // namespace tessera::python
