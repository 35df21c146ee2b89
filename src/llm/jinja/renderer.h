#pragma once
// Runs a parsed template: statements write text, expressions compute values,
// and every step, nesting level and byte built is counted by the sandbox.
// The filters, tests, methods and functions it calls are tables of their own
// (builtins.h); what they need of the renderer is public here.
#include <string>
#include <utility>
#include <vector>

#include "llm/jinja/ast.h"
#include "llm/jinja/builtins.h"
#include "llm/jinja/sandbox.h"

namespace tessera::llm::jinja {

struct Callable {
  std::string name;
  const Stmt* macro = nullptr;  // null: a builtin function, by name
};

// Variables: a block's own, then its parent's.
struct Scope {
  Scope* parent = nullptr;
  Object vars;
  Value* find(const std::string& n);
  void set(const std::string& n, Value v) { vars.set(n, std::move(v)); }
  Scope& root();
};

class Renderer {
 public:
  explicit Renderer(Sandbox& box) : box_(box) {}

  // Runs `body`, appending its text to `out`.
  void render(const Body& body, Scope& scope, std::string& out);

  Sandbox& box() { return box_; }
  [[noreturn]] void fail(int line, const std::string& msg) const { box_.fail(line, msg); }
  // A value just made: its bytes are charged. Returns it.
  Value made(Value v, int line);
  // What {{ v }} writes, charged.
  std::string text(const Value& v, int line);
  // obj.key (dot) or obj[key].
  Value member(const Value& obj, const Value& key, int line, bool dot);
  // A filter or a test called by name on a value (map, select, selectattr).
  Value filter_by_name(const std::string& name, const Value& v, const Args& a, int line, Scope& scope);
  bool test_by_name(const std::string& name, const Value& v, const Value* arg, int line, Scope& scope);
  // A macro called with `a`.
  Value invoke(const Value& f, const Args& a, int line, Scope& scope);

 private:
  struct LoopControl {
    bool brk;
  };
  void emit(std::string& out, std::string_view s, int line);
  void run(const Stmt& s, Scope& scope, std::string& out);
  void run_for(const Stmt& s, Scope& scope, std::string& out);
  void bind(const Expr& target, const Value& v, Scope& scope, int line);
  void assign(const Expr& target, Value v, Scope& scope, int line);
  Value eval(const Expr& e, Scope& scope);
  Value name(const std::string& n, Scope& scope);
  Value unary(const Expr& e, Scope& scope);
  Value binary(const Expr& e, Scope& scope);
  Value arithmetic(const std::string& op, const Value& l, const Value& r, int line);
  Value slice(const Expr& e, Scope& scope);
  Args arguments(const Expr& e, size_t from, Scope& scope);
  Value call(const Expr& e, Scope& scope);

  Sandbox& box_;
};

// Renders `program` with `context`'s keys as variables, under `limits`;
// `what` names the template in errors.
std::string render(const Body& program, const nlohmann::ordered_json& context, const ChatTemplateLimits& limits,
                   const std::string& what);

}  // namespace tessera::llm::jinja
