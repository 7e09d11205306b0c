#!/usr/bin/env bash
# Copy the open-domain QA question/answer files, unchanged, into collections/qa-topics/.
# Usage: scripts/prepare_qa_topics.sh [SHARED_DATA_DIR=../shared/data]
set -euo pipefail
src="${1:-../shared/data}"
dst="collections/qa-topics"
mkdir -p "$dst/dpr" "$dst/entityquestions/test" "$dst/nq-open"
cp "$src"/dpr-topics/topics.dpr.*.test.txt "$dst/dpr/"
cp "$src"/entityquestions/test/*.test.json "$dst/entityquestions/test/"
cp "$src"/nq-open/NQ-open.dev.jsonl "$dst/nq-open/"
find "$dst" -type f -exec chmod 644 {} +
