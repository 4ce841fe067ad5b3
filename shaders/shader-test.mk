# shaders/shader-test.mk: the MSL emulation harness target, included by the
# top-level Makefile. It compiles every shaders/*.metal file as C++ with
# clang++-19 through internal/mslemu/csrc/msl_shim.h, runs every kernel on CPU
# fibers against Go references (every dispatch in three fiber orders, so a
# read of another thread's write without a barrier is reported as a race, and
# under the emulator's other checks: see shaders/README.md), and ends with the
# contract line
#   shaders: N kernels, M verified
# (N counts every MSL entry point in shaders/*.metal; M those whose emulated
# cases all ran and matched: a skipped case verifies nothing). Without
# clang++-19 the kernels are skipped (M = 0). The target fails unless M = N
# (scripts/shader-summary.sh), or SHADER_TEST_ALLOW_SKIP=1 accepts a partial
# run. The emulator's own probes (internal/mslemu: each check must catch its
# probe kernel) run too. It builds with the mslemu tag, as everything that
# runs the emulator does (the Metal backend's emulated GPU compiles only with
# it; see make test-emu).
.PHONY: shader-test
shader-test:
	@summary=$$(mktemp); log=$$(mktemp); \
	SHADER_TEST_SUMMARY=$$summary go test -count=1 -tags mslemu -run 'TestLint|TestKernels|TestVerifyKernelAccounting' ./shaders/... >$$log 2>&1; rc=$$?; \
	go test -count=1 -tags mslemu ./internal/mslemu/... >>$$log 2>&1 || rc=1; \
	cat $$log; \
	if [ ! -s $$summary ]; then echo "shaders: no summary (the test did not run)"; rm -f $$summary $$log; exit 1; fi; \
	line=$$(cat $$summary); rm -f $$summary $$log; echo "$$line"; \
	[ $$rc = 0 ] || exit $$rc; \
	./scripts/shader-summary.sh "$$line"
