"""Benchmark: dataset throughput of the engines (samples/s), Ray's per-task overhead and start-up, worker memory.

    python benchmarks/throughput.py [--models demo ppocr_cls_a8w8 mobilenetv2_a8w8] [--workers N] [--rounds 2]

For each model (the committed demo model always; PP-OCR mobile v2 cls A8W8 and MobileNetV2-224 A8W8, the
EfficientNet-class model, when models/build.py has them in its cache) one job runs every shard of samples through
``run_tasks`` with ``--engine local --workers 1`` (in this process), ``--engine local --workers N`` (spawned
processes) and ``--engine ray`` (N actors on a local cluster of N CPUs started once here), in interleaved rounds
(a shared machine's load hits every engine alike), and its integers are checked identical across engines. Per
job: the wall time (worker start-up and model lowering included), the time to the first result, and the steady
rate (samples answered after the first N results over the time they took). The scaling ratio is the steady rate
of N workers over that of 1 (the target is >= 0.9 N); "workers busy" is the sum of the tasks' own times over
the sum, per worker, of the span from its first task's start to its last one's end (1.0: the engine never leaves a worker idle, so
the scaling is what the cores give), next to the time per sample inside the tasks, wall and CPU (the wall time
grows past the CPU time when the machine's cores are shared with other work). Then: the start-up of N actors (an empty set-up, then the
model's), an empty task's round trip on one actor (empty, and carrying a 224x224x3 sample as uint8, as float32,
and a shard of 16 float32 samples), empty tasks per second through the dispatcher (and through the local pool), and the resident memory of a
worker process before and after lowering and running MobileNetV2. Every thread pool is pinned to one thread.
"""
from __future__ import annotations

import os

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
for _var in THREAD_VARS:  # before numpy: one thread per worker, N workers on N cores
    os.environ[_var] = "1"

import argparse  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import numpy as np  # noqa: E402

import engine_tasks  # noqa: E402  (tests/engine_tasks.py: module-level jobs the workers import)
from npu_sim.runtime import engine_ray  # noqa: E402
from npu_sim.runtime.engines import EngineOptions, TaskFailed, run_tasks  # noqa: E402

DEMO = ROOT / "models" / "demo"
# model -> (samples per job, samples per shard)
SIZES = {"demo": (14400, 120), "ppocr_cls_a8w8": (384, 12), "mobilenetv2_a8w8": (192, 6)}


def model_job(name: str, samples: int, shard: int):
    """``(setup arg, shards)`` for a model, or None when it is not in the model cache."""
    if name == "demo":
        x = np.load(DEMO / "digits_test.npz")["x"]
        arg = {"model": str(DEMO / "digits_cnn.qdq.onnx"), "input_shapes": {"input": (1, 1, 8, 8)}}
        feeds = {"input": np.resize(x, (samples,) + x.shape[1:])}
    else:
        from models.build import artifact_dir, sample_inputs
        path = artifact_dir() / f"{name}.onnx"
        if not path.exists():
            print(f"{name}: not in the model cache ({path}); skipped (pytest tests/test_real_models.py builds it)")
            return None
        views = sample_inputs(name, 8)
        feeds = {k: np.resize(np.concatenate([v[k] for v in views]), (samples,) + views[0][k].shape[1:])
                 for k in views[0]}
        arg = {"model": str(path)}
    return arg, [{k: v[i:i + shard] for k, v in feeds.items()} for i in range(0, samples, shard)]


def timed_job(setup, arg, task, shards, options, workers: int) -> dict:
    """Wall time, first result, steady rate; with ``run_raw_timed`` also how busy the workers were (the sum of
    the tasks' own times over the sum, per worker, of the span from its first task's start to its last one's end)
    and the time per sample inside the tasks."""
    t0 = time.perf_counter()
    times, sizes, results = [], [], {}
    for i, result in run_tasks(setup, arg, task, shards, options):
        if isinstance(result, TaskFailed):
            sys.exit(f"task {i} failed on {options}: {result.error}")
        times.append(time.perf_counter() - t0)
        sizes.append(len(next(iter(shards[i].values()))) if isinstance(shards[i], dict) else 1)
        results[i] = result
    k = min(workers, len(times) - 1)
    steady = sum(sizes[k:]) / (times[-1] - times[k - 1]) if k >= 1 else sum(sizes) / times[-1]
    out = {"wall": times[-1], "first": times[0], "steady": steady, "rate": sum(sizes) / times[-1]}
    if task is engine_tasks.run_raw_timed:
        busy = sum(r["end"] - r["start"] for r in results.values())
        per_worker: dict = {}
        for r in results.values():
            s, e = per_worker.get(r["pid"], (r["start"], r["end"]))
            per_worker[r["pid"]] = (min(s, r["start"]), max(e, r["end"]))
        out["busy"] = busy / sum(e - s for s, e in per_worker.values())
        out["ms_per_sample"] = busy / sum(sizes) * 1e3
        out["cpu_ms_per_sample"] = sum(r["cpu"] for r in results.values()) / sum(sizes) * 1e3
        results = {i: r["out"] for i, r in results.items()}
    out["results"] = results
    return out


def same_integers(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        x.keys() == y.keys() and all(np.array_equal(x[n], y[n]) and x[n].dtype == y[n].dtype for n in x)
        for x, y in ((a[i], b[i]) for i in a))


def engines_table(models: list[str], n: int, rounds: int) -> list[dict]:
    configs = [("local", 1), ("local", n), ("ray", n)]
    rows = []
    for name in models:
        job = model_job(name, *SIZES.get(name, (64, 8)))
        if job is None:
            continue
        arg, shards = job
        runs: dict = {c: [] for c in configs}
        reference = None
        for _ in range(rounds):
            for kind, w in configs:
                r = timed_job(engine_tasks.load_model, arg, engine_tasks.run_raw_timed, shards,
                              EngineOptions(kind, w), w)
                reference = reference or r["results"]
                if not same_integers(reference, r["results"]):
                    sys.exit(f"{name}: {kind} workers={w} gave other integers than local workers=1")
                runs[(kind, w)].append(r)
                print(f"{name:18s} {kind:5s} workers={w}  wall {r['wall']:6.2f} s  first result {r['first']:5.2f} s"
                      f"  steady {r['steady']:8.1f} samples/s  busy {r['busy']:.2f}  {r['ms_per_sample']:.2f} ms/sample"
                      f" ({r['cpu_ms_per_sample']:.2f} ms CPU)",
                      flush=True)
        base = statistics.median(r["steady"] for r in runs[configs[0]])
        for (kind, w), rs in runs.items():
            steady = statistics.median(r["steady"] for r in rs)
            rows.append({"model": name, "engine": kind, "workers": w, "samples": sum(
                len(next(iter(s.values()))) for s in shards), "shard": len(next(iter(shards[0].values()))),
                "wall": statistics.median(r["wall"] for r in rs), "first": statistics.median(r["first"] for r in rs),
                "steady": steady, "rate": statistics.median(r["rate"] for r in rs), "scaling": steady / base,
                "busy": statistics.median(r["busy"] for r in rs),
                "ms": statistics.median(r["ms_per_sample"] for r in rs),
                "cpu_ms": statistics.median(r["cpu_ms_per_sample"] for r in rs)})
    return rows


def ray_overheads(ray, n: int, reps: int) -> dict:
    """Actor start-up, an empty task's round trip, empty tasks per second (Ray and the local pool)."""
    out = {}
    driver = (engine_ray.code_fingerprint(), "benchmark")
    env = engine_ray.worker_env(engine_tasks.setup_scale, engine_tasks.empty, engine_tasks.load_model)
    for label, setup, arg in (("actor start, empty set-up", engine_tasks.setup_scale, {"scale": 1}),
                              ("actor start + MobileNetV2 lowered", engine_tasks.load_model, _mobilenet_arg())):
        if arg is None:
            continue
        t0 = time.perf_counter()
        actors = engine_ray.Actors(ray, n, (setup, ray.put(arg), engine_tasks.empty, driver), env)
        ray.get([h.ping.remote() for h in actors.handles])
        out[f"{label} ({n} actors), s"] = time.perf_counter() - t0
        if setup is engine_tasks.setup_scale:
            h = actors.handles[0]
            for what, payload in (("empty", 0), ("uint8 224x224x3", np.zeros((224, 224, 3), np.uint8)),
                                  ("float32 1x3x224x224", np.zeros((1, 3, 224, 224), np.float32)),
                                  ("shard of 16 float32 1x3x224x224", np.zeros((16, 3, 224, 224), np.float32))):
                ray.get(h.run.remote(payload))
                times = []
                for _ in range(reps):
                    s = time.perf_counter()
                    ray.get(h.run.remote(payload))
                    times.append(time.perf_counter() - s)
                out[f"round trip, one task at a time, {what} payload, ms"] = statistics.median(times) * 1e3
        actors.stop()
    for kind in ("ray", "local"):
        r = timed_job(engine_tasks.setup_scale, {"scale": 1}, engine_tasks.empty, list(range(20 * reps)),
                      EngineOptions(kind, n), n)
        out[f"empty tasks per second through {kind} (N={n})"] = r["steady"]
    return out


def _mobilenet_arg() -> dict | None:
    try:
        from models.build import artifact_dir
        path = artifact_dir() / "mobilenetv2_a8w8.onnx"
    except ImportError:
        return None
    return {"model": str(path)} if path.exists() else None


def worker_memory() -> dict:
    """RSS of a spawned worker process: numpy + npu_sim imported only; MobileNetV2 lowered and run on 2 samples."""
    arg = _mobilenet_arg()
    opts = EngineOptions("local", 2)
    base = dict(run_tasks(engine_tasks.setup_scale, {"scale": 1}, engine_tasks.memory, [None, None], opts))
    out = {"worker, numpy and npu_sim imported (no model), RSS MiB": base[0]["rss_mib"]}
    if arg is not None:
        _, shards = model_job("mobilenetv2_a8w8", 4, 2)
        m = dict(run_tasks(engine_tasks.load_model, arg, engine_tasks.memory, shards, opts))
        out["worker, MobileNetV2-224 A8W8 lowered and run, RSS MiB"] = max(v["rss_mib"] for v in m.values())
        out["worker, MobileNetV2-224 A8W8, peak RSS MiB"] = max(v["peak_mib"] for v in m.values())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["demo", "ppocr_cls_a8w8", "mobilenetv2_a8w8"])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="N (default: the cores)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=50, help="repetitions of the overhead measurements")
    args = ap.parse_args()
    n = args.workers
    ray = engine_ray.import_ray()
    t0 = time.perf_counter()
    ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    print(f"local Ray cluster of {n} CPUs started in {time.perf_counter() - t0:.2f} s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    rows = engines_table(args.models, n, args.rounds)
    extra = ray_overheads(ray, n, args.reps)
    extra.update(worker_memory())
    ray.shutdown()
    print(f"load average at the end {os.getloadavg()[0]:.1f} (1 min), {os.getloadavg()[2]:.1f} (15 min)")
    print(f"\n| model | engine | workers | samples (shard) | wall s | first result s | samples/s overall | "
          f"samples/s steady | scaling (steady / 1 worker) | workers busy | ms/sample in a task (CPU ms) |\n"
          f"|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['engine']} | {r['workers']} | {r['samples']} ({r['shard']}) | {r['wall']:.2f} | "
              f"{r['first']:.2f} | {r['rate']:.1f} | {r['steady']:.1f} | {r['scaling']:.2f}× | {r['busy']:.2f} | "
              f"{r['ms']:.2f} ({r['cpu_ms']:.2f}) |")
    print("\n| measurement | value |\n|---|---|")
    for k, v in extra.items():
        print(f"| {k} | {v:.2f} |" if v < 1000 else f"| {k} | {v:.0f} |")


if __name__ == "__main__":
    main()
