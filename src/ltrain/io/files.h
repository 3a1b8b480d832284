// File writing that never leaves a half-written file in place: write a temporary beside the target,
// fsync it, rename over the target, fsync the directory.
#pragma once
#include <functional>
#include <string>

namespace ltrain::io {

// Throws std::runtime_error naming the file when the directory is unwritable or the disk is full;
// the previous file at `path`, if any, is then untouched.
void writeFileAtomic(const std::string& path, const std::string& contents);
// Same, for writers that produce the file themselves: `write(tmp_path)` must create tmp_path.
void replaceAtomic(const std::string& path, const std::function<void(const std::string&)>& write);
std::string readFile(const std::string& path);

}  // namespace ltrain::io
