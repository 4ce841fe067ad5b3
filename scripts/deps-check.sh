#!/usr/bin/env bash
# Keeps the dependency direction: cmd -> engine -> quant. Fails when
#  - quant imports anything of the module,
#  - model code (engine/model/...) imports a backend implementation or media code,
#  - weights imports a model package (it knows containers, not model names),
#  - anything but a backend implementation itself and cmd imports a backend
#    implementation (cpu, metal): only the command registers backends,
#  - the daemon (server) imports metal,
#  - engine/api (the wire contract) imports engine internals,
#  - hub (clef pull) imports anything of the module (a leaf),
#  - engine/media imports anything of the module (a leaf; its video
#    subpackage imports engine/media alone), or engine/processor
#    imports model, backend or request code.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
fail=0
check() { # pkg-pattern forbidden-regex message [allowed-regex]
  for p in $(go list "$1" 2>/dev/null); do
    bad=$(go list -deps "$p" | grep -E "$2" | grep -vx "$p" | grep -vE "${4:-^$}" || true)
    if [ -n "$bad" ]; then echo "deps-check: $p imports $(echo $bad | tr '\n' ' ')— $3"; fail=1; fi
  done
}
check "./quant/..."          "^$mod/(engine|cmd|server|metal|bench)"                     "quant is a leaf package"
check "./engine/model/..."   "^$mod/(engine/(cpu|media)|metal)(/|$)|^image(/|$)"          "model code never imports a backend or media code"
check "./engine/media/..."    "^$mod/" "media decoding is a leaf package" "^$mod/engine/media$"
check "./engine/processor/..." "^$mod/(engine/(cpu|model|backend|api|record)|metal|server|cmd)(/|$)" "the processors read decoded media and settings only"
check "./hub/..."            "^$mod/"                                                    "the Hub client and cache are a leaf package"
check "./engine/weights/..." "^$mod/(engine/(cpu|model|release|tokenizer|record|api|convert)|metal|server)(/|$)" "weights know containers, not models or backends"
check "./server/..."         "^$mod/metal(/|$)"                                          "the daemon never imports metal"
check "./engine/api/..."     "^$mod/(engine/(cpu|model|weights|tokenizer|backend|release)|metal|server|cmd)" "engine/api is the wire contract: no engine internals"
# Only cmd registers backends (by importing an implementation); the
# implementations' own packages and their tests are exempt.
for p in $(go list ./... | grep -v -E "^$mod/(cmd|engine/cpu|metal|internal/mslemu)(/|$)"); do
  bad=$(go list -deps "$p" | grep -E "^$mod/(engine/cpu|metal)$" || true)
  if [ -n "$bad" ]; then echo "deps-check: $p imports $(echo $bad | tr '\n' ' ')— only cmd registers a backend"; fail=1; fi
done
# The same for darwin/arm64, where the Metal backend exists.
for p in $(GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go list ./... | grep -v -E "^$mod/(cmd|engine/cpu|metal|internal/mslemu)(/|$)"); do
  bad=$(GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 go list -deps "$p" | grep -E "^$mod/(engine/cpu|metal)$" || true)
  if [ -n "$bad" ]; then echo "deps-check: $p imports $(echo $bad | tr '\n' ' ')on darwin/arm64 — only cmd registers a backend"; fail=1; fi
done
[ $fail = 0 ] && echo "deps-check: ok"
exit $fail
