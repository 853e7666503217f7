#!/usr/bin/env python3
"""The GPU check's tables as the machine-readable results file issue 49 asks for.

bench/gpu_check.sh prints the kernel benchmark (cuda_gpu_bench's markdown table, whose header
line names the ceilings it measured) and the end-to-end rows (cuda_engine_bench). This turns
both into a JSON list, one object per row, to commit as bench/results/gpu-YYYY-MM-DD.json:

  kernel rows  {"kernel", "shape", "time_us", "achieved", "unit", "ceiling", "ceiling_name",
                "percent", "target", "also"}; a row the benchmark could not run:
                {"kernel", "shape", "error", "target"}
  end to end   {"kernel": "e2e_decode", "shape": "batch N", "weights", "achieved" (decode
                tokens/s), "unit": "tok/s", "ceiling" (the decode floor), "ceiling_name": "floor",
                "percent", "target", "prefill_tok_s", "prefill_percent", "kernels_per_step"}

Targets of the end-to-end rows are issue 49's: >= 50 % of the floor at batch 1, >= 67 % beyond.
Kernel rows keep the target the benchmark printed ("-" when it has none).

usage: gpu_results_json.py --bench-log FILE [--e2e FILE] [--device TEXT] --out FILE
"""
import argparse
import json
import re
import sys

CEILINGS = re.compile(r"ceilings: copy ([0-9.]+) GB/s, bf16 GEMM ([0-9.]+) TFLOP/s")
ACHIEVED = re.compile(r"^([0-9.]+) (GB/s|TFLOP/s)$")
PERCENT = re.compile(r"^([0-9.]+)% (copy|GEMM)$")


def cells(line):
    """The cells of a markdown table row, or None for anything else (separators included)."""
    line = line.strip()
    if line.startswith("row: "):
        line = line[len("row: "):]
    if not (line.startswith("|") and line.endswith("|")) or set(line) <= set("|-: "):
        return None
    return [c.strip() for c in line[1:-1].split("|")]


def number(text):
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def kernel_rows(lines):
    """(rows, ceilings) of the kernel benchmark; the table when printed, else its `row:` lines."""
    ceilings = {}
    table, streamed = [], []
    for line in lines:
        m = CEILINGS.search(line)
        if m:
            ceilings = {"copy": float(m.group(1)), "GEMM": float(m.group(2))}
        c = cells(line)
        if c is None or len(c) < 7 or c[0] == "kernel":
            continue
        # Shapes may hold "|" themselves ("K3 gate|up …", "K-L q|k|v …"): the kernel is the
        # first cell, the last five are fixed, the shape is what lies between.
        c = [c[0], "|".join(c[1:-5])] + c[-5:]
        (streamed if line.startswith("row: ") else table).append(c)
    rows = []
    for kernel, shape, time_us, achieved, percent, target, also in table or streamed:
        if time_us == "ERROR":
            rows.append({"kernel": kernel, "shape": shape, "error": achieved, "target": target})
            continue
        a, p = ACHIEVED.match(achieved), PERCENT.match(percent)
        if a is None or p is None:
            raise ValueError(f"unreadable benchmark row: {kernel} | {shape} | {achieved} | {percent}")
        rows.append({"kernel": kernel, "shape": shape, "time_us": float(time_us),
                     "achieved": float(a.group(1)), "unit": a.group(2),
                     "ceiling": ceilings.get(p.group(2)), "ceiling_name": p.group(2),
                     "percent": float(p.group(1)), "target": target, "also": also})
    return rows


def e2e_rows(lines):
    rows = []
    for line in lines:
        c = cells(line)
        if c is None or len(c) != 9 or not c[0].isdigit():
            continue
        batch, weights, prefill, prefill_pct, decode, floor, decode_pct, _, nodes = c
        row = {"kernel": "e2e_decode", "shape": f"batch {batch}", "weights": weights,
               "achieved": number(decode), "unit": "tok/s", "ceiling": number(floor),
               "ceiling_name": "floor", "percent": number(decode_pct.rstrip("% ")),
               "target": ">=50% floor" if batch == "1" else ">=67% floor",
               "prefill_tok_s": number(prefill), "prefill_percent": number(prefill_pct.rstrip("% ")),
               "kernels_per_step": number(nodes)}
        if prefill.startswith("FAILED"):
            row = {"kernel": "e2e_decode", "shape": f"batch {batch}", "weights": weights,
                   "error": prefill, "target": row["target"]}
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench-log", required=True)
    parser.add_argument("--e2e")
    parser.add_argument("--device", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.bench_log, encoding="utf-8", errors="replace") as f:
        rows = kernel_rows(f.read().splitlines())
    if args.e2e:
        with open(args.e2e, encoding="utf-8", errors="replace") as f:
            rows += e2e_rows(f.read().splitlines())
    if args.device:
        for row in rows:
            row["device"] = args.device
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    print(f"{len(rows)} rows -> {args.out}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
