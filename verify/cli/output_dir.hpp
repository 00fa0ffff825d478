// How `flashref run` puts its outputs into --out DIR: all of them or none, and never beside the
// files of an earlier run.
//
// Every file is first written into a fresh temporary folder beside DIR (.DIR.flashref-tmp-*,
// on the same file system; inside DIR in the last case below). Only when all were written is the folder renamed into place:
// - DIR does not exist, or is empty: one rename.
// - DIR holds only outputs of an earlier run (o.npy, lse.npy, dq.npy, dk.npy, dv.npy): the old
//   folder is renamed aside, the new one into place, the old one removed. DIR never holds a mix.
// - DIR also holds other files (`--out .`), or its parent is not writable: the files are
//   written into a temporary folder inside DIR, the earlier run's outputs are removed, then
//   the new files are renamed in one by one; the other files are left alone.
// So a second run replaces the earlier outputs all together (a forward-only run removes an
// earlier run's dq/dk/dv); the note says which earlier files went. On any error the temporary
// folder is removed and DIR is as it was.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

namespace flashref::cli {

struct WrittenOutputs {
  std::vector<std::string> paths;  // DIR/name.npy, in the order given
  std::string note;                // "" or what happened to an earlier run's files
};

// Writes each (name, values) as DIR/name.npy (float32). `run_names` are every name a run can
// write (the earlier run's files to replace). Throws InvalidArgument naming --out or a file.
WrittenOutputs write_outputs(const std::string& dir,
                             const std::vector<std::pair<std::string, xt::xarray<float>>>& arrays,
                             const std::vector<std::string>& run_names);

}  // namespace flashref::cli
