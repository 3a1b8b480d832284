#!/usr/bin/env bash
# Fails naming each C++ file that .clang-format would change (run by CTest, so CI checks it).
# Fix with: git ls-files '*.cpp' '*.h' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }
bad=$(git ls-files '*.cpp' '*.h' | while read -r f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || echo "$f"
done)
if [ -n "$bad" ]; then
  echo "check_format: not formatted with .clang-format (clang-format -i FILE):"
  echo "$bad"
  exit 1
fi
echo "check_format: $(git ls-files '*.cpp' '*.h' | wc -l) files formatted"
