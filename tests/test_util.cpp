#include "test_util.h"

#include <sys/resource.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <tuple>
#include <filesystem>

namespace tessera::testing {

::testing::AssertionResult all_close(const Tensor& a_in, const Tensor& b_in, double rtol, double atol) {
  if (!a_in.defined() || !b_in.defined())
    return ::testing::AssertionFailure() << "undefined tensor (a " << a_in.defined() << ", b " << b_in.defined() << ")";
  if (!IntArrayRef(a_in.shape()).equals(b_in.shape()))
    return ::testing::AssertionFailure() << "shapes differ: " << shape_str(a_in.shape()) << " vs "
                                         << shape_str(b_in.shape());
  Tensor a = a_in.detach().to(DType::F64).contiguous(), b = b_in.detach().to(DType::F64).contiguous();
  const double* pa = a.data_ptr<double>();
  const double* pb = b.data_ptr<double>();
  double worst = 0;
  int64_t wi = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    bool na = std::isnan(pa[i]), nb = std::isnan(pb[i]);
    if (na || nb) {
      if (na != nb) return ::testing::AssertionFailure() << "NaN mismatch at flat index " << i << ": " << pa[i] << " vs " << pb[i] << "\n" << a_in << "\n" << b_in;
      continue;
    }
    if (std::isinf(pa[i]) || std::isinf(pb[i])) {
      if (pa[i] != pb[i]) return ::testing::AssertionFailure() << "inf mismatch at flat index " << i << ": " << pa[i] << " vs " << pb[i];
      continue;
    }
    double err = std::fabs(pa[i] - pb[i]) - (atol + rtol * std::fabs(pb[i]));
    if (err > worst) {
      worst = err;
      wi = i;
    }
  }
  if (wi >= 0)
    return ::testing::AssertionFailure() << "mismatch at flat index " << wi << ": " << pa[wi] << " vs " << pb[wi]
                                         << " (rtol " << rtol << ", atol " << atol << ")\nactual:   " << a_in
                                         << "\nexpected: " << b_in;
  return ::testing::AssertionSuccess();
}

std::string scratch_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("tessera_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

Tensor rand_f64(IntArrayRef shape, double lo, double hi, uint64_t seed) {
  Generator g(seed + 12345);
  return ops::uniform(shape, lo, hi, DType::F64, &g);
}

namespace {

// <fn(inputs), v>, computed without autograd.
double project(const Fn& fn, const TensorList& inputs, const Tensor& v) {
  NoGradGuard ng;
  Tensor out = fn(inputs);
  return ops::sum(ops::mul(out.to(DType::F64), v)).item<double>();
}

// Numerical gradient of scalar(inputs) w.r.t. every element of inputs[i].
Tensor numeric_grad(const std::function<double(const TensorList&)>& scalar, const TensorList& inputs, size_t i,
                    double eps) {
  Tensor x = inputs[i];
  Tensor g = zeros(x.shape(), DType::F64);
  Tensor xc = x.detach().contiguous();
  double* gp = g.data_ptr<double>();
  for (int64_t j = 0; j < xc.numel(); ++j) {
    TensorList in = inputs;
    Tensor plus = xc.clone(), minus = xc.clone();
    plus.data_ptr<double>()[j] += eps;
    minus.data_ptr<double>()[j] -= eps;
    in[i] = plus;
    double fp = scalar(in);
    in[i] = minus;
    double fm = scalar(in);
    gp[j] = (fp - fm) / (2 * eps);
  }
  return g;
}

// The inputs that require grad, and their positions.
void requiring_grad(const TensorList& inputs, TensorList& wrt, std::vector<size_t>& idx) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      wrt.push_back(inputs[i]);
      idx.push_back(i);
    }
}

}  // namespace

::testing::AssertionResult gradcheck(const Fn& fn, const TensorList& inputs, double eps, double atol, double rtol) {
  Tensor out = fn(inputs);
  if (!out.requires_grad()) return ::testing::AssertionFailure() << "output does not require grad";
  Tensor v = rand_f64(out.shape(), -1, 1, 7).to(out.dtype());
  TensorList wrt;
  std::vector<size_t> idx;
  requiring_grad(inputs, wrt, idx);
  TensorList analytic = autograd::grad({out}, wrt, {v}, false, false, true);
  for (size_t k = 0; k < wrt.size(); ++k) {
    Tensor num = numeric_grad([&](const TensorList& in) { return project(fn, in, v.to(DType::F64)); }, inputs, idx[k], eps);
    Tensor an = analytic[k].defined() ? analytic[k] : zeros_like(num);
    auto r = all_close(an, num, rtol, atol);
    if (!r) return ::testing::AssertionFailure() << "gradient of input " << idx[k] << " differs from finite differences: " << r.message();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult gradgradcheck(const Fn& fn, const TensorList& inputs, double eps, double atol, double rtol) {
  TensorList wrt;
  std::vector<size_t> idx;
  requiring_grad(inputs, wrt, idx);
  Tensor out0 = fn(inputs);
  Tensor v = rand_f64(out0.shape(), -1, 1, 11);
  TensorList us;
  for (size_t k = 0; k < wrt.size(); ++k) us.push_back(rand_f64(wrt[k].shape(), -1, 1, 20 + k));
  // F(inputs) = sum_k <d<fn, v>/d input_k, u_k>
  auto F_graph = [&](const TensorList& in) {
    Tensor out = fn(in);
    TensorList w;
    for (size_t k = 0; k < idx.size(); ++k) w.push_back(in[idx[k]]);
    TensorList g = autograd::grad({out}, w, {v.to(out.dtype())}, true, true, true);
    Tensor total = zeros({}, DType::F64);
    for (size_t k = 0; k < g.size(); ++k)
      if (g[k].defined()) total = ops::add(total, ops::sum(ops::mul(g[k], us[k])));
    return total;
  };
  Tensor F = F_graph(inputs);
  if (!F.requires_grad()) return ::testing::AssertionSuccess();  // gradient is constant in the inputs
  TensorList analytic = autograd::grad({F}, wrt, {}, false, false, true);
  for (size_t k = 0; k < wrt.size(); ++k) {
    auto scalar = [&](const TensorList& in) {
      TensorList fresh;
      for (size_t i = 0; i < in.size(); ++i) {
        Tensor t = in[i].defined() ? in[i].detach().clone() : Tensor();
        if (t.defined() && inputs[i].requires_grad()) t.requires_grad_(true);
        fresh.push_back(t);
      }
      return F_graph(fresh).item<double>();
    };
    Tensor num = numeric_grad(scalar, inputs, idx[k], eps);
    Tensor an = analytic[k].defined() ? analytic[k] : zeros_like(num);
    auto r = all_close(an, num, rtol, atol);
    if (!r) return ::testing::AssertionFailure() << "second derivative w.r.t. input " << idx[k] << " differs: " << r.message();
  }
  return ::testing::AssertionSuccess();
}

int cli(const std::string& args, std::string* out) {
  std::string cmd = std::string(TESSERA_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  out->clear();
  while (size_t n = fread(buf, 1, sizeof buf, p)) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The CLI as a child process with `args` and extra environment entries,
// its stdout and stderr on a pipe; {pid, read end}, or {-1, -1}.
static std::pair<int, int> spawn_cli(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return {-1, -1};
  std::vector<std::string> argv_s{TESSERA_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.push_back(*e);
  env_s.insert(env_s.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    close(pipefd[0]);
    close(pipefd[1]);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(pipefd[1]);
  return {pid, pipefd[0]};
}

CliProcess start_cli(const std::vector<std::string>& args) {
  CliProcess p;
  std::tie(p.pid, p.out) = spawn_cli(args, {});
  return p;
}

bool CliProcess::read_until(const std::string& text) {
  char buf[512];
  while (log.find(text) == std::string::npos) {
    const ssize_t n = read(out, buf, sizeof buf);
    if (n <= 0) return false;
    log.append(buf, static_cast<size_t>(n));
  }
  return true;
}

int CliProcess::port() const {
  const std::string at = "listening on http://127.0.0.1:";
  const size_t i = log.find(at);
  return i == std::string::npos ? 0 : std::atoi(log.c_str() + i + at.size());
}

int CliProcess::stop() {
  if (pid <= 0) return -1;
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  pid = -1;
  char buf[512];
  for (ssize_t n; (n = read(out, buf, sizeof buf)) > 0;) log.append(buf, static_cast<size_t>(n));
  close(out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

CliRun run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  CliRun r;
  const auto [pid, out] = spawn_cli(args, env);
  if (pid < 0) return r;
  char buf[4096];
  for (ssize_t n; (n = read(out, buf, sizeof buf)) > 0;) r.output.append(buf, static_cast<size_t>(n));
  close(out);
  int status = 0;
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) != pid) return r;
  r.max_rss_kb = ru.ru_maxrss;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

}  // namespace tessera::testing
