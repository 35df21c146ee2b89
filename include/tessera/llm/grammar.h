#pragma once
// Grammars that constrain what a request generates: GBNF text (llama.cpp's
// grammar format) compiled to rules over bytes, a matcher that follows the
// bytes of the tokens a request takes, and the token masks it allows.
//
//   auto g = llm::Grammar::parse(R"(root ::= "yes" | "no")");
//   llm::TokenTrie trie(tokenizer);            // once per vocabulary
//   llm::GrammarMatcher m(g);
//   const llm::TokenMask& allowed = m.allowed(trie);   // before each token
//   m.accept(tokenizer.piece(token));                   // after it
//
// Note [Byte-level grammars]
// A GBNF character class names Unicode code points, but a token may end
// inside a character (byte-fallback tokens, byte-level BPE), so the matcher
// reads bytes. The compiler turns each class into alternatives of byte-set
// sequences (the UTF-8 encodings of its code point ranges, split where the
// lead byte's range changes), literals into their bytes, and repetitions
// into helper rules; a grammar is then rules of byte sets and rule
// references. The matcher is a pushdown automaton over bytes: its state is a
// set of stacks of positions in rules, each top at a byte set (an empty
// stack: the text may end here). A byte advances every stack whose top set
// holds it; the others drop out; none left: the bytes are not in the
// language. Left recursion would expand forever and is an error at parse time.
//
// Note [Token masks]
// The tokens allowed next are those whose bytes the matcher can read from its
// state. They are found by walking a trie of the vocabulary's token bytes
// from that state, cutting each subtree whose prefix leaves no stack, and
// kept per state in the grammar's cache: a JSON grammar comes back to the
// same few states over and over (inside a string, after a comma), so most
// tokens find their mask there. End-of-generation tokens are allowed only
// where the text may end; other tokens without bytes (control tokens) never.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::llm {

class Tokenizer;

struct GrammarElement {
  enum Kind : uint8_t {
    End,   // the end of the rule's last alternative
    Alt,   // the end of an alternative; another begins after it
    Rule,  // a reference to rule `index`
    Set,   // a byte in byte set `index`
  };
  Kind kind = End;
  uint32_t index = 0;
};

class TokenTrie;
// A bit per token: allowed (1) or not.
using TokenMask = std::vector<uint32_t>;
inline bool mask_allows(const TokenMask& m, int32_t t) { return (m[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1; }

class Grammar {
 public:
  // Compiles GBNF text (rules `name ::= alternatives`; "literals", [classes],
  // [^negated], `.`, groups, `*` `+` `?` `{m}` `{m,}` `{m,n}`, `#` comments)
  // with `root` as the start rule. An error names the line, the column and
  // what was expected, an undefined rule, or a left-recursive one; a grammar
  // of more than `max_elements` elements once its repetitions are written
  // out is an error too (one from a request must stay small).
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf, const std::string& root = "root",
                                              size_t max_elements = 1 << 20);
  ~Grammar();

  size_t rule_count() const { return rules_.size(); }
  const std::vector<GrammarElement>& rule(uint32_t i) const { return rules_[i]; }
  const std::string& rule_name(uint32_t i) const { return names_[i]; }
  uint32_t root() const { return root_; }
  bool in_set(uint32_t set, uint8_t byte) const { return (sets_[set][byte >> 6] >> (byte & 63)) & 1; }

 private:
  friend class GrammarMatcher;
  friend struct GrammarCompiler;
  Grammar() = default;
  struct Pos {
    uint32_t rule, at;
    auto operator<=>(const Pos&) const = default;
  };
  using Stack = std::vector<Pos>;
  void expand(Stack s, std::vector<Stack>& out, int depth) const;
  // The matcher's states, made as they are reached (Note [Byte-level
  // grammars]): each a set of stacks, its transitions by byte and its mask.
  // Guarded by mu_: requests that share a grammar share what was found.
  struct State;
  uint32_t intern(std::vector<Stack> stacks) const;
  int32_t next(uint32_t state, uint8_t byte) const;  // -1: the byte is not allowed
  std::shared_ptr<const TokenMask> mask(uint32_t state, const TokenTrie& trie) const;

  std::vector<std::vector<GrammarElement>> rules_;
  std::vector<std::string> names_;
  std::vector<std::array<uint64_t, 4>> sets_;
  uint32_t root_ = 0;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<State>> states_;
  mutable std::unordered_map<std::string, uint32_t> state_ids_;
};

// The vocabulary's token bytes (Tokenizer::piece) as a trie, for masks.
class TokenTrie {
 public:
  explicit TokenTrie(const Tokenizer& tokenizer);
  int32_t vocab() const { return vocab_; }

 private:
  friend class Grammar;
  struct Node {
    uint32_t first_child = 0, child_count = 0;  // into children_, sorted by byte
    uint32_t first_token = 0, token_count = 0;  // into tokens_: the tokens whose bytes end here
  };
  std::vector<Node> nodes_;
  std::vector<std::pair<uint8_t, uint32_t>> children_;  // (byte, node)
  std::vector<int32_t> tokens_;
  std::vector<int32_t> end_tokens_;  // end-of-generation tokens
  int32_t vocab_ = 0;
};

// Where a request is in its grammar. Copies are cheap (a state number).
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Reads these bytes; false (and no change) if the grammar does not allow them.
  bool accept(std::string_view bytes);
  // Whether the text may end here, and whether it must (nothing may follow).
  bool can_end() const;
  bool must_end() const;
  // The tokens whose bytes may come next, and the end-of-generation tokens
  // where the text may end (Note [Token masks]).
  std::shared_ptr<const TokenMask> allowed(const TokenTrie& trie) const;

  const Grammar& grammar() const { return *g_; }

 private:
  std::shared_ptr<const Grammar> g_;
  uint32_t state_ = 0;
};

}  // namespace tessera::llm
