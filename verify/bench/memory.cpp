#include "flashref/verify/bench/memory.hpp"

#include <malloc.h>

#include <fstream>
#include <sstream>

namespace flashref::verify {

std::int64_t proc_kib_field(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream fields(line.substr(key.size() + 1));
      std::int64_t kib = -1;
      fields >> kib;
      return kib < 0 ? -1 : kib * 1024;
    }
  }
  return -1;
}

namespace {

// A "Vm...:   1234 kB" line of /proc/self/status, in bytes; -1 when absent.
std::int64_t status_bytes(const std::string& key) { return proc_kib_field("/proc/self/status", key); }

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace

PeakMemory measure_peak_rss_growth(const std::function<void()>& call) {
  PeakMemory m;
  malloc_trim(0);
  const bool reset = reset_peak_rss();
  const std::int64_t before = status_bytes("VmRSS");
  call();
  const std::int64_t peak = status_bytes("VmHWM");
  if (!reset || before < 0 || peak < 0) {
    m.method = "unavailable (needs Linux /proc/self/clear_refs and VmHWM)";
    return m;
  }
  m.bytes = peak > before ? peak - before : 0;
  m.method = "peak RSS growth (malloc_trim, clear_refs=5, VmHWM - VmRSS)";
  return m;
}

std::string host_cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

}  // namespace flashref::verify
