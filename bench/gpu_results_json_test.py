#!/usr/bin/env python3
"""gpu_results_json.py on the GPU check's output: the rows written as cuda_gpu_bench's FormatRow
prints them (gpu_bench.cc: "| %s | %s | %.1f | %.0f %s | %.0f%% %s | %s | %s |", an error row
"| %s | %s | ERROR | %s | | %s | |") and as gpu_check.sh prints the end-to-end rows."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "gpu_results_json.py")


def format_row(kernel, shape, us, achieved, flop_bound, pct, target, note=""):
    """gpu_bench.cc's FormatRow, for rows that ran."""
    return "| %s | %s | %.1f | %.0f %s | %.0f%% %s | %s | %s |" % (
        kernel, shape, us, achieved, "TFLOP/s" if flop_bound else "GB/s", pct,
        "GEMM" if flop_bound else "copy", target, note)


ROWS = [
    format_row("MlaPagedDecode", "K-L H32 B64 ctx32K splits2", 1153.7, 2098.4, False, 49.6,
               ">=80% copy"),
    format_row("GroupedGemm", "K3 gate|up E64 rows 16384", 3725.3, 194.2, True, 23.9,
               ">=60% GEMM", "12 GB/s"),
    "| KdaDecodeStep_f32 | K3 H96 B64 | ERROR | out of memory: cudaMalloc | | >=70% copy | |",
]
BENCH_LOG = "\n".join(
    ["ceilings measured", *("row: " + r for r in ROWS), "",
     "## GPU kernel benchmark (ceilings: copy 4231 GB/s, bf16 GEMM 813 TFLOP/s)", "",
     "| kernel | shape | time (us) | achieved | % of ceiling | target | also |",
     "|---|---|---:|---:|---:|---|---|", *ROWS, ""])
E2E = "\n".join([
    "| batch | weights | prefill tok/s | prefill % floor | decode tok/s | decode floor tok/s |"
    " decode % floor | decode time in Execute | kernels per decode step |",
    "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    "| 1 | bf16 | 28010 | 31.2% | 805 | 8902 | 9.0% | 97.1% | 214 |",
    "| 64 | bf16 | 28868 | 32.0% | 39644 | 95574 | 41.5% | 99.0% | 214 |",
    "| 1 | bf16, no PDL | FAILED rc=124 | | | | | | |",
    ""])


def run(bench_log, e2e=None):
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, text in (("bench.log", bench_log), ("e2e.md", e2e)):
            if text is None:
                continue
            paths[name] = os.path.join(tmp, name)
            with open(paths[name], "w") as f:
                f.write(text)
        out = os.path.join(tmp, "gpu.json")
        cmd = [sys.executable, SCRIPT, "--bench-log", paths["bench.log"], "--out", out,
               "--device", "NVIDIA H200"]
        if e2e is not None:
            cmd += ["--e2e", paths["e2e.md"]]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


class GpuResultsJsonTest(unittest.TestCase):
    def test_kernel_rows_take_the_ceilings_the_header_names(self):
        rows = run(BENCH_LOG)
        self.assertEqual(len(rows), 3)  # the table, not the streamed row: lines again
        mla, gemm, kda = rows
        self.assertEqual(mla["kernel"], "MlaPagedDecode")
        self.assertEqual(mla["shape"], "K-L H32 B64 ctx32K splits2")
        self.assertEqual((mla["achieved"], mla["unit"], mla["ceiling"]), (2098.0, "GB/s", 4231.0))
        self.assertEqual((mla["percent"], mla["target"]), (50.0, ">=80% copy"))
        self.assertEqual((gemm["unit"], gemm["ceiling"], gemm["ceiling_name"]),
                         ("TFLOP/s", 813.0, "GEMM"))
        self.assertEqual((gemm["time_us"], gemm["also"]), (3725.3, "12 GB/s"))
        self.assertEqual(gemm["shape"], "K3 gate|up E64 rows 16384")  # a "|" inside a cell
        self.assertEqual(kda["error"], "out of memory: cudaMalloc")
        self.assertNotIn("percent", kda)
        self.assertTrue(all(r["device"] == "NVIDIA H200" for r in rows))

    def test_streamed_rows_stand_in_for_a_table_never_printed(self):
        log = "\n".join(line for line in BENCH_LOG.splitlines()
                        if line.startswith("row: ") or "ceilings: copy" in line)
        rows = run(log)
        self.assertEqual([r["kernel"] for r in rows],
                         ["MlaPagedDecode", "GroupedGemm", "KdaDecodeStep_f32"])

    def test_end_to_end_rows_carry_issue_49s_targets(self):
        rows = [r for r in run(BENCH_LOG, E2E) if r["kernel"] == "e2e_decode"]
        self.assertEqual([r["shape"] for r in rows], ["batch 1", "batch 64", "batch 1"])
        one, many, failed = rows
        self.assertEqual((one["achieved"], one["ceiling"], one["percent"]), (805.0, 8902.0, 9.0))
        self.assertEqual((one["target"], many["target"]), (">=50% floor", ">=67% floor"))
        self.assertEqual((one["kernels_per_step"], one["prefill_tok_s"]), (214.0, 28010.0))
        self.assertEqual((failed["weights"], failed["error"]), ("bf16, no PDL", "FAILED rc=124"))

    def test_an_unreadable_row_fails_loudly(self):
        bad = BENCH_LOG.replace("2098 GB/s", "2098 GB per s")
        with self.assertRaises(subprocess.CalledProcessError):
            run(bad)


if __name__ == "__main__":
    unittest.main()
