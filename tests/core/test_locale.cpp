// Numbers in files, configs, metrics and printed tensors read and write the
// same in every locale: a program embedding Tessera may call
// setlocale(LC_ALL, "") and run under a comma-decimal locale such as de_DE.
#include <gtest/gtest.h>

#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <locale>
#include <sstream>

#include "tessera/core/numbers.h"
#include "tessera/data/datasets.h"
#include "tessera/io/config.h"
#include "tessera/monitor/metrics.h"
#include "tessera/ops/ops.h"
#include "ops/op_utils.h"
#include "test_util.h"

namespace tessera {
namespace {

// de_DE.UTF-8 (decimal comma): the system's, or one made with localedef from
// Debian's locale sources (the `locales` package) into a scratch LOCPATH.
std::string comma_locale() {
  for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8"})
    if (std::setlocale(LC_ALL, name)) return name;
  const std::string dir = testing::scratch_dir("locales");
  std::filesystem::create_directories(dir);
  const std::string cmd = "localedef -i de_DE -f UTF-8 " + dir + "/de_DE.UTF-8 >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0 && !std::filesystem::exists(dir + "/de_DE.UTF-8")) return "";
  setenv("LOCPATH", dir.c_str(), 1);
  return std::setlocale(LC_ALL, "de_DE.UTF-8") ? "de_DE.UTF-8" : "";
}

TEST(Locale, NumbersDoNotDependOnTheProcessLocale) {
  const std::string name = comma_locale();
  if (name.empty()) GTEST_SKIP() << "no comma-decimal locale available (install Debian's `locales`)";
  std::locale::global(std::locale(name.c_str()));  // C++ streams too
  char probe[16];
  std::snprintf(probe, sizeof probe, "%.1f", 0.5);
  ASSERT_STREQ(probe, "0,5") << "the locale did not take effect";

  EXPECT_EQ(format_double(0.5), "0.5");
  EXPECT_EQ(format_double(1234.5, 'f', 2), "1234.50");
  EXPECT_EQ(parse_double("3.5e-4").value(), 3.5e-4);
  // Configs: "lr: 0.001" is 0.001, not 0.
  EXPECT_EQ(io::parse_yaml("lr: 0.001\n")["lr"].get<double>(), 0.001);
  // Error messages and printed tensors.
  EXPECT_EQ(detail::str(0.25), "0.25");
  std::ostringstream os;
  os << tensor(std::vector<float>{0.5f, 1.25f});
  EXPECT_NE(os.str().find("0.5000"), std::string::npos) << os.str();
  // Prometheus text.
  monitor::Registry r;
  r.set("tessera_test_value", "A value.", 0.5);
  EXPECT_NE(r.render().find("tessera_test_value 0.5\n"), std::string::npos) << r.render();
  // Fused kernels carry their parameters as text (leaky_relu's slope 0.01).
  Tensor x = tensor(std::vector<float>{-2.0f, 3.0f});
  Tensor y = ops::fused_elementwise({x}, "r0 = in0; r1 = " + ops::elementwise_kernel(ops::OpId::leaky_relu,
                                         ops::Attrs{{"negative_slope", 0.01}}, 1).value() + " r0; out0 = r1")[0];
  EXPECT_FLOAT_EQ(y.to_vector<float>()[0], -0.02f);
  // CSV files.
  const std::string dir = testing::scratch_dir("locale_csv");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/t.csv") << "a,b\n1.5,2.25\n";
  EXPECT_FLOAT_EQ(data::read_csv(dir + "/t.csv").to_vector<float>()[1], 2.25f);

  std::locale::global(std::locale::classic());
  std::setlocale(LC_ALL, "C");
}

}  // namespace
}  // namespace tessera
