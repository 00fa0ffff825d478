#include "output_dir.hpp"

#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "flashref/error.hpp"
#include "flashref/verify/npy.hpp"

namespace flashref::cli {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what) {
  throw InvalidArgument("--out", what);
}

// A fresh directory named like `pattern` (ending in XXXXXX) in `parent`.
fs::path make_temp_dir(const fs::path& parent, const std::string& pattern) {
  std::string path = (parent / pattern).string();
  if (mkdtemp(path.data()) == nullptr) {
    fail("cannot create a temporary folder in '" + parent.string() + "' (" + std::strerror(errno) +
         ")");
  }
  return path;
}

// Removes what it owns when the write did not complete: the temporary folder and the parents
// it created for DIR.
struct Cleanup {
  fs::path temp;
  std::vector<fs::path> created_parents;  // outermost first
  bool done = false;
  ~Cleanup() {
    if (done) return;
    std::error_code ec;
    if (!temp.empty()) fs::remove_all(temp, ec);
    for (auto it = created_parents.rbegin(); it != created_parents.rend(); ++it) {
      fs::remove(*it, ec);  // only if still empty
    }
  }
};

}  // namespace

WrittenOutputs write_outputs(const std::string& dir,
                             const std::vector<std::pair<std::string, xt::xarray<float>>>& arrays,
                             const std::vector<std::string>& run_names) {
  if (dir.empty()) fail("is empty: give a directory for the outputs");
  fs::path out = fs::path(dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "out/" -> "out"
  if (out.empty() || out == "." || out == "/" || out.filename() == "..") {
    out = fs::absolute(out).lexically_normal();
    if (out.filename().empty()) out = out.parent_path();
  }
  std::error_code ec;
  const fs::file_status status = fs::status(out, ec);
  if (fs::exists(status) && !fs::is_directory(status)) {
    fail("'" + dir + "' exists and is not a directory");
  }
  const bool existed = fs::exists(status);
  fs::path parent = out.parent_path();
  if (parent.empty()) parent = ".";
  const std::string base = out.filename().string();
  Cleanup cleanup;
  WrittenOutputs result;

  // DIR exists: what an earlier run left there, and whether anything else is there.
  const std::set<std::string> ours(run_names.begin(), run_names.end());
  std::vector<std::string> earlier;
  bool others = false;
  if (existed) {
    for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
      const std::string file = e.path().filename().string();
      if (file.ends_with(".npy") && ours.count(file.substr(0, file.size() - 4)) > 0) {
        earlier.push_back(file);
      } else {
        others = true;
      }
    }
    if (ec) fail("cannot list '" + dir + "': " + ec.message());
    std::sort(earlier.begin(), earlier.end());
  }

  // The temporary folder: beside DIR, so that it can be renamed into place. When DIR exists
  // and its parent is not writable (`--out .` in a read-only parent), or DIR holds other files,
  // inside DIR instead, and the files are moved in one by one.
  bool swap = false;
  if (!existed) {
    // Parents of DIR that do not exist yet, outermost first; removed again on failure.
    for (fs::path p = parent; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      cleanup.created_parents.insert(cleanup.created_parents.begin(), p);
      if (p == p.parent_path()) break;
    }
    for (const fs::path& p : cleanup.created_parents) {
      if (!fs::create_directory(p, ec) && ec) {
        fail("cannot create directory '" + p.string() + "': " + ec.message());
      }
    }
    cleanup.temp = make_temp_dir(parent, "." + base + ".flashref-tmp-XXXXXX");
  } else {
    if (!others) {
      std::string path = (parent / ("." + base + ".flashref-tmp-XXXXXX")).string();
      if (mkdtemp(path.data()) != nullptr) {
        cleanup.temp = path;
        swap = true;
      }
    }
    if (!swap) cleanup.temp = make_temp_dir(out, ".flashref-tmp-XXXXXX");
  }

  for (const auto& [name, values] : arrays) {
    const std::string path = (fs::path(dir) / (name + ".npy")).string();
    try {
      verify::write_npy((cleanup.temp / (name + ".npy")).string(), values);
    } catch (const InvalidArgument& e) {
      // Named as the user knows it, not by the temporary folder (which Cleanup removes).
      throw InvalidArgument(path, std::string(e.what()).substr(e.field().size() + 2) +
                                      "; nothing was written to '" + dir + "'");
    }
    result.paths.push_back(path);
  }

  if (!existed) {
    fs::rename(cleanup.temp, out, ec);
    if (ec) fail("cannot rename the outputs into '" + dir + "': " + ec.message());
    cleanup.done = true;
    return result;
  }

  std::vector<std::string> stale;  // earlier files this run does not write
  for (const std::string& file : earlier) {
    const bool rewritten = std::any_of(arrays.begin(), arrays.end(), [&](const auto& a) {
      return a.first + ".npy" == file;
    });
    if (!rewritten) stale.push_back(file);
  }
  if (!earlier.empty()) {
    result.note = "replaced the outputs of an earlier run in " + dir;
    if (!stale.empty()) {
      result.note += " (removed";
      for (const std::string& f : stale) result.note += " " + f;
      result.note += ", which this run does not write)";
    }
  }

  if (swap) {
    // Swap the folders: DIR holds the old set or the new one, never a mix.
    const fs::path old = make_temp_dir(parent, "." + base + ".flashref-old-XXXXXX");
    fs::rename(out, old, ec);
    if (ec) {
      fs::remove(old, ec);
      fail("cannot move the earlier outputs aside in '" + dir + "'");
    }
    fs::rename(cleanup.temp, out, ec);
    if (ec) {
      std::error_code ignored;
      fs::rename(old, out, ignored);  // put the earlier run back
      fail("cannot rename the outputs into '" + dir + "': " + ec.message());
    }
    cleanup.done = true;
    fs::remove_all(old, ec);
    return result;
  }

  // Other files in DIR (`--out .`): remove the earlier run's, then move the new ones in.
  for (const std::string& file : earlier) {
    fs::remove(out / file, ec);
    if (ec) fail("cannot remove the earlier output '" + (out / file).string() + "': " + ec.message());
  }
  for (const auto& [name, values] : arrays) {
    fs::rename(cleanup.temp / (name + ".npy"), out / (name + ".npy"), ec);
    if (ec) fail("cannot move '" + name + ".npy' into '" + dir + "': " + ec.message());
  }
  return result;  // Cleanup removes the now empty temporary folder
}

}  // namespace flashref::cli
