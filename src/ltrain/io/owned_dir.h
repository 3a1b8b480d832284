// Directories ltrain makes (run directories, sweep directories) carry a marker, `.ltrain`: a JSON
// file naming the kind and the patterns of the entries ltrain writes there. ltrain writes only
// into a directory that does not exist, is empty, or carries its marker of the same kind; and
// --overwrite removes only entries that match the marker's patterns, never a file it did not make
// (a user's notes in a run directory stay, and so does everything in a directory that is not
// ltrain's, which is refused whole).
#pragma once
#include <string>
#include <vector>

namespace ltrain::io {

enum class DirKind { kRun, kSweep, kExport };  // kExport: ltrain export --hf

// UsageError naming the directory and why, when ltrain must not write there: it exists and is
// not a directory, or it holds entries and no marker (or the other kind's).
void checkOwnable(const std::string& dir, DirKind kind);
// Creates `dir` if needed and writes its marker (kept as it is when already there).
void claimDir(const std::string& dir, DirKind kind);
bool hasMarker(const std::string& dir, DirKind kind);

// --overwrite: removes what ltrain wrote in `dir` (the entries its marker's patterns match; the
// directories it made, once empty), except the top-level entry `keep`. Returns the entries it
// left because ltrain did not write them.
std::vector<std::string> removeOwned(const std::string& dir, const std::string& keep = "");

}  // namespace ltrain::io
