# The two commands of the README:
#   make run    build toy and run its main job on the default model
#   make test   build toy and run the whole test suite
BUILD ?= build
JOBS  ?= $(shell nproc)
MODEL ?= ../shared/models/stories260K.gguf

.PHONY: all deps configure build run test clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	@$(MAKE) --no-print-directory deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	@echo "toy: main job on $(MODEL) (until toy trains its own default model)" >&2
	$(BUILD)/toy run -m $(MODEL) -p "Once upon a time" -n 48 --temp 0

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
