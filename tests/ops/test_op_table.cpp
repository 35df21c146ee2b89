// The op list is the single source of truth: every op in ops.def must be
// documented in docs/ops.md.
#include <fstream>
#include <set>
#include <sstream>

#include "tessera/ops/op_table.h"
#include "test_util.h"

namespace tessera {
namespace {

TEST(OpTable, EveryOpIsDocumented) {
  std::ifstream f(std::string(TESSERA_SOURCE_DIR) + "/docs/ops.md");
  ASSERT_TRUE(f.good()) << "docs/ops.md is missing";
  std::stringstream ss;
  ss << f.rdbuf();
  std::string doc = ss.str();
  ASSERT_GT(ops::op_count(), 100);
  for (int i = 0; i < ops::op_count(); ++i) {
    std::string name(ops::op_table()[i].name);
    EXPECT_NE(doc.find("| `" + name + "` |"), std::string::npos) << name << " is not in docs/ops.md";
  }
}

TEST(OpTable, NamesAreUnique) {
  std::set<std::string_view> seen;
  for (int i = 0; i < ops::op_count(); ++i) EXPECT_TRUE(seen.insert(ops::op_table()[i].name).second) << ops::op_table()[i].name;
}

}  // namespace
}  // namespace tessera
