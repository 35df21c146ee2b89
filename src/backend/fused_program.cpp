// The fused elementwise program's text form, parsed and checked
// (backend/fused_program.h).
#include "backend/fused_program.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/core/numbers.h"

namespace tessera::backend {
namespace {

const char* const kUnaryNames[] = {
#define TS_X(n) #n,
    TS_UNARY_KERNELS(TS_X)
#undef TS_X
};
const char* const kBinaryNames[] = {
#define TS_X(n) #n,
    TS_BINARY_KERNELS(TS_X)
#undef TS_X
};

// Kernels whose result is not a float of the operands' dtype cannot live in
// an f32 register.
bool unary_ok(UnaryKernel k) {
  return k != UnaryKernel::Isnan && k != UnaryKernel::Isinf && k != UnaryKernel::Isfinite &&
         k != UnaryKernel::LogicalNot;
}
bool binary_ok(BinaryKernel k) {
  using B = BinaryKernel;
  return k != B::Eq && k != B::Ne && k != B::Lt && k != B::Le && k != B::Gt && k != B::Ge && k != B::LogicalAnd &&
         k != B::LogicalOr && k != B::LogicalXor;
}

constexpr int kParamSlots = 4;  // a unary kernel reads at most this many parameters

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

int parse_index(const std::string& tok, const char* prefix, const std::string& instr) {
  size_t n = std::strlen(prefix);
  TS_CHECK(tok.size() > n && tok.compare(0, n, prefix) == 0 &&
               tok.find_first_not_of("0123456789", n) == std::string::npos && tok.size() - n <= 6,
           "fused_elementwise: expected ", prefix, "<number>, got '", tok, "' in instruction '", instr, "'");
  return std::stoi(tok.substr(n));
}

// Numbers as format_double writes them (the same in every locale).
double parse_number(const std::string& tok, const std::string& instr) {
  if (tok == "inf" || tok == "-inf") return tok[0] == '-' ? -INFINITY : INFINITY;
  if (tok == "nan") return NAN;
  auto v = parse_double(tok);
  TS_CHECK(v.has_value(), "fused_elementwise: expected a number, got '", tok, "' in instruction '", instr, "'");
  return *v;
}

FusedProgram parse(const std::string& text) {
  FusedProgram p;
  std::vector<int> written;  // per register: 0 or 1
  auto reg_read = [&](const std::string& tok, const std::string& instr) {
    int r = parse_index(tok, "r", instr);
    TS_CHECK(r < static_cast<int>(written.size()) && written[r], "fused_elementwise: register ", tok,
             " is read before it is written, in instruction '", instr, "'");
    return r;
  };
  auto reg_write = [&](const std::string& tok, const std::string& instr) {
    // Registers are numbered in the order they are written (as fusion writes
    // them), so a program has no more registers than instructions.
    int r = parse_index(tok, "r", instr);
    TS_CHECK(r <= static_cast<int>(written.size()), "fused_elementwise: register ", tok, " is written before r",
             written.size(), " (registers are numbered in the order they are written), in '", instr, "'");
    TS_CHECK(r == static_cast<int>(written.size()), "fused_elementwise: register ", tok,
             " is written twice (instruction '", instr, "')");
    written.push_back(1);
    p.num_regs = std::max(p.num_regs, r + 1);
    return r;
  };
  std::stringstream ss(text);
  std::string instr;
  while (std::getline(ss, instr, ';')) {
    instr = trim(instr);
    if (instr.empty()) continue;
    size_t eq = instr.find('=');
    TS_CHECK(eq != std::string::npos, "fused_elementwise: instruction '", instr, "' has no '='");
    std::string lhs = trim(instr.substr(0, eq));
    std::vector<std::string> rhs;
    std::stringstream rs(instr.substr(eq + 1));
    for (std::string t; rs >> t;) rhs.push_back(t);
    TS_CHECK(!rhs.empty(), "fused_elementwise: instruction '", instr, "' has nothing after '='");
    FusedInstr in{};
    if (lhs.compare(0, 3, "out") == 0) {
      TS_CHECK(rhs.size() == 1, "fused_elementwise: a store is 'outK = rN', got '", instr, "'");
      in.kind = FusedInstr::kStore;
      in.dst = parse_index(lhs, "out", instr);
      TS_CHECK(in.dst <= p.num_outputs, "fused_elementwise: outputs are numbered in order; '", instr,
               "' skips out", p.num_outputs);
      in.a = reg_read(rhs[0], instr);
      p.num_outputs = std::max(p.num_outputs, in.dst + 1);
      p.code.push_back(in);
      continue;
    }
    const std::string& head = rhs[0];
    if (head.compare(0, 2, "in") == 0 && rhs.size() == 1) {
      in.kind = FusedInstr::kLoad;
      in.a = parse_index(head, "in", instr);
      TS_CHECK(in.a <= p.num_inputs, "fused_elementwise: inputs are numbered in order; '", instr, "' skips in",
               p.num_inputs);
      p.num_inputs = std::max(p.num_inputs, in.a + 1);
    } else if (head == "const") {
      TS_CHECK(rhs.size() == 2, "fused_elementwise: a constant is 'rN = const V', got '", instr, "'");
      in.kind = FusedInstr::kConst;
      in.param = static_cast<int>(p.params.size());
      p.params.push_back(parse_number(rhs[1], instr));
    } else if (head == "where") {
      TS_CHECK(rhs.size() == 4, "fused_elementwise: 'where' takes three registers, got '", instr, "'");
      in.kind = FusedInstr::kWhere;
      in.c = reg_read(rhs[1], instr);
      in.a = reg_read(rhs[2], instr);
      in.b = reg_read(rhs[3], instr);
    } else {
      // Kernel[p0,p1] rA [rB]
      std::string name = head, args;
      if (size_t lb = head.find('['); lb != std::string::npos) {
        TS_CHECK(head.back() == ']', "fused_elementwise: unclosed '[' in '", instr, "'");
        name = head.substr(0, lb);
        args = head.substr(lb + 1, head.size() - lb - 2);
      }
      int u = -1, b = -1;
      for (int i = 0; i < kNumUnary; ++i)
        if (name == kUnaryNames[i]) u = i;
      for (int i = 0; i < kNumBinary; ++i)
        if (name == kBinaryNames[i]) b = i;
      TS_CHECK(u >= 0 || b >= 0, "fused_elementwise: unknown kernel '", name, "' in instruction '", instr, "'");
      if (u >= 0) {
        TS_CHECK(unary_ok(static_cast<UnaryKernel>(u)) && rhs.size() == 2, "fused_elementwise: '", name,
                 "' is not a float-to-float kernel taking one register, in '", instr, "'");
        in.kind = FusedInstr::kUnary;
        in.kernel = static_cast<uint8_t>(u);
        in.a = reg_read(rhs[1], instr);
        in.param = static_cast<int>(p.params.size());
        std::stringstream as(args);
        int n = 0;
        for (std::string v; std::getline(as, v, ',');) {
          TS_CHECK(++n <= kParamSlots, "fused_elementwise: too many parameters in '", instr, "'");
          p.params.push_back(parse_number(trim(v), instr));
        }
        for (; n < kParamSlots; ++n) p.params.push_back(0.0);
      } else {
        TS_CHECK(binary_ok(static_cast<BinaryKernel>(b)) && rhs.size() == 3 && args.empty(), "fused_elementwise: '",
                 name, "' is not a float-to-float kernel taking two registers, in '", instr, "'");
        in.kind = FusedInstr::kBinary;
        in.kernel = static_cast<uint8_t>(b);
        in.a = reg_read(rhs[1], instr);
        in.b = reg_read(rhs[2], instr);
      }
    }
    in.dst = reg_write(lhs, instr);
    p.code.push_back(in);
  }
  TS_CHECK(p.num_outputs > 0, "fused_elementwise: the program stores no output");
  std::vector<bool> stored(p.num_outputs, false);
  for (const FusedInstr& i : p.code)
    if (i.kind == FusedInstr::kStore) {
      TS_CHECK(!stored[i.dst], "fused_elementwise: out", i.dst, " is stored twice");
      stored[i.dst] = true;
    }
  for (int k = 0; k < p.num_outputs; ++k) TS_CHECK(stored[k], "fused_elementwise: out", k, " is never stored");
  return p;
}

}  // namespace

std::shared_ptr<const FusedProgram> parse_fused_program(const std::string& text) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const FusedProgram>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(text); it != cache.end()) return it->second;
  }
  auto p = std::make_shared<const FusedProgram>(parse(text));
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() > 4096) cache.clear();  // programs are few; a flood of new ones must not grow memory
  cache.emplace(text, p);
  return p;
}

}  // namespace tessera::backend
