// Peak extra host memory of a call, for `flashref bench`.
//
// Method (Linux): return freed heap pages to the kernel (malloc_trim), reset the process's
// peak resident set size (write "5" to /proc/self/clear_refs), read VmRSS, run the call, then
// read the peak (VmHWM). The growth is every page the call touched beyond what was resident:
// its heap and stack buffers, and a new thread's stack. It cannot see memory the call reuses
// from pages already resident, so it is a lower bound, and it is exact for the large buffers
// that matter here (an S x S score matrix is megabytes, far above the allocator's caches).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace flashref::verify {

struct PeakMemory {
  std::int64_t bytes = -1;  // -1 when the method is unavailable on this system
  std::string method;       // how it was measured, for reports
};

PeakMemory measure_peak_rss_growth(const std::function<void()>& call);

// A "Key:   1234 kB" line of a /proc file (/proc/self/status, /proc/meminfo), in bytes; -1 when
// absent.
std::int64_t proc_kib_field(const std::string& file, const std::string& key);

// "model name" from /proc/cpuinfo, or "unknown CPU".
std::string host_cpu_name();

}  // namespace flashref::verify
