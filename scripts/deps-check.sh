#!/usr/bin/env bash
# Keeps the dependency direction: cmd -> engine -> quant. Fails when
#  - quant imports anything of the module,
#  - model code (engine/model/...) imports a backend implementation,
#  - anything but cmd and engine's root imports a backend implementation (cpu, metal),
#  - the daemon (server) imports metal.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
fail=0
check() { # pkg-pattern forbidden-regex message
  for p in $(go list "$1" 2>/dev/null); do
    bad=$(go list -deps "$p" | grep -E "$2" | grep -vx "$p" || true)
    if [ -n "$bad" ]; then echo "deps-check: $p imports $(echo $bad | tr '\n' ' ')— $3"; fail=1; fi
  done
}
check "./quant/..."        "^$mod/(engine|cmd|server|metal|bench)"  "quant is a leaf package"
check "./engine/model/..." "^$mod/(engine/cpu|metal)(/|$)"          "model code never imports a backend"
check "./engine/weights/..." "^$mod/(engine/cpu|metal|server)(/|$)" "weights know no backend"
check "./server/..."       "^$mod/metal(/|$)"                       "the daemon never imports metal"
check "./engine/api/..."   "^$mod/(engine/(cpu|model|weights|tokenizer|backend)|metal|server|cmd)" "engine/api is the wire contract: no engine internals"
[ $fail = 0 ] && echo "deps-check: ok"
exit $fail
