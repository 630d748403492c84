"""bench/paper.py's experiments, reduced (--quick): each produces its figure, and no kernel
they launch is faster than its roofline, computed here from the preset's own fields (DRAM
bytes / DRAM bandwidth, DPE multiply-accumulates / the DPE's rate on the PEs it ran on)."""
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def preset():
    with open(os.path.join(ROOT, "presets", "mtia-v2.json")) as f:
        return {k: v["value"] for k, v in json.load(f).items()}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper") / "quick.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MTIA_EMU_")}
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "paper.py"), "--quick",
                          "--json", str(out)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "ISCA'25" in run.stdout
    with open(out) as f:
        return json.load(f)


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def check_rooflines(kernels, p, clock_hz):
    assert kernels, "no kernel was recorded"
    dram_ps_per_byte = 1e12 / (p["dram_bandwidth_GBps"] * 1e9)
    sram_ps_per_byte = 1e12 / (p["sram_bandwidth_GBps"] * 1e9)
    for k in kernels:
        per_pe_cycle_s = 1.0 / (k["pes"] * clock_hz)
        dpe_s = (k["macs_int8"] / p["dpe_int8_macs_per_cycle"]
                 + k["macs_16bit"] / p["dpe_fp16_macs_per_cycle"]
                 + k["macs_fp32"] / p["dpe_fp32_macs_per_cycle"]) * per_pe_cycle_s
        assert k["dur_ps"] >= k["dram_bytes"] * dram_ps_per_byte * (1 - 1e-9), k
        assert k["dur_ps"] >= k["sram_bytes"] * sram_ps_per_byte * (1 - 1e-9), k
        assert k["dur_ps"] >= dpe_s * 1e12 * (1 - 1e-9), k


def test_every_experiment_has_a_figure_and_respects_rooflines(results):
    p = preset()
    peak16 = 2 * p["dpe_fp16_macs_per_cycle"] * p["pe_rows"] * p["pe_cols"] * p["clock_hz"]
    bw = p["dram_bandwidth_GBps"] * 1e9
    assert set(results) == {"gemm", "fc", "int8", "launch", "llama", "clock"}
    for name, r in results.items():
        assert "error" not in r, (name, r)
        if name != "clock":
            check_rooflines(r["kernels"], p, p["clock_hz"])

    g = results["gemm"]
    assert 0 < g["of_peak"] <= 1
    assert g["sim_ns"] * 1e-9 >= g["flops"] / peak16
    assert g["sim_ns"] * 1e-9 >= 3 * g["n"] ** 2 * 2 / bw
    # With the operands in the SRAM: no LPDDR traffic at all, every operand byte read from the
    # SRAM at least once, and the same product as the CPU's.
    assert 0 < g["sram_of_peak"] <= 1
    assert g["sram_ns"] * 1e-9 >= g["flops"] / peak16
    assert g["sram_dram_bytes"] == 0 and g["sram_bytes"] >= 3 * g["n"] ** 2 * 2
    assert g["sram_ns"] >= g["sram_roof_ns"] * (1 - 1e-9)
    assert g["sram_rel_err"] < 0.01 and g["rel_err"] < 0.01

    fc = results["fc"]
    m, n, k = fc["shape"]
    assert fc["min_bytes"] == 2 * (m * k + k * n + m * n)
    assert 0 < fc["share_min_bytes"] <= 1 and 0 < fc["share_traffic"] <= 1

    q = results["int8"]
    assert positive(q["dpe_ratio"]) and positive(q["end_to_end_ratio"])
    assert q["int8_ns"] * 1e-9 >= 2 * q["n"] ** 3 / (2 * peak16)   # int8 peak: twice fp16
    assert q["int8_ns"] >= q["int8_dram_roof_ns"]
    assert "matmul" in q["dynamic_kernels"] and not q["fallbacks"]
    assert q["rel_err"] < 0.05        # the dynamically quantized FC against a CPU fp32 one
    # Compiled: the quantization and rescaling in generated kernels around the int8 matmul.
    assert positive(q["compiled_ratio"]) and q["compiled_rel_err"] < 0.05
    assert "matmul" in q["compiled_kernels"] and q["compiled_launches"] < q["dynamic_launches"]
    assert any(k.startswith("mtia_") for k in q["compiled_kernels"])
    # In the SRAM: the int8 product exact, the fp16 one close, neither beating the DPE.
    assert q["sram_int8_exact"] and q["sram_fp16_rel_err"] < 0.01
    assert q["sram_int8_ns"] >= q["int8_flop_roof_ns"] * (1 - 1e-9)
    assert q["sram_fp16_ns"] * 1e-9 >= 2 * q["n"] ** 3 / peak16

    la = results["launch"]
    assert la["launch_ns"] == p["cp_packet_ns"] and la["replace_ns"] == p["cp_replay_packet_ns"]
    assert positive(la["eager_ns_per_job"]) and positive(la["replay_ns_per_job"])
    assert la["eager_ns_per_job"] >= la["kernel_ns"] and la["eager_gap_ns"] >= -1e-3

    ll = results["llama"]
    assert positive(ll["token_ms"]) and not ll["fallbacks"]
    assert ll["token_ms"] >= ll["token_dram_roof_ms"]
    assert ll["layer_ns"] * 1e-9 >= ll["layer_weight_bytes"] / bw

    c = results["clock"]
    assert c["at_1.1"]["clock_hz"] == 1100000000
    assert c["at_1.35"]["clock_hz"] == p["clock_hz"]
    assert not c["at_1.1"]["fallbacks"] and not c["at_1.35"]["fallbacks"]
    check_rooflines(c["at_1.1"]["kernels"], p, 1.1e9)
    check_rooflines(c["at_1.35"]["kernels"], p, p["clock_hz"])
    # a faster clock never slows the model, and cannot speed it up more than the clock ratio
    assert 0 <= c["gain"] <= p["clock_hz"] / 1.1e9 - 1 + 1e-9
