#!/usr/bin/env bash
# The README's layout table names every package of the module, and no other.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
want=$(go list ./... | sed "s|^$mod/\{0,1\}||" | sort)
got=$(sed -n '/<!-- layout:begin -->/,/<!-- layout:end -->/p' README.md | sed -n 's/^| `\([^`]*\)` |.*/\1/p' | sort)
if [ "$want" != "$got" ]; then
  echo "layout-check: README.md's layout table and go list ./... differ:"
  diff <(echo "$want") <(echo "$got") | sed 's/^</  missing from README:/; s/^>/  not a package:/' | grep -v '^---\|^[0-9]'
  exit 1
fi
echo "layout-check: ok ($(echo "$want" | wc -l) packages)"
