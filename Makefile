# The two commands of the README:
#   make run    build toy and run its main job on the default model
#   make test   build toy and run the whole test suite
#   make default-model   retrain models/toy-stories.gguf from nothing (~25 min on 2 cores)
BUILD ?= build
JOBS  ?= $(shell nproc)
MODEL ?= models/toy-stories.gguf

.PHONY: all deps configure build run test clean default-model

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
	$(BUILD)/toy run -m $(MODEL) -p "Once upon a time" -n 96 --temp 0.8 -s 42

# the OpenAI Node SDK the server's client test drives (pinned in tests/node/package-lock.json; npm's cache keeps it)
tests/node/node_modules/.package-lock.json: tests/node/package-lock.json
	cd tests/node && npm ci --no-audit --no-fund --loglevel=error

test: build tests/node/node_modules/.package-lock.json
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

default-model: build
	scripts/make-default-model.sh

clean:
	rm -rf $(BUILD)
