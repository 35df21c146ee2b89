#include "llm/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "llm/jinja/builtins.h"
#include "tessera/core/error.h"

namespace tessera::llm::jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> toks, const std::string& what, int max_depth)
      : t_(std::move(toks)), what_(what), max_depth_(max_depth) {}

  Body program() {
    Body out;
    while (pos_ < t_.size()) out.push_back(any());
    return out;
  }
  std::set<std::string> macros;  // names defined anywhere, for the call check
  std::vector<std::pair<std::string, int>> calls;  // plain function calls: name, line

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    const int line = pos_ < t_.size() ? t_[pos_].line : t_.empty() ? 1 : t_.back().line;
    TS_ERROR(what_, ": line ", line, ": ", msg);
  }
  bool at(Tok type, std::string_view text = {}) const {
    return pos_ < t_.size() && t_[pos_].type == type && (text.empty() || t_[pos_].text == text);
  }
  bool at_name(std::string_view n, size_t ahead = 0) const {
    return pos_ + ahead < t_.size() && t_[pos_ + ahead].type == Tok::Name && t_[pos_ + ahead].text == n;
  }
  bool at_stmt(std::initializer_list<std::string_view> names) const {
    if (!at(Tok::OpenStmt) || pos_ + 1 >= t_.size() || t_[pos_ + 1].type != Tok::Name) return false;
    for (auto n : names)
      if (t_[pos_ + 1].text == n) return true;
    return false;
  }
  const Token& expect(Tok type, const char* what, std::string_view text = {}) {
    if (!at(type, text)) fail(std::string("expected ") + what + (pos_ < t_.size() ? ", found '" + describe(t_[pos_]) + "'" : " at the end"));
    return t_[pos_++];
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::OpenStmt: return "{%";
      case Tok::CloseStmt: return "%}";
      case Tok::OpenExpr: return "{{";
      case Tok::CloseExpr: return "}}";
      case Tok::Text: return "text";
      default: return t.text;
    }
  }
  void expect_name(std::string_view n) {
    if (!at_name(n)) fail("expected '" + std::string(n) + "'");
    ++pos_;
  }
  struct Deeper {
    Parser& p;
    explicit Deeper(Parser& pp) : p(pp) {
      if (++p.depth_ > p.max_depth_) p.fail("the template nests deeper than " + std::to_string(p.max_depth_) + " levels");
    }
    ~Deeper() { --p.depth_; }
  };
  ExprPtr make(E k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = pos_ < t_.size() ? t_[pos_].line : 0;
    return e;
  }

  std::unique_ptr<Stmt> any() {
    Deeper d(*this);
    const Token& t = t_[pos_];
    if (t.type == Tok::Comment) {
      ++pos_;
      auto s = std::make_unique<Stmt>();
      s->kind = S::Text;
      return s;
    }
    if (t.type == Tok::Text) {
      auto s = std::make_unique<Stmt>();
      s->kind = S::Text;
      s->text = t.text;
      ++pos_;
      return s;
    }
    if (t.type == Tok::OpenExpr) {
      ++pos_;
      auto s = std::make_unique<Stmt>();
      s->kind = S::Output;
      s->line = t.line;
      s->value = expression();
      expect(Tok::CloseExpr, "'}}'");
      return s;
    }
    if (t.type == Tok::OpenStmt) return statement();
    fail("unexpected '" + describe(t) + "'");
  }

  Body block_until(std::initializer_list<std::string_view> ends, const char* opened) {
    Body b;
    while (!at_stmt(ends)) {
      if (pos_ >= t_.size()) fail(std::string("'") + opened + "' is never closed");
      b.push_back(any());
    }
    return b;
  }

  std::unique_ptr<Stmt> statement() {
    expect(Tok::OpenStmt, "'{%'");
    if (!at(Tok::Name)) fail("expected a statement name after '{%'");
    const std::string name = t_[pos_].text;
    const int line = t_[pos_].line;
    ++pos_;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (name == "if") {
      if_rest(*s);
      expect(Tok::OpenStmt, "'{%'");
      expect_name("endif");
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "for") {
      s->kind = S::For;
      s->target = target_list();
      expect_name("in");
      s->value = logical_or();
      if (at_name("if")) {
        ++pos_;
        s->cond = logical_or();
      }
      expect(Tok::CloseStmt, "'%}'");
      s->body = block_until({"endfor", "else"}, "for");
      if (at_stmt({"else"})) {
        pos_ += 2;
        expect(Tok::CloseStmt, "'%}'");
        s->alt = block_until({"endfor"}, "for");
      }
      expect(Tok::OpenStmt, "'{%'");
      expect_name("endfor");
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "set") {
      s->target = target_list(true);
      if (at(Tok::Punct, "=")) {
        ++pos_;
        s->kind = S::Set;
        s->value = expression_tuple();
      } else {
        s->kind = S::SetBlock;
        expect(Tok::CloseStmt, "'%}'");
        s->body = block_until({"endset"}, "set");
        expect(Tok::OpenStmt, "'{%'");
        expect_name("endset");
      }
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "macro") {
      s->kind = S::Macro;
      s->text = expect(Tok::Name, "a macro name").text;
      macros.insert(s->text);
      expect(Tok::Punct, "'('", "(");
      while (!at(Tok::Punct, ")")) {
        ExprPtr p = make(E::Name);
        p->name = expect(Tok::Name, "a parameter name").text;
        if (at(Tok::Punct, "=")) {
          ++pos_;
          ExprPtr k = make(E::Kwarg);
          k->name = p->name;
          k->a.push_back(expression());
          p = std::move(k);
        }
        s->params.push_back(std::move(p));
        if (!at(Tok::Punct, ")")) expect(Tok::Punct, "',' or ')'", ",");
      }
      ++pos_;
      expect(Tok::CloseStmt, "'%}'");
      s->body = block_until({"endmacro"}, "macro");
      expect(Tok::OpenStmt, "'{%'");
      expect_name("endmacro");
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "break" || name == "continue") {
      s->kind = name == "break" ? S::Break : S::Continue;
      expect(Tok::CloseStmt, "'%}'");
    } else if (name == "endif" || name == "endfor" || name == "endmacro" || name == "endset" || name == "else" ||
               name == "elif") {
      fail("unexpected '" + name + "' (no open block here ends or continues with it)");
    } else {
      fail("the statement '" + name + "' is not in Tessera's Jinja subset (it has if, for, set, macro, break, "
           "continue)");
    }
    return s;
  }

  void if_rest(Stmt& s) {
    s.kind = S::If;
    s.value = expression();
    expect(Tok::CloseStmt, "'%}'");
    s.body = block_until({"elif", "else", "endif"}, "if");
    if (at_stmt({"elif"})) {
      pos_ += 2;
      auto e = std::make_unique<Stmt>();
      e->line = t_[pos_ - 1].line;
      if_rest(*e);
      s.alt.push_back(std::move(e));
    } else if (at_stmt({"else"})) {
      pos_ += 2;
      expect(Tok::CloseStmt, "'%}'");
      s.alt = block_until({"endif"}, "if");
    }
  }

  // A for or set target: a name, name.attr (set only), or a tuple of names.
  ExprPtr target_list(bool allow_attr = false) {
    ExprPtr first = target(allow_attr);
    if (!at(Tok::Punct, ",")) return first;
    ExprPtr tuple = make(E::Tuple);
    tuple->a.push_back(std::move(first));
    while (at(Tok::Punct, ",")) {
      ++pos_;
      tuple->a.push_back(target(false));
    }
    return tuple;
  }
  ExprPtr target(bool allow_attr) {
    ExprPtr e = make(E::Name);
    e->name = expect(Tok::Name, "a variable name").text;
    if (allow_attr && at(Tok::Punct, ".")) {
      ++pos_;
      ExprPtr attr = make(E::Attr);
      attr->name = expect(Tok::Name, "an attribute name").text;
      attr->a.push_back(std::move(e));
      return attr;
    }
    return e;
  }

  ExprPtr expression_tuple() {
    ExprPtr first = expression();
    if (!at(Tok::Punct, ",")) return first;
    ExprPtr tuple = make(E::Tuple);
    tuple->a.push_back(std::move(first));
    while (at(Tok::Punct, ",")) {
      ++pos_;
      tuple->a.push_back(expression());
    }
    return tuple;
  }

  ExprPtr expression() {
    Deeper d(*this);
    ExprPtr a = logical_or();
    if (!at_name("if")) return a;
    ++pos_;
    ExprPtr cond = logical_or();
    if (at_name("else")) {
      ++pos_;
      ExprPtr t = make(E::Ternary);
      t->a.push_back(std::move(cond));
      t->a.push_back(std::move(a));
      t->a.push_back(expression());
      return t;
    }
    ExprPtr s = make(E::Select);  // `a if cond`: undefined when cond is false
    s->a.push_back(std::move(cond));
    s->a.push_back(std::move(a));
    return s;
  }
  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r) {
    ExprPtr e = make(E::Binary);
    e->name = op;
    e->a.push_back(std::move(l));
    e->a.push_back(std::move(r));
    return e;
  }
  ExprPtr logical_or() {
    ExprPtr l = logical_and();
    while (at_name("or")) {
      ++pos_;
      l = binary("or", std::move(l), logical_and());
    }
    return l;
  }
  ExprPtr logical_and() {
    ExprPtr l = logical_not();
    while (at_name("and")) {
      ++pos_;
      l = binary("and", std::move(l), logical_not());
    }
    return l;
  }
  ExprPtr logical_not() {
    if (at_name("not")) {
      Deeper d(*this);
      ++pos_;
      ExprPtr e = make(E::Unary);
      e->name = "not";
      e->a.push_back(logical_not());
      return e;
    }
    return comparison();
  }
  ExprPtr comparison() {
    ExprPtr l = additive();
    for (;;) {
      std::string op;
      if (at_name("not") && at_name("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else if (at_name("in")) {
        ++pos_;
        op = "in";
      } else if (at(Tok::Punct) && (t_[pos_].text == "==" || t_[pos_].text == "!=" || t_[pos_].text == "<" ||
                                     t_[pos_].text == ">" || t_[pos_].text == "<=" || t_[pos_].text == ">=")) {
        op = t_[pos_++].text;
      } else {
        return l;
      }
      l = binary(op, std::move(l), additive());
    }
  }
  ExprPtr additive() {
    ExprPtr l = multiplicative();
    while (at(Tok::Punct, "+") || at(Tok::Punct, "-") || at(Tok::Punct, "~")) {
      const std::string op = t_[pos_++].text;
      l = binary(op, std::move(l), multiplicative());
    }
    return l;
  }
  ExprPtr multiplicative() {
    ExprPtr l = power();
    while (at(Tok::Punct, "*") || at(Tok::Punct, "/") || at(Tok::Punct, "//") || at(Tok::Punct, "%")) {
      const std::string op = t_[pos_++].text;
      l = binary(op, std::move(l), power());
    }
    return l;
  }
  ExprPtr power() {
    ExprPtr l = test();
    while (at(Tok::Punct, "**")) {
      ++pos_;
      l = binary("**", std::move(l), test());
    }
    return l;
  }
  ExprPtr test() {
    ExprPtr operand = filter();
    while (at_name("is")) {
      ++pos_;
      ExprPtr e = make(E::Test);
      if (at_name("not")) {
        ++pos_;
        e->negate = true;
      }
      if (at(Tok::Punct, "==") || at(Tok::Punct, "!=")) e->name = t_[pos_++].text;
      else e->name = expect(Tok::Name, "a test name after 'is'").text;
      if (!is_test(e->name)) fail("the test '" + e->name + "' is not in Tessera's Jinja subset");
      e->a.push_back(std::move(operand));
      // A test's argument: `is divisibleby(3)`, `is equalto 3`, `is in list`.
      if (at(Tok::Punct, "(")) {
        args(*e);
      } else if (e->name != "defined" && e->name != "undefined" && e->name != "none" && pos_ < t_.size() &&
                 (at(Tok::Number) || at(Tok::String) || (at(Tok::Name) && !at_name("and") && !at_name("or") &&
                                                         !at_name("if") && !at_name("else") && !at_name("is")))) {
        e->a.push_back(primary());
      }
      operand = std::move(e);
    }
    return operand;
  }
  ExprPtr filter() {
    ExprPtr operand = unary();
    while (at(Tok::Punct, "|")) {
      ++pos_;
      ExprPtr e = make(E::Filter);
      e->name = expect(Tok::Name, "a filter name after '|'").text;
      if (!is_filter(e->name)) fail("the filter '" + e->name + "' is not in Tessera's Jinja subset");
      e->a.push_back(std::move(operand));
      if (at(Tok::Punct, "(")) args(*e);
      operand = std::move(e);
    }
    return operand;
  }
  ExprPtr unary() {
    if (at(Tok::Punct, "-") || at(Tok::Punct, "+")) {
      Deeper d(*this);
      ExprPtr e = make(E::Unary);
      e->name = t_[pos_++].text;
      e->a.push_back(unary());
      return e;
    }
    return postfix(primary());
  }
  // Call arguments into e->a (after what is already there); key=value as Kwarg.
  void args(Expr& e) {
    expect(Tok::Punct, "'('", "(");
    while (!at(Tok::Punct, ")")) {
      if (pos_ >= t_.size()) fail("a call's '(' is never closed");
      if (at(Tok::Name) && pos_ + 1 < t_.size() && t_[pos_ + 1].type == Tok::Punct && t_[pos_ + 1].text == "=") {
        ExprPtr k = make(E::Kwarg);
        k->name = t_[pos_].text;
        pos_ += 2;
        k->a.push_back(expression());
        e.a.push_back(std::move(k));
      } else {
        if (at(Tok::Punct, "*") || at(Tok::Punct, "**")) fail("argument unpacking (* and **) is not in Tessera's Jinja subset");
        e.a.push_back(expression());
      }
      if (!at(Tok::Punct, ")")) expect(Tok::Punct, "',' or ')'", ",");
    }
    ++pos_;
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (at(Tok::Punct, ".")) {
        ++pos_;
        ExprPtr m = make(E::Attr);
        if (at(Tok::Number)) m->name = t_[pos_++].text;
        else m->name = expect(Tok::Name, "an attribute name after '.'").text;
        m->a.push_back(std::move(e));
        e = std::move(m);
      } else if (at(Tok::Punct, "[")) {
        ++pos_;
        std::vector<ExprPtr> parts;
        bool slice = false;
        while (!at(Tok::Punct, "]")) {
          if (pos_ >= t_.size()) fail("'[' is never closed");
          if (at(Tok::Punct, ":")) {
            parts.push_back(nullptr);
            ++pos_;
            slice = true;
          } else {
            parts.push_back(expression());
            if (at(Tok::Punct, ":")) {
              ++pos_;
              slice = true;
            }
          }
        }
        ++pos_;
        if (parts.empty()) fail("'[]' needs an index or a slice");
        ExprPtr m = make(slice ? E::Slice : E::Index);
        if (slice && parts.size() > 3) fail("a slice has at most start:stop:step");
        m->a.push_back(std::move(e));
        if (slice) {
          // HF's rule: each ':' ends a part; a part left empty is absent.
          parts.resize(3);
          for (auto& p : parts) m->a.push_back(std::move(p));
        } else {
          m->a.push_back(std::move(parts[0]));
        }
        e = std::move(m);
      } else if (at(Tok::Punct, "(")) {
        ExprPtr c = make(E::Call);
        if (e->kind == E::Attr) {
          if (!is_method(e->name)) fail("the method '" + e->name + "()' is not in Tessera's Jinja subset");
        } else if (e->kind == E::Name) {
          calls.emplace_back(e->name, e->line);
        }
        c->a.push_back(std::move(e));
        args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr primary() {
    Deeper d(*this);
    if (pos_ >= t_.size()) fail("the template ends inside an expression");
    const Token& t = t_[pos_++];
    switch (t.type) {
      case Tok::Number: {
        ExprPtr e = make(E::Literal);
        if (t.text.find('.') != std::string::npos) {
          // Digits and one point: strtod reads any length (overflow gives infinity, never an exception).
          e->literal = Value::number(std::strtod(t.text.c_str(), nullptr));
        } else {
          int64_t v = 0;
          auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
          if (r.ec != std::errc()) fail("the integer " + t.text + " is too large");
          e->literal = Value::integer(v);
        }
        return e;
      }
      case Tok::String: {
        ExprPtr e = make(E::Literal);
        std::string s = t.text;
        while (at(Tok::String)) s += t_[pos_++].text;  // adjacent strings join
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Tok::Name: {
        ExprPtr e = make(E::Name);
        e->name = t.text;
        return e;
      }
      case Tok::Punct:
        if (t.text == "(") {
          ExprPtr e = expression_tuple();
          expect(Tok::Punct, "')'", ")");
          return e;
        }
        if (t.text == "[") {
          ExprPtr e = make(E::List);
          while (!at(Tok::Punct, "]")) {
            if (pos_ >= t_.size()) fail("'[' is never closed");
            e->a.push_back(expression());
            if (!at(Tok::Punct, "]")) expect(Tok::Punct, "',' or ']'", ",");
          }
          ++pos_;
          return e;
        }
        if (t.text == "{") {
          ExprPtr e = make(E::Dict);
          while (!at(Tok::Punct, "}")) {
            if (pos_ >= t_.size()) fail("'{' is never closed");
            e->a.push_back(expression());
            expect(Tok::Punct, "':'", ":");
            e->a.push_back(expression());
            if (!at(Tok::Punct, "}")) expect(Tok::Punct, "',' or '}'", ",");
          }
          ++pos_;
          return e;
        }
        break;
      default: break;
    }
    --pos_;
    fail("unexpected '" + describe(t) + "' in an expression");
  }

  std::vector<Token> t_;
  const std::string& what_;
  size_t pos_ = 0;
  int depth_ = 0, max_depth_;
};

}  // namespace

Program parse(std::vector<Token> tokens, const std::string& what, int max_depth) {
  Program out;
  for (const Token& t : tokens)
    if (t.type == Tok::Name) out.names.insert(t.text);
  Parser p(std::move(tokens), what, max_depth);
  out.body = p.program();
  for (const auto& [n, line] : p.calls)
    TS_CHECK(is_function(n) || p.macros.count(n), what, ": line ", line, ": the function '", n,
             "()' is not in Tessera's Jinja subset (it has ", function_names(), " and the template's own macros)");
  return out;
}

}  // namespace tessera::llm::jinja
