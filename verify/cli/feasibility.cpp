#include "feasibility.hpp"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "flashref/error.hpp"
#include "flashref/limits.hpp"
#include "flashref/verify/bench/memory.hpp"

namespace flashref::cli {
namespace {

using verify::proc_kib_field;  // "Key: 1234 kB" of a /proc file, in bytes (bench/memory.hpp)

// A file holding one integer (cgroup's memory.max, memory.current); -1 when absent or "max".
std::int64_t file_integer(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text)) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  return (end != nullptr && *end == '\0' && v >= 0) ? v : -1;
}

// The cgroup v2 directory of this process ("0::/path" in /proc/self/cgroup).
std::string cgroup_dir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  }
  return "/sys/fs/cgroup";
}

void take_least(MemoryAvailable& m, std::int64_t bytes, const std::string& source) {
  if (bytes < 0) return;
  if (m.bytes < 0 || bytes < m.bytes) {
    m.bytes = bytes;
    m.source = source;
  }
}

double d(std::int64_t x) {
  return static_cast<double>(x);
}

// Copies of every tensor that a judged run keeps at once: the inputs (input dtype), the gold's
// double inputs and outputs, the score-noise estimate's double inputs, and the baseline's and
// one candidate's outputs (their own dtype and a double copy each), with room for the rerun of
// the baseline backward: 56 bytes per element of Q, K, V, dO (O, dQ, dK, dV are their shapes).
constexpr double kJudgeBytesPerElement = 56.0;
// One backend run: the inputs and the outputs, in storage and as double.
constexpr double kRunBytesPerElement = 28.0;

double tensor_elements(const Problem& p) {
  return 2.0 * d(p.B) * d(p.H) * d(p.S_q) * d(p.d) + 2.0 * d(p.B) * d(p.H_kv) * d(p.S_k) * d(p.d);
}

double score_threads(const Problem& p, int threads) {
  return std::min(d(effective_threads(threads)), d(p.B) * d(p.H));
}

}  // namespace

MemoryAvailable available_memory() {
  MemoryAvailable m;
  take_least(m, proc_kib_field("/proc/meminfo", "MemAvailable"), "MemAvailable in /proc/meminfo");
  const std::string cgroup = cgroup_dir();
  const std::int64_t limit = file_integer(cgroup + "/memory.max");
  const std::int64_t usage = file_integer(cgroup + "/memory.current");
  if (limit >= 0 && usage >= 0) {
    take_least(m, std::max<std::int64_t>(limit - usage, 0), "the cgroup's memory.max - memory.current");
  }
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const std::int64_t mapped = std::max<std::int64_t>(proc_kib_field("/proc/self/status", "VmSize"), 0);
    take_least(m, std::max<std::int64_t>(static_cast<std::int64_t>(as.rlim_cur) - mapped, 0),
               "the address space limit (ulimit -v) minus what the process maps");
  }
  if (m.bytes < 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) {
      take_least(m, static_cast<std::int64_t>(pages) * page, "sysconf(_SC_AVPHYS_PAGES)");
    }
  }
  return m;
}

int effective_threads(int requested) {
  const int wanted = requested > 0 ? requested : omp_get_max_threads();
  return std::clamp(wanted, 1, kMaxThreads);
}

MemoryNeed judge_need(const Problem& p, bool backward, int threads) {
  // The gold's per-thread scratch: S and P (and dP, dS for the backward) in double, S_q x S_k
  // each; the baseline's are float and come after the gold's are freed.
  const double matrices = backward ? 4.0 : 2.0;
  const double scratch = score_threads(p, threads) * matrices * 8.0 * d(p.S_q) * d(p.S_k);
  MemoryNeed need;
  need.bytes = kJudgeBytesPerElement * tensor_elements(p) + 24.0 * d(p.B) * d(p.H) * d(p.S_q) +
               scratch;
  need.largest = scratch >= need.bytes / 2
                     ? "mostly the gold's S_q x S_k double matrices, " +
                           std::to_string(static_cast<int>(matrices)) + " per thread"
                     : "mostly copies of the tensors";
  return need;
}

MemoryNeed backend_need(const Problem& p, const std::string& name, bool backward, int threads,
                        int tile_q, int tile_k) {
  double scratch = 0.0;
  std::string what;
  if (name == "reference") {
    // The baseline's S, P (dP, dS) in float, S_q x S_k per thread.
    const double matrices = backward ? 4.0 : 2.0;
    scratch = score_threads(p, threads) * matrices * 4.0 * d(p.S_q) * d(p.S_k);
    what = "the reference's S_q x S_k float matrices, " +
           std::to_string(static_cast<int>(matrices)) + " per thread";
  } else if (name == "cpu") {
    // A few tiles per thread: S_ij, P_ij (dP_ij, dS_ij) and the Q_i, K_j, V_j, O_i tiles.
    const double bq = std::min(d(tile_q > 0 ? tile_q : 128), d(p.S_q));
    const double bk = std::min(d(tile_k > 0 ? tile_k : 128), d(p.S_k));
    scratch = d(effective_threads(threads)) * 4.0 * (4.0 * bq * bk + 8.0 * (bq + bk) * d(p.d));
    what = "the cpu backend's tiles per thread";
  }
  MemoryNeed need;
  need.bytes = kRunBytesPerElement * tensor_elements(p) + 24.0 * d(p.B) * d(p.H) * d(p.S_q) +
               scratch;
  need.largest = scratch >= need.bytes / 2 ? "mostly " + what : "mostly copies of the tensors";
  return need;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

void require_memory(const std::string& field, const Problem& p, const MemoryNeed& need) {
  const MemoryAvailable available = available_memory();
  if (available.bytes < 0 || need.bytes <= static_cast<double>(available.bytes)) return;
  char needed[64];
  std::snprintf(needed, sizeof needed, "%.0f", need.bytes);
  throw InvalidArgument(
      field, "the problem " + describe(p) + " needs about " + human_bytes(need.bytes) + " (" +
                 needed + " bytes, " + need.largest + ") but " + human_bytes(d(available.bytes)) +
                 " (" + std::to_string(available.bytes) + " bytes, " + available.source +
                 ") are available: refused before any work; give a smaller problem");
}

void check_threads(int threads, const std::string& option) {
  if (threads < 0 || threads > kMaxThreads) {
    throw InvalidArgument(option, "must be from 0 (OpenMP's default) to " +
                                      std::to_string(kMaxThreads) + ", got " +
                                      std::to_string(threads));
  }
}

void check_omp_environment() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr) return;
  // A list "4,2" gives the outer level first; that is the one a region here uses.
  char* end = nullptr;
  const long long first = std::strtoll(env, &end, 10);
  if (end != env && first > kMaxThreads) {
    throw InvalidArgument("OMP_NUM_THREADS",
                          "asks for " + std::string(env) + " threads; flashref uses at most " +
                              std::to_string(kMaxThreads) + ": unset it or set it to at most " +
                              std::to_string(kMaxThreads));
  }
}

}  // namespace flashref::cli
