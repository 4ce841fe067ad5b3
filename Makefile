# clef — see README.md. `make demo` and `make test` work on a fresh machine.

GO        ?= go
BIN       ?= bin/clef
FUZZTIME  ?= 10s
PKGS      := ./...
# Packages whose kernels have an arm64 assembly path; run under qemu-user in `test-arm64`.
ARM64_PKGS := ./quant/... ./engine/cpu/... ./engine/model/... ./engine/tokenizer/...

.PHONY: all build demo deps test test-unit test-purego test-arm64 test-emu test-load no-emulator fuzz-smoke cross lint deps-check shader-test bench clean

all: build

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/clef

## demo: one real decision end to end (embedded tiny model unless CLEF_MODEL is set).
demo:
	$(GO) run ./cmd/clef demo

## deps: what make test needs beyond Go, installed when missing (Debian/Ubuntu:
## apt-get as root or with password-less sudo; otherwise it says what to install):
## clang-19 for the shader emulation, qemu-user for the arm64 tests, ffmpeg
## (ffmpeg and ffprobe) for video decoding and the video tests.
deps:
	@./scripts/deps.sh

## test: everything CI runs, on a fresh Debian/Ubuntu machine too (deps first).
test: deps lint cross no-emulator test-unit test-purego test-arm64 shader-test test-emu test-load fuzz-smoke
	@echo "make test: all green"

test-unit:
	$(GO) test -count=1 $(PKGS)

test-purego:
	$(GO) test -count=1 -tags purego $(PKGS)

test-arm64:
	@command -v qemu-aarch64 >/dev/null || { echo "qemu-aarch64 missing (make deps, or apt-get install qemu-user)"; exit 1; }
	GOARCH=arm64 CGO_ENABLED=0 $(GO) test -count=1 -exec qemu-aarch64 $(ARM64_PKGS)
	# the kernels once per arm64 level, each on a qemu CPU that has exactly it (CLEF_EXPECT_ISA fails the run otherwise)
	CLEF_EXPECT_ISA=i8mm GOARCH=arm64 CGO_ENABLED=0 $(GO) test -count=1 -exec 'qemu-aarch64 -cpu max' ./engine/cpu/kernels/
	CLEF_EXPECT_ISA=neon GOARCH=arm64 CGO_ENABLED=0 $(GO) test -count=1 -exec 'qemu-aarch64 -cpu cortex-a76' ./engine/cpu/kernels/
	CLEF_EXPECT_ISA=generic GOARCH=arm64 CGO_ENABLED=0 $(GO) test -count=1 -exec 'qemu-aarch64 -cpu cortex-a53' ./engine/cpu/kernels/

## test-emu: the Metal backend over the emulated GPU (the mslemu build tag):
## the conformance suite, the stacked-expert launches, selftest's checks, the
## joint head's goldens, the vision and audio towers' goldens, the composed
## thinker's and the media records end to end through the engine on the
## emulated GPU (of the last four packages only their *EmulatedMetal tests:
## test-unit runs the rest).
test-emu:
	@command -v clang++-19 >/dev/null || { echo "clang++-19 missing (make deps, or apt-get install clang-19)"; exit 1; }
	$(GO) vet -tags mslemu ./metal/... ./cmd/... ./engine/model/schemahead/ ./engine/model/vision/ ./engine/model/audio/ ./engine/model/omni/ ./engine/
	$(GO) test -count=1 -tags mslemu ./metal/... ./engine/model/schemahead/
	$(GO) test -count=1 -tags mslemu -run 'EmulatedMetal$$' ./engine/model/vision/ ./engine/model/audio/ ./engine/model/omni/ ./engine/

## test-load: the daemon's loopback load test at full size, 16 clients x 200
## decisions on the tiny model, 0 errors (plain go test runs 16 x 12).
test-load:
	CLEF_LOAD_PER_CLIENT=200 $(GO) test -count=1 -run '^TestLoadTiny$$' -v ./server/

## no-emulator: the darwin/arm64 binary links no MSL emulator (symbol table).
no-emulator:
	GO=$(GO) ./scripts/check-no-emulator.sh

fuzz-smoke:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz-smoke.sh

## cross: every package builds and vets for darwin/arm64 without cgo.
cross:
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build ./...
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) vet ./...

lint: deps-check
	./scripts/layout-check.sh
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## deps-check: dependencies point one way (cmd -> engine -> quant; no backend in model code).
deps-check:
	./scripts/deps-check.sh

bench:
	$(GO) test -run=NONE -bench=. -benchtime=1x $(PKGS)

-include shaders/shader-test.mk

clean:
	rm -rf bin
