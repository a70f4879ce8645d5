"""scripts/compat_table.py's table from synthetic phase outputs (no torch,
no kiln): pending and measured columns, failure rows, the 5% agreement line,
the doc markers. python3 -m unittest discover -s scripts -p 'test_compat_table.py'"""

import json
import pathlib
import tempfile
import unittest

import compat_table as ct

GIB = 1 << 30


def report_row(peak):
    def mem(p):
        return {"remat_none": {"planned_peak_bytes": p, "error": None, "step_program_error": None},
                "remat_auto": {"planned_peak_bytes": p // 2, "error": None},
                "min_budget": {"bytes": p // 4, "error": None}}
    return {"parameters": 384_300_000, "graph_breaks": {"count": 0, "first": None},
            "attention": {"sites": 2, "path": "causal", "head_dim": 64,
                          "implementations": ["tiled", "cudnn"]},
            "lora": {"error": None, "targets": 14, "adapter_parameters": 1_400_000},
            "memory": {"lora": mem(peak), "qlora": mem(peak - GIB)}}


def planned_doc():
    return {"settings": {"batch": 4, "seq": 1024, "layers": 2, "lora": "r=16,alpha=32"},
            "rows": {
                "llama": {"model": "Llama 3.2 1B", "parameters_full": 1_235_814_400,
                          "stage": None, "error": None, "artifact_bytes": 1,
                          "report": report_row(4 * GIB)},
                "qwen3": {"model": "Qwen3 1.7B", "parameters_full": 1_720_000_000,
                          "stage": None, "error": None, "artifact_bytes": 1,
                          "report": report_row(6 * GIB)},
                "cohere": {"model": "Command R", "parameters_full": 35_000_000_000,
                           "stage": "export", "error": "export_hf: boom | pipe"}}}


def measured_doc(ratios):
    rows = []
    for name, ratio in ratios.items():
        planned = 4 * GIB
        rows.append({"artifact": f"bench/out/compat/{name}/step.kiln", "error": None,
                     "planned": {"peak_bytes": planned},
                     "measured": {"error": None, "peak_bytes": planned * (1 + ratio),
                                  "peak_vs_planned": ratio, "step_ms_median": 12.34,
                                  "tokens_per_second": 331_900.0}})
    return {"rows": rows}


def row_of(text, label):
    return next(line for line in text.splitlines() if line.startswith("| " + label))


class RenderTest(unittest.TestCase):
    def test_pending_before_the_gpu_phase(self):
        text = ct.render(planned_doc(), None)
        row = row_of(text, "Llama 3.2 1B")
        cells = [c.strip() for c in row.strip("|").split("|")]
        self.assertEqual(cells[1], "1.24B / 384.3M")
        self.assertEqual(cells[4], "14 (1.4M)")
        self.assertEqual(cells[5], "4.00 GiB / 2.00 GiB")
        self.assertEqual(cells[8:], ["pending"] * 5)
        self.assertIn("Measured columns: pending", text)
        # A failed stage is the row's reason, '|' escaped.
        self.assertIn("export failed: export_hf: boom \\| pipe", row_of(text, "Command R"))

    def test_planned_artifact_column_from_plan_only(self):
        plan = {"llama": {"planned": {"peak_bytes": 5 * GIB}}}
        row = row_of(ct.render(planned_doc(), None, plan), "Llama 3.2 1B")
        self.assertIn("| 5.00 GiB | pending |", row)

    def test_measured_columns_and_agreement(self):
        measured = {m["artifact"].split("/")[-2]: m
                    for m in measured_doc({"llama": 0.012, "qwen3": -0.08})["rows"]}
        text = ct.render(planned_doc(), measured)
        self.assertIn("| 4.00 GiB | 4.05 GiB | +1.2% | 12.3 | 331,900 |",
                      row_of(text, "Llama 3.2 1B"))
        self.assertIn("-8.0%", row_of(text, "Qwen3 1.7B"))
        self.assertIn("2 models measured, 1 within 5%; outside: qwen3 (-8.0%).", text)

    def test_table_replaces_between_markers(self):
        with tempfile.TemporaryDirectory() as d:
            out = pathlib.Path(d)
            (out / "planned.json").write_text(json.dumps(planned_doc()))
            doc = out / "doc.md"
            doc.write_text(f"before\n{ct.BEGIN}\nold table\n{ct.END}\nafter\n")
            args = type("A", (), {"out": str(out), "doc": str(doc)})
            ct.cmd_table(args)
            ct.cmd_table(args)  # twice: still one table
            text = doc.read_text()
            self.assertTrue(text.startswith("before\n") and text.endswith(f"{ct.END}\nafter\n"))
            self.assertNotIn("old table", text)
            self.assertEqual(text.count("| Llama 3.2 1B"), 1)
            doc.write_text("no markers\n")
            with self.assertRaises(SystemExit):
                ct.cmd_table(args)


class FamiliesTest(unittest.TestCase):
    def test_at_least_twelve_families(self):
        fams = ct.families()
        classes = {cls for _, cls, _ in fams.values()}
        self.assertGreaterEqual(len(classes), 12)
        for name, (_, _, fields) in fams.items():
            self.assertTrue(any(k in fields for k in ct.LAYER_KEYS), name)


if __name__ == "__main__":
    unittest.main()
