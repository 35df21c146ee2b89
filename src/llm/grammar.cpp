// GBNF grammars over bytes, their matcher and token masks (include/tessera/llm/grammar.h).
#include "tessera/llm/grammar.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "tessera/core/error.h"
#include "tessera/llm/tokenizer.h"

namespace tessera::llm {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr size_t kMaxStacks = 4096;   // stacks in one state: more is an ambiguous grammar
constexpr size_t kMaxStates = 200000;  // states found for one grammar
constexpr int kMaxDepth = 2000;        // rule references expanded at once

// ---- The parsed form: rules of alternatives of sequences of items.

struct Item;
using Seq = std::vector<Item>;
using Alts = std::vector<Seq>;
struct Item {
  enum Kind { Literal, Class, Ref, Group } kind = Literal;
  std::vector<uint32_t> text;                         // Literal: code points
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // Class: code point ranges (after negation)
  std::string name;                                   // Ref
  Alts group;                                         // Group
  int64_t min = 1, max = 1;                           // repetition (max -1: no bound)
};

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  std::vector<std::pair<std::string, Alts>> rules() {
    std::vector<std::pair<std::string, Alts>> out;
    space(true);
    while (i_ < s_.size()) {
      std::string n = name();
      space(false);
      if (s_.substr(i_, 3) != "::=") fail("'::=' after the rule name '" + n + "'");
      i_ += 3;
      space(true);
      Alts a = alternatives(false);
      if (i_ < s_.size() && s_[i_] != '\n' && s_[i_] != '\r') fail("the end of the line after rule '" + n + "'");
      out.emplace_back(std::move(n), std::move(a));
      space(true);
    }
    return out;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string& expected) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') ++line, col = 1;
      else ++col;
    }
    const std::string found = i_ >= s_.size() ? "the end of the grammar"
                                               : "'" + std::string(s_.substr(i_, std::min<size_t>(12, s_.size() - i_))) + "'";
    TS_ERROR("grammar: line ", line, ", column ", col, ": expected ", expected, ", found ", found);
  }
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  void space(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string name() {
    const size_t b = i_;
    while (i_ < s_.size() && name_char(s_[i_])) ++i_;
    if (i_ == b) fail("a rule name (letters, digits, '-', '_')");
    return std::string(s_.substr(b, i_ - b));
  }
  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) fail(std::to_string(digits) + " hex digits");
      const char c = s_[i_];
      v = v * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) fail("a Unicode scalar value");
    return v;
  }
  // One character of a literal or class, escapes decoded.
  uint32_t character() {
    if (i_ >= s_.size()) fail("a character");
    const auto c = static_cast<unsigned char>(s_[i_]);
    if (c == '\\') {
      ++i_;
      if (i_ >= s_.size()) fail("an escape after '\\'");
      const char e = s_[i_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return static_cast<uint32_t>(e);
        default: --i_; fail("one of the escapes \\n \\r \\t \\0 \\xHH \\uHHHH \\UHHHHHHHH \\\\ \\\" \\[ \\] \\- \\^");
      }
    }
    // UTF-8.
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > s_.size()) fail("UTF-8 text");
    uint32_t v = n == 1 ? c : c & (0xFF >> (n + 1));
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s_[i_ + k]);
      if ((b & 0xC0) != 0x80) fail("UTF-8 text");
      v = (v << 6) | (b & 0x3F);
    }
    i_ += n;
    return v;
  }
  Alts alternatives(bool nested) {
    Alts a;
    a.push_back(sequence(nested));
    while (at('|')) {
      ++i_;
      space(true);
      a.push_back(sequence(nested));
    }
    return a;
  }
  Seq sequence(bool nested) {
    Seq seq;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      Item it;
      if (c == '"') {
        ++i_;
        while (!at('"')) {
          if (i_ >= s_.size()) fail("'\"' to end the literal");
          it.text.push_back(character());
        }
        ++i_;
      } else if (c == '[') {
        ++i_;
        const bool negated = at('^');
        if (negated) ++i_;
        std::vector<std::pair<uint32_t, uint32_t>> r;
        while (!at(']')) {
          if (i_ >= s_.size()) fail("']' to end the character class");
          const uint32_t lo = character();
          uint32_t hi = lo;
          if (at('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
            ++i_;
            hi = character();
            if (hi < lo) fail("a range whose end is not below its start");
          }
          r.emplace_back(lo, hi);
        }
        ++i_;
        it.kind = Item::Class;
        it.ranges = normalize(std::move(r), negated);
        if (it.ranges.empty()) fail("a character class that matches something");
      } else if (c == '.') {
        ++i_;
        it.kind = Item::Class;
        it.ranges = normalize({}, true);
      } else if (c == '(') {
        ++i_;
        space(true);
        it.kind = Item::Group;
        it.group = alternatives(true);
        if (!at(')')) fail("')' to close the group");
        ++i_;
      } else if (name_char(c)) {
        it.kind = Item::Ref;
        it.name = name();
      } else {
        break;  // '|', ')', a newline, the end: the sequence is over
      }
      space(nested);
      // Repetition.
      if (at('*') || at('+') || at('?')) {
        const char r = s_[i_++];
        it.min = r == '+' ? 1 : 0;
        it.max = r == '?' ? 1 : -1;
        space(nested);
      } else if (at('{')) {
        ++i_;
        space(false);
        it.min = number();
        it.max = it.min;
        space(false);
        if (at(',')) {
          ++i_;
          space(false);
          it.max = at('}') ? -1 : number();
          space(false);
        }
        if (!at('}')) fail("'}' to close the repetition");
        ++i_;
        if (it.max >= 0 && it.max < it.min) fail("a repetition {m,n} with m <= n");
        space(nested);
      }
      seq.push_back(std::move(it));
    }
    return seq;
  }
  int64_t number() {
    const size_t b = i_;
    int64_t v = 0;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      v = v * 10 + (s_[i_++] - '0');
      if (v > 100000) fail("a repetition count of at most 100000");
    }
    if (i_ == b) fail("a number");
    return v;
  }
  // Sorted, merged ranges without the surrogates; complemented when negated.
  static std::vector<std::pair<uint32_t, uint32_t>> normalize(std::vector<std::pair<uint32_t, uint32_t>> r, bool negated) {
    std::sort(r.begin(), r.end());
    std::vector<std::pair<uint32_t, uint32_t>> m;
    for (const auto& x : r) {
      if (!m.empty() && x.first <= m.back().second + 1) m.back().second = std::max(m.back().second, x.second);
      else m.push_back(x);
    }
    if (negated) {
      std::vector<std::pair<uint32_t, uint32_t>> c;
      uint32_t from = 0;
      for (const auto& x : m) {
        if (x.first > from) c.emplace_back(from, x.first - 1);
        from = x.second + 1;
      }
      if (from <= kMaxCodePoint) c.emplace_back(from, kMaxCodePoint);
      m = std::move(c);
    }
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (const auto& [lo, hi] : m) {  // cut out U+D800..U+DFFF
      if (hi < 0xD800 || lo > 0xDFFF) out.emplace_back(lo, hi);
      else {
        if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
        if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
      }
    }
    return out;
  }
};

void utf8_encode(uint32_t c, uint8_t* out, int& n) {
  if (c < 0x80) {
    out[0] = static_cast<uint8_t>(c);
    n = 1;
  } else if (c < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    n = 2;
  } else if (c < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    n = 3;
  } else {
    out[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
    out[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    out[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    n = 4;
  }
}

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;  // one per byte of an encoding

// The UTF-8 encodings of code points [lo, hi] (both of one encoded length)
// as sequences of byte ranges: split until every byte after the first
// ranges over all its continuation values, or the lead bytes are equal.
void utf8_split(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  uint8_t a[4], b[4];
  int n = 0, m = 0;
  utf8_encode(lo, a, n);
  utf8_encode(hi, b, m);
  for (int i = 1; i < n; ++i) {
    const uint32_t mask = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        utf8_split(lo, lo | mask, out);
        utf8_split((lo | mask) + 1, hi, out);
        return;
      }
      if ((hi & mask) != mask) {
        utf8_split(lo, (hi & ~mask) - 1, out);
        utf8_split(hi & ~mask, hi, out);
        return;
      }
    }
  }
  ByteRanges r;
  for (int i = 0; i < n; ++i) r.emplace_back(a[i], b[i]);
  out.push_back(std::move(r));
}

std::vector<ByteRanges> utf8_sequences(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  static const uint32_t kEnd[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  std::vector<ByteRanges> out;
  for (auto [lo, hi] : ranges) {
    uint32_t from = 0;
    for (uint32_t end : kEnd) {
      const uint32_t l = std::max(lo, from), h = std::min(hi, end);
      if (l <= h) utf8_split(l, h, out);
      from = end + 1;
    }
  }
  return out;
}

}  // namespace

// ---- Lowering the parsed rules to byte sets and references.

struct GrammarCompiler {
  Grammar& g;
  size_t max_elements;
  std::map<std::string, uint32_t> ids;
  std::vector<bool> defined;
  std::map<std::array<uint64_t, 4>, uint32_t> set_ids;
  size_t elements = 0;

  uint32_t rule_id(const std::string& name) {
    auto [it, added] = ids.emplace(name, static_cast<uint32_t>(g.rules_.size()));
    if (added) {
      g.rules_.emplace_back();
      g.names_.push_back(name);
      defined.push_back(false);
    }
    return it->second;
  }
  uint32_t helper(const std::string& base) {
    for (size_t k = g.rules_.size();; ++k) {
      const std::string n = base + "-" + std::to_string(k);
      if (!ids.count(n)) {
        const uint32_t id = rule_id(n);
        defined[id] = true;
        return id;
      }
    }
  }
  uint32_t set_id(const std::array<uint64_t, 4>& bits) {
    auto [it, added] = set_ids.emplace(bits, static_cast<uint32_t>(g.sets_.size()));
    if (added) g.sets_.push_back(bits);
    return it->second;
  }
  uint32_t range_set(uint8_t lo, uint8_t hi) {
    std::array<uint64_t, 4> bits{};
    for (unsigned b = lo; b <= hi; ++b) bits[b >> 6] |= uint64_t{1} << (b & 63);
    return set_id(bits);
  }
  void push(std::vector<GrammarElement>& out, GrammarElement e) {
    if (++elements > max_elements)
      TS_ERROR("grammar: more than ", max_elements, " elements once its repetitions are written out; make it smaller");
    out.push_back(e);
  }
  void define(uint32_t id, const Alts& alts) {
    std::vector<GrammarElement> out;
    const std::string base = g.names_[id];
    for (size_t a = 0; a < alts.size(); ++a) {
      for (const Item& it : alts[a]) emit(it, out, base);
      push(out, {a + 1 == alts.size() ? GrammarElement::End : GrammarElement::Alt, 0});
    }
    g.rules_[id] = std::move(out);
  }
  // A rule holding one item once (for repetitions), or the rule it names.
  uint32_t as_rule(const Item& it, const std::string& base) {
    if (it.kind == Item::Ref) return rule_id(it.name);
    Item once = it;
    once.min = once.max = 1;
    const uint32_t id = helper(base);
    define(id, Alts{Seq{once}});
    return id;
  }
  void emit(const Item& it, std::vector<GrammarElement>& out, const std::string& base) {
    if (it.min != 1 || it.max != 1) {
      // x{m,n}: x m times, then up to n - m more (nested optional rules), or any more (a loop).
      const uint32_t x = as_rule(it, base);
      for (int64_t k = 0; k < it.min; ++k) push(out, {GrammarElement::Rule, x});
      if (it.max < 0) {
        const uint32_t loop = helper(base);  // loop ::= x loop |
        std::vector<GrammarElement> body;
        push(body, {GrammarElement::Rule, x});
        push(body, {GrammarElement::Rule, loop});
        push(body, {GrammarElement::Alt, 0});
        push(body, {GrammarElement::End, 0});
        g.rules_[loop] = std::move(body);
        push(out, {GrammarElement::Rule, loop});
      } else if (it.max > it.min) {
        uint32_t inner = 0;
        for (int64_t k = 0; k < it.max - it.min; ++k) {  // opt_k ::= x opt_{k-1} |
          const uint32_t opt = helper(base);
          std::vector<GrammarElement> body;
          push(body, {GrammarElement::Rule, x});
          if (k > 0) push(body, {GrammarElement::Rule, inner});
          push(body, {GrammarElement::Alt, 0});
          push(body, {GrammarElement::End, 0});
          g.rules_[opt] = std::move(body);
          inner = opt;
        }
        push(out, {GrammarElement::Rule, inner});
      }
      return;
    }
    switch (it.kind) {
      case Item::Literal:
        for (uint32_t c : it.text) {
          uint8_t b[4];
          int n = 0;
          utf8_encode(c, b, n);
          for (int k = 0; k < n; ++k) push(out, {GrammarElement::Set, range_set(b[k], b[k])});
        }
        break;
      case Item::Class: {
        const std::vector<ByteRanges> seqs = utf8_sequences(it.ranges);
        if (std::all_of(seqs.begin(), seqs.end(), [](const ByteRanges& r) { return r.size() == 1; })) {
          std::array<uint64_t, 4> bits{};  // one byte: one set
          for (const ByteRanges& r : seqs)
            for (unsigned b = r[0].first; b <= r[0].second; ++b) bits[b >> 6] |= uint64_t{1} << (b & 63);
          push(out, {GrammarElement::Set, set_id(bits)});
          break;
        }
        const uint32_t id = helper(base);  // class ::= seq1 | seq2 | ...
        std::vector<GrammarElement> body;
        for (size_t s = 0; s < seqs.size(); ++s) {
          for (const auto& [lo, hi] : seqs[s]) push(body, {GrammarElement::Set, range_set(lo, hi)});
          push(body, {s + 1 == seqs.size() ? GrammarElement::End : GrammarElement::Alt, 0});
        }
        g.rules_[id] = std::move(body);
        push(out, {GrammarElement::Rule, id});
        break;
      }
      case Item::Ref: push(out, {GrammarElement::Rule, rule_id(it.name)}); break;
      case Item::Group:
        if (it.group.size() == 1) {
          for (const Item& x : it.group[0]) emit(x, out, base);
        } else {
          const uint32_t id = helper(base);
          define(id, it.group);
          push(out, {GrammarElement::Rule, id});
        }
        break;
    }
  }

  // Left recursion: a rule that can begin with itself (through rules that
  // may be empty) would make the matcher expand forever.
  void check_left_recursion() {
    const size_t n = g.rules_.size();
    std::vector<bool> empty(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (empty[r]) continue;
        bool alt_empty = true;
        for (const GrammarElement& e : g.rules_[r]) {
          if (e.kind == GrammarElement::Alt || e.kind == GrammarElement::End) {
            if (alt_empty) {
              empty[r] = changed = true;
              break;
            }
            alt_empty = true;
          } else if (e.kind == GrammarElement::Set || !empty[e.index]) {
            alt_empty = false;
          }
        }
      }
    }
    // firsts[r]: the rules r may begin with.
    std::vector<std::vector<uint32_t>> firsts(n);
    for (size_t r = 0; r < n; ++r) {
      bool leading = true;
      for (const GrammarElement& e : g.rules_[r]) {
        if (e.kind == GrammarElement::Alt || e.kind == GrammarElement::End) {
          leading = true;
        } else if (leading) {
          if (e.kind == GrammarElement::Rule) firsts[r].push_back(e.index);
          leading = e.kind == GrammarElement::Rule && empty[e.index];
        }
      }
    }
    std::vector<int> mark(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t start = 0; start < n; ++start) {
      if (mark[start]) continue;
      path.push_back({start, 0});
      mark[start] = 1;
      while (!path.empty()) {
        auto& [r, k] = path.back();
        if (k == firsts[r].size()) {
          mark[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t f = firsts[r][k++];
        if (mark[f] == 1)
          TS_ERROR("grammar: rule '", g.names_[f], "' is left-recursive (it can begin with itself, or repeats "
                   "something that can be empty); write the repetition with * or + instead");
        if (mark[f] == 0) {
          mark[f] = 1;
          path.push_back({f, 0});
        }
      }
    }
  }
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, const std::string& root, size_t max_elements) {
  auto parsed = Parser(gbnf).rules();
  std::shared_ptr<Grammar> g(new Grammar());
  GrammarCompiler c{*g, max_elements, {}, {}, {}, 0};
  for (const auto& [name, alts] : parsed) {
    const uint32_t id = c.rule_id(name);
    if (c.defined[id]) TS_ERROR("grammar: rule '", name, "' is defined twice");
    c.defined[id] = true;
  }
  for (const auto& [name, alts] : parsed) c.define(c.ids.at(name), alts);
  for (size_t r = 0; r < g->rules_.size(); ++r)
    if (!c.defined[r]) TS_ERROR("grammar: rule '", g->names_[r], "' is used but not defined");
  auto it = c.ids.find(root);
  if (it == c.ids.end()) TS_ERROR("grammar: no rule '", root, "' to start from");
  g->root_ = it->second;
  c.check_left_recursion();
  // State 0, the start: each of the root's alternatives.
  std::vector<Stack> start;
  const std::vector<GrammarElement>& r = g->rules_[g->root_];
  for (uint32_t at = 0; at < r.size(); ++at)
    if (at == 0 || r[at - 1].kind == GrammarElement::Alt) {
      Stack t;
      if (r[at].kind != GrammarElement::End && r[at].kind != GrammarElement::Alt) t.push_back({g->root_, at});
      g->expand(std::move(t), start, 0);
    }
  std::lock_guard<std::mutex> lock(g->mu_);
  g->intern(std::move(start));
  return g;
}

// ---- The matcher's states (Notes [Byte-level grammars], [Token masks]).

struct Grammar::State {
  std::vector<Stack> stacks;
  bool can_end = false, must_end = true;
  std::array<int32_t, 256> next;  // -2: not found yet; -1: not allowed
  std::shared_ptr<const TokenMask> mask;
  const TokenTrie* mask_trie = nullptr;
};

Grammar::~Grammar() = default;

// Rule references on top of s expanded until each stack's top is a byte set
// (or the stack is empty), into out.
void Grammar::expand(Stack s, std::vector<Stack>& out, int depth) const {
  if (depth > kMaxDepth) TS_ERROR("grammar: rules nest more than ", kMaxDepth, " deep");
  if (s.empty()) {
    out.push_back(std::move(s));
    return;
  }
  const Pos p = s.back();
  const GrammarElement& e = rules_[p.rule][p.at];
  if (e.kind == GrammarElement::Set) {
    out.push_back(std::move(s));
    return;
  }
  // A reference: its continuation stays below, each alternative of the rule goes on top.
  s.pop_back();
  const GrammarElement& after = rules_[p.rule][p.at + 1];
  if (after.kind != GrammarElement::End && after.kind != GrammarElement::Alt) s.push_back({p.rule, p.at + 1});
  const std::vector<GrammarElement>& r = rules_[e.index];
  for (uint32_t at = 0; at < r.size(); ++at) {
    const bool start = at == 0 || r[at - 1].kind == GrammarElement::Alt;
    if (!start) continue;
    Stack t = s;
    if (r[at].kind != GrammarElement::End && r[at].kind != GrammarElement::Alt) t.push_back({e.index, at});
    expand(std::move(t), out, depth + 1);
  }
}

uint32_t Grammar::intern(std::vector<Stack> stacks) const {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > kMaxStacks)
    TS_ERROR("grammar: more than ", kMaxStacks, " ways to read the text at once; the grammar is too ambiguous");
  std::string key;
  for (const Stack& s : stacks) {
    for (const Pos& p : s) key.append(reinterpret_cast<const char*>(&p), sizeof p);
    key.append(sizeof(Pos), '\xff');
  }
  auto [it, added] = state_ids_.emplace(std::move(key), static_cast<uint32_t>(states_.size()));
  if (!added) return it->second;
  if (states_.size() >= kMaxStates) TS_ERROR("grammar: more than ", kMaxStates, " matcher states");
  auto st = std::make_unique<State>();
  st->next.fill(-2);
  for (const Stack& s : stacks) {
    if (s.empty()) st->can_end = true;
    else st->must_end = false;
  }
  st->stacks = std::move(stacks);
  states_.push_back(std::move(st));
  return it->second;
}

int32_t Grammar::next(uint32_t state, uint8_t byte) const {
  int32_t& n = states_[state]->next[byte];
  if (n != -2) return n;
  std::vector<Stack> out;
  for (const Stack& s : states_[state]->stacks) {
    if (s.empty()) continue;
    const Pos p = s.back();
    if (!in_set(rules_[p.rule][p.at].index, byte)) continue;
    Stack t(s.begin(), s.end() - 1);
    const GrammarElement& after = rules_[p.rule][p.at + 1];
    if (after.kind != GrammarElement::End && after.kind != GrammarElement::Alt) t.push_back({p.rule, p.at + 1});
    expand(std::move(t), out, 0);
  }
  n = out.empty() ? -1 : static_cast<int32_t>(intern(std::move(out)));  // states live behind pointers: n stays valid
  return n;
}

std::shared_ptr<const TokenMask> Grammar::mask(uint32_t state, const TokenTrie& trie) const {
  State& st = *states_[state];
  if (st.mask && st.mask_trie == &trie) return st.mask;
  auto m = std::make_shared<TokenMask>((static_cast<size_t>(trie.vocab_) + 31) / 32, 0u);
  auto allow = [&](int32_t t) { (*m)[static_cast<size_t>(t) >> 5] |= 1u << (t & 31); };
  // Depth-first over the trie, each node with the state its bytes lead to.
  std::vector<std::pair<uint32_t, uint32_t>> todo = {{0, state}};  // (node, state)
  while (!todo.empty()) {
    const auto [node, s] = todo.back();
    todo.pop_back();
    const TokenTrie::Node& n = trie.nodes_[node];
    for (uint32_t c = 0; c < n.child_count; ++c) {
      const auto [byte, child] = trie.children_[n.first_child + c];
      const int32_t to = next(s, byte);
      if (to < 0) continue;
      const TokenTrie::Node& cn = trie.nodes_[child];
      for (uint32_t k = 0; k < cn.token_count; ++k) allow(trie.tokens_[cn.first_token + k]);
      todo.emplace_back(child, static_cast<uint32_t>(to));
    }
  }
  if (st.can_end)
    for (int32_t t : trie.end_tokens_) allow(t);
  st.mask = std::move(m);
  st.mask_trie = &trie;
  return st.mask;
}

TokenTrie::TokenTrie(const Tokenizer& tok) : vocab_(tok.size()) {
  // Tokens sorted by their bytes: each node's children and tokens come out contiguous.
  std::vector<std::pair<std::string, int32_t>> pieces;
  for (int32_t t = 0; t < vocab_; ++t) {
    if (tok.is_end_of_generation(t)) {
      end_tokens_.push_back(t);
      continue;
    }
    std::string p = tok.piece(t);
    if (!p.empty()) pieces.emplace_back(std::move(p), t);  // no bytes (control tokens): never allowed
  }
  std::sort(pieces.begin(), pieces.end());
  // Build by insertion into a temporary map-based trie, then flatten breadth-first.
  struct Tmp {
    std::map<uint8_t, uint32_t> kids;
    std::vector<int32_t> tokens;
  };
  std::vector<Tmp> tmp(1);
  for (const auto& [bytes, t] : pieces) {
    uint32_t n = 0;
    for (unsigned char b : bytes) {
      auto it = tmp[n].kids.find(b);
      if (it == tmp[n].kids.end()) {
        tmp.emplace_back();
        it = tmp[n].kids.emplace(b, static_cast<uint32_t>(tmp.size() - 1)).first;
      }
      n = it->second;
    }
    tmp[n].tokens.push_back(t);
  }
  nodes_.resize(tmp.size());
  for (size_t n = 0; n < tmp.size(); ++n) {
    nodes_[n].first_child = static_cast<uint32_t>(children_.size());
    nodes_[n].child_count = static_cast<uint32_t>(tmp[n].kids.size());
    for (const auto& [b, k] : tmp[n].kids) children_.emplace_back(b, k);
    nodes_[n].first_token = static_cast<uint32_t>(tokens_.size());
    nodes_[n].token_count = static_cast<uint32_t>(tmp[n].tokens.size());
    tokens_.insert(tokens_.end(), tmp[n].tokens.begin(), tmp[n].tokens.end());
  }
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  TS_CHECK(g_ != nullptr, "GrammarMatcher: no grammar");
}

bool GrammarMatcher::accept(std::string_view bytes) {
  std::lock_guard<std::mutex> lock(g_->mu_);
  uint32_t s = state_;
  for (unsigned char b : bytes) {
    const int32_t n = g_->next(s, b);
    if (n < 0) return false;
    s = static_cast<uint32_t>(n);
  }
  state_ = s;
  return true;
}

bool GrammarMatcher::can_end() const {
  std::lock_guard<std::mutex> lock(g_->mu_);
  return g_->states_[state_]->can_end;
}

bool GrammarMatcher::must_end() const {
  std::lock_guard<std::mutex> lock(g_->mu_);
  return g_->states_[state_]->must_end;
}

std::shared_ptr<const TokenMask> GrammarMatcher::allowed(const TokenTrie& trie) const {
  std::lock_guard<std::mutex> lock(g_->mu_);
  return g_->mask(state_, trie);
}

}  // namespace tessera::llm
