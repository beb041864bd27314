"""`python -m bench [--full] [--only NAME] [--baseline-tree PATH]`: every benchmark in turn, each printing its markdown tables."""

from __future__ import annotations

import argparse
import importlib
import sys
import time

BENCHES = ("bench.bench_store", "bench.bench_embedding", "bench.bench_catalog", "bench.bench_actions", "bench.bench_code", "bench.bench_memory", "bench.bench_relevance")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="the large data sets (tens of minutes)")
    parser.add_argument("--only", action="append", help="run only these (store, embedding, catalog, actions, code, memory, relevance)")
    parser.add_argument("--baseline-tree", metavar="PATH", help="relevance: also serve this checkout and report its served ranking")
    args = parser.parse_args()
    status = 0
    for name in BENCHES:
        short = name.rsplit("_", 1)[1]
        if args.only and short not in args.only:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            print(f"(skipping {name}: not present)\n")
            continue
        started = time.perf_counter()
        extra = ["--baseline-tree", args.baseline_tree] if args.baseline_tree and short == "relevance" else []
        status |= module.main((["--full"] if args.full else []) + extra)
        print(f"_{short}: {time.perf_counter() - started:.0f} s_\n", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
