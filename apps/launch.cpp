// `tessera launch -n N [--hostfile F] [--max-restarts K] [--restart-n M] -- tessera train CONFIG`
//
// Starts the command as N ranks with Open MPI's mpirun (or, inside a Slurm
// allocation, srun --mpi=pmix), which does the real work of placing and
// wiring processes; the launcher adds what a training job needs around it:
//   - one thread pool per rank sized to its share of the host's cores, and
//     MPI's yielding wait when ranks outnumber cores (a busy-polling rank on a
//     shared core makes a 1 K-float allreduce ~1000x slower); malloc settings
//     that keep large message buffers mapped;
//   - each output line prefixed with its rank;
//   - Ctrl-C / SIGTERM forwarded as a stop request (SIGUSR2: every rank
//     checkpoints and stops together); a second one ends the job;
//   - after the first failure (a rank died, aborted, or hung past its
//     deadline) the whole job ends within --kill-timeout, even when mpirun
//     itself would wait (a host cut off), and the ranks' status records say who
//     died or hung, at which step and collective (Note [Status records]);
//   - restarts: up to --max-restarts times in all, from the newest complete
//     checkpoint, at N ranks or --restart-n M.
#include "launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "tessera/distributed/status.h"
#include "tessera/core/error.h"

namespace tessera::cli {

namespace {

volatile sig_atomic_t g_signals = 0;
extern "C" void on_launch_signal(int) { g_signals = g_signals + 1; }

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Hosts listed in an Open MPI hostfile ("name [slots=N]" lines, # comments).
int count_hosts(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK(in, "launch: cannot read the hostfile ", path);
  int hosts = 0;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t\r") != std::string::npos) ++hosts;
  }
  TS_CHECK(hosts > 0, "launch: the hostfile ", path, " lists no host");
  return hosts;
}

struct Attempt {
  int ranks;
  std::vector<std::string> command;
};

// Rewrites mpirun's "[1,3]<stdout>:text" and srun's "3: text" as "[rank 3] text".
std::string prefixed(const std::string& line, bool* is_err) {
  static const std::regex mpi(R"(^\[\d+,(\d+)\]<(stdout|stderr)>:(.*)$)");
  static const std::regex slurm(R"(^\s*(\d+): (.*)$)");
  std::smatch m;
  if (std::regex_match(line, m, mpi)) {
    *is_err = m[2] == "stderr";
    return "[rank " + m[1].str() + "] " + m[3].str();
  }
  if (std::regex_match(line, m, slurm)) return "[rank " + m[1].str() + "] " + m[2].str();
  return line;
}

bool signals_failure(const std::string& line) {
  for (const char* s : {"MPI_ABORT was invoked", "exited on signal", "non-zero exit code", "non-zero status",
                        "did not complete within", "ORTE has lost communication", "srun: error:"})
    if (line.find(s) != std::string::npos) return true;
  return false;
}

class Job {
 public:
  Job(const LaunchFlags& f, const std::string& status_dir, const Attempt& a) : f_(f), dir_(status_dir), a_(a) {}

  // Runs the attempt; returns its exit code (0: success).
  int run() {
    std::vector<std::string> argv = launcher_argv();
    int out[2], err[2];
    TS_CHECK(pipe(out) == 0 && pipe(err) == 0, "launch: pipe failed");
    pid_ = fork();
    TS_CHECK(pid_ >= 0, "launch: fork failed: ", std::strerror(errno));
    if (pid_ == 0) {
      setpgid(0, 0);  // the job in its own process group, so it can be ended as a whole
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      close(out[0]), close(out[1]), close(err[0]), close(err[1]);
      std::vector<char*> cargv;
      for (auto& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
      cargv.push_back(nullptr);
      execvp(cargv[0], cargv.data());
      std::fprintf(stderr, "launch: cannot run %s: %s\n", cargv[0], std::strerror(errno));
      _exit(127);
    }
    setpgid(pid_, pid_);
    close(out[1]), close(err[1]);
    pump(out[0], err[0]);
    close(out[0]), close(err[0]);
    int status = 0;
    waitpid(pid_, &status, 0);
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc != 0 || failed_at_ > 0) summarize(rc);
    return rc != 0 ? rc : (failed_at_ > 0 ? 1 : 0);
  }

 private:
  std::vector<std::string> launcher_argv() const {
    std::vector<std::string> v;
    if (uses_srun()) {
      v = {"srun", "--mpi=pmix", "-n", std::to_string(a_.ranks), "--label", "--kill-on-bad-exit=1"};
    } else {
      v = {"mpirun", "-np", std::to_string(a_.ranks), "--bind-to", "none", "--tag-output"};
      if (!f_.hostfile.empty()) v.insert(v.end(), {"--hostfile", f_.hostfile});
      if (oversubscribed()) v.push_back("--oversubscribe");
      if (getuid() == 0) v.push_back("--allow-run-as-root");  // containers run as root
      for (const char* var : {"OMP_NUM_THREADS", "OMPI_MCA_mpi_yield_when_idle", "GLIBC_TUNABLES",
                              "TESSERA_DIST_STATUS_DIR", "TESSERA_DIST_TIMEOUT", "TESSERA_DIST_DEBUG"})
        if (std::getenv(var)) v.insert(v.end(), {"-x", var});
    }
    v.insert(v.end(), a_.command.begin(), a_.command.end());
    return v;
  }

 public:
  bool uses_srun() const {
    return f_.launcher == "srun" || (f_.launcher == "auto" && std::getenv("SLURM_JOB_ID") && f_.hostfile.empty());
  }
  int ranks_per_host() const {
    const int hosts = f_.hostfile.empty() ? 1 : count_hosts(f_.hostfile);
    return (a_.ranks + hosts - 1) / hosts;
  }
  bool oversubscribed() const {
    return ranks_per_host() > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }

 private:
  // Copies the ranks' output with prefixes until both pipes close; watches for
  // failures and signals meanwhile.
  void pump(int out_fd, int err_fd) {
    std::string buf[2];
    pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open_fds = 2, seen_signals = 0;
    double last_check = 0;
    // After the kill, processes on other hosts (or cut off from them) may still hold the pipes: stop
    // reading a little later rather than wait for them.
    while (open_fds > 0 && !(killed_ && now() - killed_at_ > 2)) {
      poll(fds, 2, 200);
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char chunk[65536];
        ssize_t got = read(fds[i].fd, chunk, sizeof chunk);
        if (got <= 0) {
          if (!buf[i].empty()) emit(buf[i], i == 1), buf[i].clear();
          fds[i].fd = -1;
          --open_fds;
          continue;
        }
        buf[i].append(chunk, static_cast<size_t>(got));
        size_t nl;
        while ((nl = buf[i].find('\n')) != std::string::npos) {
          emit(buf[i].substr(0, nl), i == 1);
          buf[i].erase(0, nl + 1);
        }
      }
      if (g_signals > seen_signals) {
        seen_signals = g_signals;
        if (seen_signals == 1) {
          std::fprintf(stderr, "launch: stopping: every rank checkpoints and stops (again to end it now)\n");
          kill(pid_, SIGUSR2);  // mpirun forwards SIGUSR2 to the ranks: the Trainer's stop request
        } else {
          kill(-pid_, SIGTERM);
          fail("interrupted");
        }
      }
      const double t = now();
      if (t - last_check >= 1) {
        last_check = t;
        check_ranks();
      }
      if (failed_at_ > 0 && t - failed_at_ > f_.kill_timeout && !killed_) {
        std::fprintf(stderr, "launch: the job did not end within --kill-timeout %g s of the failure: killing it\n",
                     f_.kill_timeout);
        snapshot();
        kill(-pid_, SIGKILL);
        for (auto& [r, rec] : records_)  // ranks of this host only: a pid elsewhere means another process here
          if (on_this_host(rec) && alive(rec)) kill(rec.pid, SIGKILL);
        killed_ = true;
        killed_at_ = now();
      }
    }
  }

  void emit(const std::string& line, bool is_err) {
    std::string s = prefixed(line, &is_err);
    std::fprintf(is_err ? stderr : stdout, "%s\n", s.c_str());
    std::fflush(is_err ? stderr : stdout);
    if (signals_failure(line)) fail(line);
  }

  void fail(const std::string& why) {
    if (failed_at_ > 0) return;
    failed_at_ = now();
    snapshot();
  }

  static bool on_this_host(const distributed::StatusRecord& r) {
    char host[64] = {};
    gethostname(host, sizeof host - 1);
    return std::strncmp(host, r.host, sizeof host) == 0;
  }
  static bool alive(const distributed::StatusRecord& r) {
    if (!on_this_host(r)) return true;  // another host: unknown, assume so
    return kill(r.pid, 0) == 0 || errno != ESRCH;
  }

  // A local rank whose process is gone without finishing is a failure.
  void check_ranks() {
    for (int r = 0; r < a_.ranks; ++r) {
      auto rec = distributed::StatusBoard::read_file(distributed::StatusBoard::path_of(dir_, r));
      if (!rec || rec->rank != r) continue;
      records_[r] = *rec;
      if (!rec->finished && !alive(*rec)) {
        died_.insert(r);
        fail("rank " + std::to_string(r) + " died");
      }
    }
  }
  void snapshot() { check_ranks(); }

  void summarize(int rc) {
    check_ranks();
    std::fprintf(stderr, "launch: the job failed (exit %d); the ranks:\n", rc);
    for (int r = 0; r < a_.ranks; ++r) {
      auto it = records_.find(r);
      if (it == records_.end()) {
        std::fprintf(stderr, "  rank %d: no status record (it did not start, or runs on another host)\n", r);
        continue;
      }
      const auto& rec = it->second;
      const char* state = died_.count(r) ? "died" : rec.finished ? "finished" : rec.in_collective ? "waiting" : "running";
      std::fprintf(stderr, "  rank %d (%s, pid %d): %s at %s\n", r, rec.host, rec.pid, state, rec.describe().c_str());
    }
  }

  const LaunchFlags& f_;
  std::string dir_;
  Attempt a_;
  pid_t pid_ = -1;
  double failed_at_ = 0;
  bool killed_ = false;
  double killed_at_ = 0;
  std::map<int, distributed::StatusRecord> records_;
  std::set<int> died_;
};

bool is_train_command(const std::vector<std::string>& c) {
  return c.size() >= 2 && c[1] == "train";
}

bool has_flag(const std::vector<std::string>& c, const std::string& flag) {
  for (auto& s : c)
    if (s == flag || s.rfind(flag + "=", 0) == 0) return true;
  return false;
}

}  // namespace

void add_launch_command(CLI::App& app, LaunchFlags& f) {
  f.cmd = app.add_subcommand("launch", "run a command as N ranks (mpirun, or srun inside a Slurm allocation): "
                             "tessera launch -n 4 -- tessera train CONFIG");
  auto* c = f.cmd;
  c->add_option("-n,--ranks", f.n, "the number of ranks")->check(CLI::Range(1, 65536));
  c->add_option("--hostfile", f.hostfile, "Open MPI's hostfile: one host per line, 'host slots=K' (default: this host)");
  c->add_option("--max-restarts", f.max_restarts, "restart the job after a failure, at most this many times in all, "
                "from its newest complete checkpoint (--resume latest is added to a train command)")
      ->check(CLI::Range(0, 1000));
  c->add_option("--restart-n", f.restart_n, "the number of ranks after a restart (0: the same as -n)")
      ->check(CLI::Range(0, 65536));
  c->add_option("--kill-timeout", f.kill_timeout, "seconds from the first failure to the end of the whole job")
      ->check(CLI::Range(1.0, 3600.0));
  c->add_option("--restart-delay", f.restart_delay, "seconds to wait before a restart (a host coming back)")
      ->check(CLI::Range(0.0, 86400.0));
  c->add_option("--threads", f.threads, "OMP_NUM_THREADS per rank (0: the host's cores divided among its ranks; "
                "an OMP_NUM_THREADS already set wins)")
      ->check(CLI::Range(0, 4096));
  c->add_option("--launcher", f.launcher, "auto (srun inside a Slurm allocation, else mpirun), mpirun or srun")
      ->check(CLI::IsMember({"auto", "mpirun", "srun"}));
  c->add_option("command", f.command, "the command after --, e.g. tessera train CONFIG")->required();
}

int cmd_launch(const LaunchFlags& f, const std::string& self) {
  std::vector<std::string> command = f.command;
  if (command[0] == "tessera") command[0] = self;  // this build, not whichever is on PATH
  // The ranks' status records: a directory of the caller's (kept), or a fresh one (removed at the end).
  std::string dir;
  const char* given = std::getenv("TESSERA_DIST_STATUS_DIR");
  if (given && *given) {
    dir = given;
    std::filesystem::create_directories(dir);
  } else {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/tessera-launch-XXXXXX";
    std::vector<char> p(pattern.begin(), pattern.end());
    p.push_back(0);
    TS_CHECK(mkdtemp(p.data()), "launch: cannot make a status directory ", pattern, ": ", std::strerror(errno));
    dir = p.data();
    setenv("TESSERA_DIST_STATUS_DIR", dir.c_str(), 1);
  }
  // Plain log lines: mpirun gives the ranks a terminal, and a progress bar's carriage returns would run together.
  if (is_train_command(command) && !has_flag(command, "--plain")) command.push_back("--plain");

  struct sigaction sa {};
  sa.sa_handler = on_launch_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const bool user_threads = std::getenv("OMP_NUM_THREADS") != nullptr;
  int rc = 0;
  for (int attempt = 0;; ++attempt) {
    Attempt a{attempt == 0 || f.restart_n == 0 ? f.n : f.restart_n, command};
    if (attempt > 0 && is_train_command(command)) {
      if (!has_flag(command, "--resume")) a.command.insert(a.command.end(), {"--resume", "latest"});
      if (a.ranks != f.n) a.command.insert(a.command.end(), {"--set", "parallel.data=" + std::to_string(a.ranks)});
    }
    for (int r = 0; r < std::max(f.n, f.restart_n); ++r)  // the last attempt's records are not this one's
      std::filesystem::remove(distributed::StatusBoard::path_of(dir, r));
    Job job(f, dir, a);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (!user_threads) {
      const int threads = f.threads > 0 ? f.threads : std::max(1, cores / job.ranks_per_host());
      setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
    }
    if (job.oversubscribed() || job.ranks_per_host() >= cores) setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
    // Open MPI allocates a message-sized buffer per large collective; glibc maps it fresh each time
    // (the communication thread has an arena of its own), and faulting its pages in made a 64 MB
    // allreduce 16x slower than with the memory kept (docs/distributed.md). A caller's setting wins.
    if (!std::getenv("GLIBC_TUNABLES"))
      setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295:glibc.malloc.arena_max=1", 1);
    std::printf("launch: %d ranks%s with %s, %s threads each%s\n", a.ranks,
                f.hostfile.empty() ? (job.uses_srun() ? " in the Slurm allocation" : " on this host")
                                   : (" from " + f.hostfile).c_str(),
                job.uses_srun() ? "srun" : "mpirun", std::getenv("OMP_NUM_THREADS"),
                attempt > 0 ? (" (restart " + std::to_string(attempt) + " of " + std::to_string(f.max_restarts) + ")").c_str() : "");
    std::fflush(stdout);
    rc = job.run();
    if (rc == 0 || g_signals > 0 || attempt >= f.max_restarts) break;
    std::fprintf(stderr, "launch: restarting from the newest checkpoint in %g s (%d of %d restarts left)\n",
                 f.restart_delay, f.max_restarts - attempt - 1, f.max_restarts);
    for (double waited = 0; waited < f.restart_delay && g_signals == 0; waited += 0.1)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (g_signals > 0) break;
  }
  if (!(given && *given)) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return rc;
}

}  // namespace tessera::cli
