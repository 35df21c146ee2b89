#include "llm/jinja/renderer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "llm/pretokenize.h"
#include "tessera/core/error.h"

namespace tessera::llm::jinja {

Value* Scope::find(const std::string& n) {
  for (Scope* s = this; s; s = s->parent)
    if (Value* v = s->vars.find(n)) return v;
  return nullptr;
}

Scope& Scope::root() {
  Scope* r = this;
  while (r->parent) r = r->parent;
  return *r;
}

void Renderer::render(const Body& body, Scope& scope, std::string& out) {
  Deeper d(box_, 0);
  try {
    for (const auto& s : body) run(*s, scope, out);
  } catch (const LoopControl&) {
    TS_ERROR(box_.what(), ": 'break' or 'continue' outside a for loop");
  }
}

Value Renderer::made(Value v, int line) {
  box_.charge(footprint(v), line);
  return v;
}

std::string Renderer::text(const Value& v, int line) {
  std::string s = to_text(v, box_, line);
  if (v.kind != Kind::String) box_.charge(static_cast<int64_t>(s.size()), line);
  return s;
}

void Renderer::emit(std::string& out, std::string_view s, int line) {
  box_.charge(static_cast<int64_t>(s.size()), line);
  const ChatTemplateLimits& lim = box_.limits();
  if (static_cast<int64_t>(out.size() + s.size()) > lim.max_output)
    fail(line, "the output passed " + std::to_string(lim.max_output) + " bytes (a limit of the sandbox)");
  out += s;
}

void Renderer::run(const Stmt& s, Scope& scope, std::string& out) {
  box_.step(s.line);
  switch (s.kind) {
    case S::Text: emit(out, s.text, s.line); return;
    case S::Output: {
      const Value v = eval(*s.value, scope);
      if (v.kind == Kind::String) emit(out, v.s, s.line);
      else if (v.kind != Kind::None && v.kind != Kind::Undefined) emit(out, to_text(v, box_, s.line), s.line);
      return;
    }
    case S::If: {
      Deeper d(box_, s.line);
      const Body& b = truthy(eval(*s.value, scope)) ? s.body : s.alt;
      for (const auto& x : b) run(*x, scope, out);
      return;
    }
    case S::For: run_for(s, scope, out); return;
    case S::Set: assign(*s.target, eval(*s.value, scope), scope, s.line); return;
    case S::SetBlock: {
      std::string inner;
      {
        Deeper d(box_, s.line);
        for (const auto& x : s.body) run(*x, scope, inner);
      }
      assign(*s.target, Value::string(std::move(inner)), scope, s.line);
      return;
    }
    case S::Macro: {
      Value f = Value::with(Kind::Function);
      f.fn = std::make_shared<Callable>(Callable{s.text, &s});
      scope.set(s.text, std::move(f));
      return;
    }
    case S::Break: throw LoopControl{true};
    case S::Continue: throw LoopControl{false};
  }
}

void Renderer::bind(const Expr& target, const Value& v, Scope& scope, int line) {
  if (target.kind == E::Name) {
    scope.set(target.name, v);
    return;
  }
  if (v.kind != Kind::Array)
    fail(line, std::string("cannot unpack a ") + kind_name(v.kind) + " into " + std::to_string(target.a.size()) +
                   " names");
  if (v.a->size() != target.a.size())
    fail(line, "too " + std::string(v.a->size() < target.a.size() ? "few" : "many") + " items to unpack (" +
                   std::to_string(v.a->size()) + " into " + std::to_string(target.a.size()) + ")");
  for (size_t k = 0; k < target.a.size(); ++k) scope.set(target.a[k]->name, (*v.a)[k]);
}

void Renderer::assign(const Expr& target, Value v, Scope& scope, int line) {
  if (target.kind == E::Attr) {
    Value* ns = scope.find(target.a[0]->name);
    if (!ns || ns->kind != Kind::Namespace)
      fail(line, "'" + target.a[0]->name + "." + target.name + "' can be set only on a namespace()");
    ns->o->set(target.name, std::move(v));
    return;
  }
  bind(target, v, scope, line);
}

void Renderer::run_for(const Stmt& s, Scope& scope, std::string& out) {
  Deeper d(box_, s.line);
  Scope inner;
  inner.parent = &scope;
  Value it = eval(*s.value, inner);
  Array items;
  if (it.kind == Kind::Array) {
    items = *it.a;
  } else if (it.kind == Kind::Object) {
    for (const auto& [k, v] : it.o->items) items.push_back(Value::string(k));
  } else if (it.kind == Kind::String) {
    items = characters(it.s, box_, s.line);
  } else {
    fail(s.line, std::string("a for loop needs a list or a dict, not a ") + kind_name(it.kind));
  }
  if (s.cond) {
    Array kept;
    for (const Value& v : items) {
      box_.step(s.line);
      Scope test;
      test.parent = &inner;
      bind(*s.target, v, test, s.line);
      if (truthy(eval(*s.cond, test))) kept.push_back(v);
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    box_.step(s.line);
    Value loop = Value::object();
    loop.o->set("index", Value::integer(k + 1));
    loop.o->set("index0", Value::integer(k));
    loop.o->set("revindex", Value::integer(n - k));
    loop.o->set("revindex0", Value::integer(n - k - 1));
    loop.o->set("first", Value::boolean(k == 0));
    loop.o->set("last", Value::boolean(k == n - 1));
    loop.o->set("length", Value::integer(n));
    loop.o->set("previtem", k > 0 ? items[k - 1] : Value());
    loop.o->set("nextitem", k < n - 1 ? items[k + 1] : Value());
    inner.set("loop", std::move(loop));
    bind(*s.target, items[k], inner, s.line);
    try {
      for (const auto& x : s.body) run(*x, inner, out);
    } catch (const LoopControl& c) {
      if (c.brk) break;
    }
  }
  if (n == 0)
    for (const auto& x : s.alt) run(*x, inner, out);
}

// ---- expressions ----

Value Renderer::eval(const Expr& e, Scope& scope) {
  Deeper d(box_, e.line);
  switch (e.kind) {
    case E::Literal: return e.literal;
    case E::Name: return name(e.name, scope);
    case E::List:
    case E::Tuple: {
      Value v = Value::array();
      for (const auto& x : e.a) v.a->push_back(eval(*x, scope));
      return made(std::move(v), e.line);
    }
    case E::Dict: {
      Value v = Value::object();
      for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
        const Value key = eval(*e.a[k], scope);
        if (key.kind != Kind::String && key.kind != Kind::Int) fail(e.line, "a dict key must be a string");
        v.o->set(key.kind == Kind::String ? key.s : std::to_string(key.i), eval(*e.a[k + 1], scope));
      }
      return v;
    }
    case E::Unary: return unary(e, scope);
    case E::Binary: return binary(e, scope);
    case E::Ternary: return truthy(eval(*e.a[0], scope)) ? eval(*e.a[1], scope) : eval(*e.a[2], scope);
    case E::Select: return truthy(eval(*e.a[0], scope)) ? eval(*e.a[1], scope) : Value();
    case E::Attr: return member(eval(*e.a[0], scope), Value::string(e.name), e.line, true);
    case E::Index: return member(eval(*e.a[0], scope), eval(*e.a[1], scope), e.line, false);
    case E::Slice: return made(slice(e, scope), e.line);
    case E::Call: return made(call(e, scope), e.line);
    case E::Filter: {
      box_.step(e.line);
      const Value v = eval(*e.a[0], scope);
      return made(filter_by_name(e.name, v, arguments(e, 1, scope), e.line, scope), e.line);
    }
    case E::Test: {
      const Value v = eval(*e.a[0], scope);
      std::optional<Value> arg;
      if (e.a.size() > 1) arg = eval(*e.a[1], scope);
      const bool r = test_by_name(e.name, v, arg ? &*arg : nullptr, e.line, scope);
      return Value::boolean(e.negate ? !r : r);
    }
    case E::Kwarg: fail(e.line, "a keyword argument outside a call");
  }
  return Value();
}

Value Renderer::name(const std::string& n, Scope& scope) {
  if (Value* v = scope.find(n)) return *v;
  if (n == "true" || n == "True") return Value::boolean(true);
  if (n == "false" || n == "False") return Value::boolean(false);
  if (n == "none" || n == "None") return Value::none();
  if (is_function(n)) {
    Value f = Value::with(Kind::Function);
    f.fn = std::make_shared<Callable>(Callable{n, nullptr});
    return f;
  }
  return Value();
}

Value Renderer::unary(const Expr& e, Scope& scope) {
  const Value v = eval(*e.a[0], scope);
  if (e.name == "not") return Value::boolean(!truthy(v));
  const bool minus = e.name == "-";
  if (v.kind == Kind::Bool) return Value::integer(minus ? -int64_t{v.b} : int64_t{v.b});
  if (v.kind == Kind::Int) {
    if (minus && v.i == std::numeric_limits<int64_t>::min()) fail(e.line, "integer overflow in unary -");
    return Value::integer(minus ? -v.i : v.i);
  }
  if (v.kind == Kind::Float) return Value::number(minus ? -v.f : v.f);
  fail(e.line, "unary " + e.name + " needs a number, not a " + kind_name(v.kind));
}

// Numbers on both sides: integers stay integers while they fit in 64 bits
// (Python's are unbounded; a template that leaves 64 bits gets an error,
// never a wrapped or undefined value).
Value Renderer::arithmetic(const std::string& op, const Value& l, const Value& r, int line) {
  const bool fl = l.kind == Kind::Float || r.kind == Kind::Float;
  auto power = [&](double a, double b) {
    const double p = std::pow(a, b);
    if (!std::isfinite(p)) fail(line, "** gives a number that is not finite");
    return Value::number(p);
  };
  if (op == "<") return Value::boolean(l.num() < r.num());
  if (op == ">") return Value::boolean(l.num() > r.num());
  if (op == "<=") return Value::boolean(l.num() <= r.num());
  if (op == ">=") return Value::boolean(l.num() >= r.num());
  if (op == "/") return Value::number(l.num() / r.num());
  if (fl) {
    const double a = l.num(), b = r.num();
    if (op == "+") return Value::number(a + b);
    if (op == "-") return Value::number(a - b);
    if (op == "*") return Value::number(a * b);
    if (op == "//") return Value::number(std::floor(a / b));
    if (op == "%") return Value::number(std::fmod(a, b));
    if (op == "**") return power(a, b);
    fail(line, "'" + op + "' is not defined between numbers");
  }
  const int64_t a = l.i, b = r.i;
  int64_t out = 0;
  auto overflow = [&]() -> Value { fail(line, "integer overflow in " + op + " (integers are 64-bit here)"); };
  if (op == "+") return __builtin_add_overflow(a, b, &out) ? overflow() : Value::integer(out);
  if (op == "-") return __builtin_sub_overflow(a, b, &out) ? overflow() : Value::integer(out);
  if (op == "*") return __builtin_mul_overflow(a, b, &out) ? overflow() : Value::integer(out);
  if (op == "//" || op == "%") {
    if (b == 0) fail(line, "division by zero");
    if (a == std::numeric_limits<int64_t>::min() && b == -1) return op == "%" ? Value::integer(0) : overflow();
    if (op == "%") return Value::integer(a % b);  // JavaScript's %: the sign of the dividend
    const int64_t q = a / b;
    return Value::integer((a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q);  // floor
  }
  if (op == "**") {
    if (b < 0) return power(static_cast<double>(a), static_cast<double>(b));
    int64_t p = 1, base = a;
    for (int64_t e = b; e > 0; e >>= 1) {  // square and multiply: at most 63 rounds before overflow
      if ((e & 1) && __builtin_mul_overflow(p, base, &p)) return overflow();
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow();  // a higher bit needs it
    }
    return Value::integer(p);
  }
  fail(line, "'" + op + "' is not defined between numbers");
}

Value Renderer::binary(const Expr& e, Scope& scope) {
  const std::string& op = e.name;
  Value l = eval(*e.a[0], scope);
  if (op == "and") return truthy(l) ? eval(*e.a[1], scope) : l;
  if (op == "or") return truthy(l) ? l : eval(*e.a[1], scope);
  const Value r = eval(*e.a[1], scope);
  if (op == "==") return Value::boolean(same(l, r));
  if (op == "!=") return Value::boolean(!same(l, r));
  if (l.is_number() && r.is_number() && op != "~") return arithmetic(op, l, r, e.line);
  auto concat = [&] {  // `~`, and `+` with a string
    std::string a = l.kind == Kind::String ? l.s : text(l, e.line);
    const std::string b = r.kind == Kind::String ? r.s : text(r, e.line);
    box_.charge(static_cast<int64_t>(a.size() + b.size()), e.line);
    a += b;
    return Value::string(std::move(a));
  };
  if (l.kind == Kind::Undefined || r.kind == Kind::Undefined) {
    if (r.kind == Kind::Undefined && (op == "in" || op == "not in")) return Value::boolean(op == "not in");
    if (op == "~" && l.kind != Kind::None && r.kind != Kind::None) return concat();
    fail(e.line, "'" + op + "' on an undefined value (a variable or key the context does not have)");
  }
  if (l.kind == Kind::None || r.kind == Kind::None) fail(e.line, "'" + op + "' on none");
  if (op == "~") return concat();
  if (l.kind == Kind::Array && r.kind == Kind::Array && op == "+") {
    box_.charge(footprint(l) + footprint(r), e.line);
    Value v = Value::array(*l.a);
    v.a->insert(v.a->end(), r.a->begin(), r.a->end());
    return v;
  }
  const bool in = op == "in" || op == "not in";
  if (r.kind == Kind::Array && in) {
    bool found = false;
    for (const Value& x : *r.a) found = found || strictly_same(x, l);
    return Value::boolean(found == (op == "in"));
  }
  if ((l.kind == Kind::String || r.kind == Kind::String) && op == "+") return concat();
  if (l.kind == Kind::String && r.kind == Kind::String && in) {
    const bool found = l.s.empty() || !occurrences(r.s, l.s, 1).empty();
    return Value::boolean(found == (op == "in"));
  }
  if (l.kind == Kind::String && r.attributes() && in) return Value::boolean((r.o->find(l.s) != nullptr) == (op == "in"));
  fail(e.line, "'" + op + "' between a " + kind_name(l.kind) + " and a " + kind_name(r.kind) + " is not defined");
}

Value Renderer::member(const Value& obj, const Value& key, int line, bool dot) {
  if (obj.attributes()) {
    if (key.kind != Kind::String) fail(line, "a dict is indexed by strings, not by a " + std::string(kind_name(key.kind)));
    const Value* v = obj.o->find(key.s);
    return v ? *v : Value();
  }
  if (obj.kind == Kind::Array || obj.kind == Kind::String) {
    if (key.kind == Kind::Int ||
        (dot && key.kind == Kind::String && !key.s.empty() && std::isdigit(static_cast<unsigned char>(key.s[0])))) {
      int64_t k0 = key.i;
      if (key.kind != Kind::Int) {  // x.0: the lexer's digits, maybe too many for 64 bits
        auto r = std::from_chars(key.s.data(), key.s.data() + key.s.size(), k0);
        if (r.ec != std::errc()) return Value();
      }
      if (obj.kind == Kind::Array) {
        const int64_t n = static_cast<int64_t>(obj.a->size());
        const int64_t k = k0 < 0 ? n + k0 : k0;
        return k >= 0 && k < n ? (*obj.a)[k] : Value();
      }
      const std::vector<uint32_t> c = utf8_code_points(obj.s);
      const int64_t n = static_cast<int64_t>(c.size());
      const int64_t k = k0 < 0 ? n + k0 : k0;
      return k >= 0 && k < n ? Value::string(encode(c, k, k + 1)) : Value();
    }
    if (key.kind == Kind::String && key.s == "length")
      return Value::integer(obj.kind == Kind::Array ? static_cast<int64_t>(obj.a->size())
                                                    : static_cast<int64_t>(utf8_code_points(obj.s).size()));
    if (key.kind == Kind::String) return Value();  // a method's name: only callable (see call)
    fail(line, std::string("a ") + kind_name(obj.kind) + " is indexed by integers");
  }
  return Value();  // as @huggingface/jinja: an attribute of undefined or none is undefined
}

Value Renderer::slice(const Expr& e, Scope& scope) {
  const Value obj = eval(*e.a[0], scope);
  auto part = [&](int k) -> std::optional<int64_t> {
    if (!e.a[k]) return std::nullopt;
    const Value v = eval(*e.a[k], scope);
    if (v.kind == Kind::Undefined) return std::nullopt;
    if (v.kind != Kind::Int) fail(e.line, "a slice's bounds must be integers");
    return v.i;
  };
  const auto start = part(1), stop = part(2), stp = part(3);
  const int64_t st = stp.value_or(1);
  if (st == 0) fail(e.line, "a slice's step cannot be 0");
  // The indices taken from a sequence of n, in order.
  auto indices = [&](int64_t n) {
    auto norm = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      const int64_t x = *v < 0 ? n + *v : *v;
      return st > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = norm(start, st > 0 ? 0 : n - 1), en = norm(stop, st > 0 ? n : -1);
    std::vector<int64_t> out;
    // b and en lie in [-1, n]: a step past them ends the loop before it overflows.
    if (st > 0)
      for (int64_t k = b; k < en; k = st > en - k ? en : k + st) out.push_back(k);
    else
      for (int64_t k = b; k > en; k = -st > k - en ? en : k + st) out.push_back(k);
    return out;
  };
  if (obj.kind == Kind::Array) {
    Value v = Value::array();
    for (int64_t k : indices(static_cast<int64_t>(obj.a->size()))) v.a->push_back((*obj.a)[k]);
    return v;
  }
  if (obj.kind == Kind::String) {
    const std::vector<uint32_t> c = utf8_code_points(obj.s);
    std::string s;
    for (int64_t k : indices(static_cast<int64_t>(c.size()))) append_utf8(c[k], s);
    return Value::string(std::move(s));
  }
  fail(e.line, std::string("only lists and strings can be sliced, not a ") + kind_name(obj.kind));
}

Args Renderer::arguments(const Expr& e, size_t from, Scope& scope) {
  Args a;
  for (size_t k = from; k < e.a.size(); ++k) {
    if (e.a[k]->kind == E::Kwarg) a.kw.emplace_back(e.a[k]->name, eval(*e.a[k]->a[0], scope));
    else a.pos.push_back(eval(*e.a[k], scope));
  }
  return a;
}

Value Renderer::call(const Expr& e, Scope& scope) {
  box_.step(e.line);
  const Expr& callee = *e.a[0];
  if (callee.kind == E::Attr) {
    const Value obj = eval(*callee.a[0], scope);
    // A dict's own key that holds a function (a namespace's macro) wins over a method.
    if (obj.attributes())
      if (const Value* f = obj.o->find(callee.name); f && f->kind == Kind::Function)
        return invoke(*f, arguments(e, 1, scope), e.line, scope);
    const Args a = arguments(e, 1, scope);
    return call_method(Call{*this, callee.name, obj, a, e.line, scope});
  }
  const Value f = eval(callee, scope);
  if (f.kind != Kind::Function)
    fail(e.line, "'" + (callee.kind == E::Name ? callee.name : std::string("this")) + "' is not a function (it is " +
                     (f.kind == Kind::Undefined ? "undefined" : std::string("a ") + kind_name(f.kind)) + ")");
  return invoke(f, arguments(e, 1, scope), e.line, scope);
}

Value Renderer::invoke(const Value& f, const Args& a, int line, Scope& scope) {
  const Callable& c = *f.fn;
  if (!c.macro) {
    static const Value none = Value::none();
    return call_function(Call{*this, c.name, none, a, line, scope});
  }
  Deeper d(box_, line);
  Scope inner;
  inner.parent = &scope.root();
  const auto& params = c.macro->params;
  if (a.pos.size() > params.size())
    fail(line, "the macro '" + c.name + "' takes " + std::to_string(params.size()) + " arguments, not " +
                   std::to_string(a.pos.size()));
  for (size_t k = 0; k < params.size(); ++k) {
    const std::string& pname = params[k]->name;
    if (k < a.pos.size()) {
      inner.set(pname, a.pos[k]);
      continue;
    }
    const Value* kv = nullptr;
    for (const auto& [n, v] : a.kw)
      if (n == pname) kv = &v;
    if (kv) inner.set(pname, *kv);
    else if (params[k]->kind == E::Kwarg) inner.set(pname, eval(*params[k]->a[0], inner));
    else inner.set(pname, Value());
  }
  std::string out;
  for (const auto& s : c.macro->body) run(*s, inner, out);
  return Value::string(std::move(out));
}

Value Renderer::filter_by_name(const std::string& name, const Value& v, const Args& a, int line, Scope& scope) {
  if (!is_filter(name)) fail(line, "unknown filter '" + name + "'");
  return call_filter(Call{*this, name, v, a, line, scope});
}

bool Renderer::test_by_name(const std::string& name, const Value& v, const Value* arg, int line, Scope& scope) {
  if (!is_test(name)) fail(line, "unknown test '" + name + "'");
  Args a;
  if (arg) a.pos.push_back(*arg);
  return call_test(Call{*this, name, v, a, line, scope});
}

namespace {

// The bytes of a JSON value's strings and keys, and 8 for each other value.
int64_t input_bytes(const nlohmann::ordered_json& j) {
  if (j.is_string()) return static_cast<int64_t>(j.get_ref<const std::string&>().size());
  int64_t n = 8;
  if (j.is_array())
    for (const auto& x : j) n += input_bytes(x);
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) n += static_cast<int64_t>(it.key().size()) + input_bytes(it.value());
  return n;
}

}  // namespace

std::string render(const Body& program, const nlohmann::ordered_json& context, const ChatTemplateLimits& limits,
                   const std::string& what) {
  TS_CHECK(context.is_object(), what, ": the context must be a JSON object");
  Sandbox box(limits, what, input_bytes(context));
  Scope globals;
  for (auto it = context.begin(); it != context.end(); ++it) globals.set(it.key(), from_json(it.value()));
  Renderer r(box);
  std::string out;
  r.render(program, globals, out);
  return out;
}

}  // namespace tessera::llm::jinja
