#!/usr/bin/python3
"""The report of bench/run_all.sh: reads its run files, prints Markdown, writes the JSON.

    run_all_report.py OUT_DIR JSON CORES REPEATS EPOCHS LOAD_BEFORE LOAD_AFTER

OUT_DIR holds peak.jsonl (bench/fma_peak runs) and one WORKLOAD_SIDE_CONFIG_THREADS.jsonl per
configuration, one JSON line per repeat (bench/mlp_throughput, bench/resnet_bench,
bench/torch_mlp_bench.py, bench/torch_resnet_bench.py).
"""
import datetime
import glob
import json
import os
import platform
import sys

WORKLOADS = {
    "mlp": ("MLP, Fashion-MNIST, global batch 128, Adam", "samples/s", "steady_samples_per_sec"),
    "train32": ("ResNet50 train 32×32 b32, Adam", "images/s", "images_per_sec"),
    "train224": ("ResNet50 train 224×224 b8, Adam", "images/s", "images_per_sec"),
    "infer224": ("ResNet50 inference 224×224 b8", "images/s", "images_per_sec"),
}
# keel against the faster PyTorch configuration (issue 13's targets on 2 cores).
TARGETS = {"mlp": 2.0, "train32": 3.0, "train224": 1.3, "infer224": 1.3}
# The MLP's FLOPs per training sample (2 per multiply-add): forward 784*128 + 128*10; backward the
# kernels' gradients (as many) and the second layer's input gradient (128*10): the first layer's input
# gradient is computed by neither side, the images needing none.
MLP_FLOPS_PER_SAMPLE = 2 * (2 * (784 * 128 + 128 * 10) + 128 * 10)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_runs(out, peak_per_core, cores):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
        name = os.path.basename(path)[:-len(".jsonl")]
        if name == "peak":
            continue
        workload, side, config, threads = name.split("_")
        lines = [json.loads(l) for l in open(path) if l.strip()]
        if not lines:
            print(f"run_all: {name} produced no result; left out of the report", file=sys.stderr)
            continue
        field = WORKLOADS[workload][2]
        best = max(lines, key=lambda d: d[field])
        value = best[field]
        gflops = value * MLP_FLOPS_PER_SAMPLE * 1e-9 if workload == "mlp" else best["gflops"]
        used = min(int(threads), cores)
        run = {
            "workload": workload, "side": side, "config": None if config == "-" else config,
            "threads": int(threads), "value": value, "unit": WORKLOADS[workload][1],
            "all_values": [d[field] for d in lines], "gflops": round(gflops, 2),
            "version": best.get("torch_version"),
            "fraction_of_peak": round(gflops / (peak_per_core * used), 4),
        }
        if "against_device" in best:
            # Steps in turns with another device (resnet_bench --against): every round of every repeat.
            run["against"] = {"device": best["against_device"],
                              "all_values": [d["against_" + field] for d in lines],
                              "round_ratios": [r for d in lines for r in d["round_ratios"]]}
        runs.append(run)
    return runs


def best_of(runs, workload, side, config=None):
    pick = [r for r in runs if r["workload"] == workload and r["side"] == side and
            (config is None or r["config"] == config)]
    return max(pick, key=lambda r: r["value"]) if pick else None


def summary_rows(runs):
    rows = []
    for w in WORKLOADS:
        keel, torch = best_of(runs, w, "keel", "cpu"), best_of(runs, w, "pytorch")
        if keel and torch:
            rows.append({"comparison": f"{w}: keel `cpu` / PyTorch", "keel": keel, "reference": torch,
                         "ratio": keel["value"] / torch["value"], "target": TARGETS[w]})
    v38, cpu = best_of(runs, "mlp", "keel", "v3-8"), best_of(runs, "mlp", "keel", "cpu")
    if v38 and cpu:
        rows.append({"comparison": "mlp: keel `v3-8` / keel `cpu`", "keel": v38, "reference": cpu,
                     "ratio": v38["value"] / cpu["value"], "target": 0.95})
    for w in ("train32", "train224", "infer224"):
        for r in runs:
            if r["workload"] == w and r["config"] and r["config"].startswith("custom:") and "against" in r:
                a = r["against"]
                one = {"side": "keel", "config": a["device"], "threads": r["threads"],
                       "value": max(a["all_values"]), "all_values": a["all_values"]}
                ratios = a["round_ratios"]
                rows.append({"comparison": f"{w}: keel `{r['config']}` / `{a['device']}` on {r['threads']} threads, "
                                           f"steps in turns (median of {len(ratios)} rounds; quartiles "
                                           f"{quantile(ratios, 0.25):.2f}-{quantile(ratios, 0.75):.2f})",
                             "keel": r, "reference": one, "ratio": quantile(ratios, 0.5), "target": 0.95})
    return rows


def quantile(values, q):
    v = sorted(values)
    return v[int(q * (len(v) - 1) + 0.5)]


def describe(r):
    if r["side"] == "pytorch":
        who = "PyTorch, set_flush_denormal" if r["config"] == "flush" else "PyTorch"
    else:
        who = f"keel `{r['config']}`"
    return f"{who}, {r['threads']} thread{'s' if r['threads'] > 1 else ''}"


def main():
    out, json_path, cores, repeats, epochs, load_before, load_after = sys.argv[1:8]
    cores = int(cores)
    peaks = [json.loads(l) for l in open(os.path.join(out, "peak.jsonl")) if l.strip()]
    peak = max(p["peak_gflops_per_core"] for p in peaks)
    runs = load_runs(out, peak, cores)
    summary = summary_rows(runs)

    torch_versions = sorted({r["version"] for r in runs if r.get("version")})
    print(f"{cpu_model()}, {cores} hardware threads; fp32 FMA peak {peak:.1f} GFLOP/s per core (bench/fma_peak, "
          f"best of {len(peaks)}). PyTorch {', '.join(torch_versions) or '(not run)'}. Best of {repeats} interleaved "
          f"repeats; MLP: {epochs} epochs, the first left out. Load average before: {load_before}; after: {load_after}.\n")
    print("| comparison | keel | reference | ratio | target |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for s in summary:
        k, ref = s["keel"], s["reference"]
        print(f"| {s['comparison']} | {k['value']:,.1f} ({describe(k)}) | {ref['value']:,.1f} ({describe(ref)}) | "
              f"{s['ratio']:.2f} | ≥ {s['target']:.2f} |")
    print("\n| workload | run | throughput | GFLOP/s | of peak |")
    print("| --- | --- | ---: | ---: | ---: |")
    order = {w: i for i, w in enumerate(WORKLOADS)}
    for r in sorted(runs, key=lambda r: (order[r["workload"]], r["side"], r["config"] or "", r["threads"])):
        print(f"| {WORKLOADS[r['workload']][0]} | {describe(r)} | {r['value']:,.1f} {r['unit']} | {r['gflops']:.1f} | "
              f"{r['fraction_of_peak']:.0%} |")

    with open(json_path, "w") as f:
        json.dump({
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu_model(), "hardware_threads": cores, "peak_gflops_per_core": peak,
            "repeats": int(repeats), "mlp_epochs": int(epochs), "load_before": load_before, "load_after": load_after,
            "runs": runs,
            "summary": [{"comparison": s["comparison"], "value": s["keel"]["value"], "reference": s["reference"]["value"],
                         "ratio": round(s["ratio"], 4), "target": s["target"]} for s in summary],
        }, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
