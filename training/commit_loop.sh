#!/usr/bin/env bash
# Every INTERVAL seconds (default 300), export the sweep store to the bundled CSV and commit only
# that file (message "<csv name>: N rows"). Not needed by CI; stop it with `kill PID`.
# Usage (from the repository root): training/commit_loop.sh [STORE] [CSV] [INTERVAL]
# e.g. training/commit_loop.sh data/sweeps/bible_m3/results.sqlite bayes_scaling/datasets/bible_m3.csv
set -u
STORE=${1:-data/sweeps/bible_ptpp/results.sqlite}
CSV=${2:-bayes_scaling/datasets/bible_ptpp.csv}
INTERVAL=${3:-300}
PY=${PYTHON:-.venv/bin/python}
NAME=$(basename "$CSV" .csv)
while true; do
  if [ -f "$STORE" ]; then
    "$PY" -m training export "$STORE" "$CSV" >/dev/null
    n=$(($(wc -l < "$CSV") - 1))
    if [ -n "$(git status --porcelain -- "$CSV")" ]; then
      for attempt in $(seq 1 30); do
        if [ -e .git/index.lock ]; then sleep 2; continue; fi
        git add -- "$CSV" && git commit -q -m "$NAME: $n rows" -- "$CSV" && break
        sleep 2
      done
      echo "$(date +%H:%M:%S) committed $n rows"
    fi
  fi
  sleep "$INTERVAL"
done
