"""`npu-sim report`: the accuracy report (terminal summary, JSON, HTML), with sensitivity, int16 advisor and fix."""
from __future__ import annotations

import json
from pathlib import Path

from npu_sim.api import AdviceOptions, accuracy_report, annotate, load_data, open_model
from npu_sim.cli.common import add_job_arguments, engine_options, take_model
from npu_sim.cli.noise import quiet_logs
from npu_sim.cli.progress import progress
from npu_sim.errors import InputError
from npu_sim.render.report_html import to_html
from npu_sim.render.report_text import format_summary

DESCRIPTION = """\
Accuracy report: run a dataset through the board's integer program and through a float reference, and show
where accuracy is lost — per output (cosine, SQNR, MAE, top-1/top-5 agreement) and per quantized tensor
(accumulated error of the full integer run, isolated error of each op fed the float reference, in LSBs),
activation statistics and clipping, and the first layer where similarity collapses.

Float reference: --float FLOAT.onnx (the model quantize_static started from), else the QDQ model's own float
semantics (weights dequantized, activations not quantized). Both run on onnxruntime.
Data (--data): folders or files: images (.png/.jpg/.bmp, resized, scaled to [0,1], (x-mean)/std), .npy, .npz
(arrays named like the inputs, or x [+ y labels]); a leading batch dimension is split into samples.
--data is required (the demo: models/demo/digits_test.npz, its 360 held-out digits).
Engines (--engine, --workers, --ray-address): the samples, and the sensitivity's and the advisor's measurements,
run as tasks in this process, in worker processes or on a Ray cluster; the numbers do not depend on where.
Without --workers, only as many workers start as the work pays for. Progress bars on stderr (a terminal only;
--quiet: none).
"""
MODEL_AFTER_LISTS = True  # `report --data DIR MODEL`: an .onnx file that ends --data (or --requantize) is the model


def add_arguments(p) -> None:
    p.add_argument("--float", dest="float_model", metavar="FLOAT.onnx",
                   help="float ONNX model the QDQ model was quantized from (default: the QDQ model's float semantics)")
    p.add_argument("--data", nargs="+", action="extend", default=[], metavar="DIR|FILE",
                   help="folders or files of images, .npy or .npz (required)")
    p.add_argument("--mean", default="0", help="image normalization mean, per channel, comma separated")
    p.add_argument("--std", default="1", help="image normalization std, per channel, comma separated")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="use only the first N samples")
    add_job_arguments(p, "the samples and the advisor's measurements")
    p.add_argument("--collapse-cosine", type=float, default=0.99, metavar="C",
                   help="accumulated cosine below which a tensor counts as collapsed (default 0.99)")
    p.add_argument("--top", type=int, default=5, metavar="N", help="worst layers to list (default 5)")
    a = p.add_argument_group("sensitivity, int16 advisor and fix")
    a.add_argument("--no-sensitivity", action="store_true",
                   help="skip the per-layer sensitivity ranking and the int16 advisor (checks, latency and the "
                        "bias remedy still run)")
    a.add_argument("--samples", type=int, default=8, metavar="N",
                   help="samples the sensitivity ranking and the advisor measure on (the first N; default 8)")
    a.add_argument("--candidates", type=int, default=None, metavar="K",
                   help="measure the sensitivity of only the K layers with the lowest isolated SQNR (a cheap proxy; "
                        "default: every layer). The advisor's segments still cover every int16-allowed layer")
    a.add_argument("--max-slowdown", type=float, default=None, metavar="X",
                   help="latency budget of the int16 advisor: at most X times the estimated cycles (default 1.2)")
    a.add_argument("--budget-ms", type=float, default=None, metavar="MS",
                   help="latency budget of the int16 advisor in milliseconds (npu_sim.estimate of the board)")
    a.add_argument("--points", type=int, default=10, metavar="N",
                   help="most accuracy-latency curve points to measure (default 10)")
    a.add_argument("--overrides", metavar="OUT.json",
                   help="write the fix: quantize_static extra_options (TensorQuantOverrides ...) as JSON")
    a.add_argument("--requantize", nargs="+", metavar="CALIB", default=None,
                   help="re-quantize the float model (--float) with the fix and the quantization settings the "
                        "board's rules require, on this calibration data (folders or files as for --data); check "
                        "the new model on the board and report whether it deploys and its simulated accuracy")
    a.add_argument("--calib-limit", type=int, default=None, metavar="N", help="use only N calibration samples")
    a.add_argument("--fixed-model", metavar="OUT.onnx",
                   help="where --requantize writes the new QDQ model (default: MODEL.fixed.qdq.onnx in the "
                        "current folder)")
    p.add_argument("--html", metavar="OUT.html", help="write the HTML report")
    p.add_argument("--json", metavar="OUT.json", help="write the JSON report (schema: docs/REPORT_SCHEMA.md)")


def main(args, shapes) -> int:
    take_model(args, ("data", "requantize"), "npu-sim report MODEL.qdq.onnx --data DIR|FILE ...")
    if args.requantize == []:
        raise InputError("--requantize: give the calibration data (folders or files)")
    engine = engine_options(args)
    if args.limit is not None and args.limit < 1:
        raise InputError("--limit must be at least 1")
    if not 0.0 < args.collapse_cosine <= 1.0:
        raise InputError("--collapse-cosine must lie in (0, 1]")
    for opt, path in (("--html", args.html), ("--json", args.json)):
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(f"{opt} {path!r}: folder {str(Path(path).parent)!r} does not exist")
    if args.candidates is not None and args.candidates < 0:
        raise InputError("--candidates must be at least 0")
    if args.samples < 1:
        raise InputError("--samples must be at least 1")
    if args.max_slowdown is not None and args.max_slowdown < 1.0:
        raise InputError("--max-slowdown must be at least 1.0 (1.2 = 20% slower than now)")
    if args.budget_ms is not None and args.budget_ms <= 0:
        raise InputError("--budget-ms must be positive")
    if args.requantize and not args.float_model:
        raise InputError("--requantize re-quantizes the float model: give it with --float FLOAT.onnx")
    for opt, path in (("--overrides", args.overrides), ("--fixed-model", args.fixed_model)):
        if path and not Path(path).resolve().parent.is_dir():
            raise InputError(f"{opt} {path!r}: folder {str(Path(path).parent)!r} does not exist")
    model = open_model(args.model)  # read and validated once, for the data, the report and the advisor
    dset = load_data(model, args.data or None, shapes or None, args.mean, args.std, args.limit)
    calib = None
    if args.requantize:
        calib = load_data(model, args.requantize, shapes or None, args.mean, args.std, args.calib_limit)
    r = accuracy_report(model, data=dset, float_model=args.float_model, board=args.board,
                        input_shapes=shapes or None, mean=args.mean, std=args.std, limit=args.limit,
                        collapse_cosine=args.collapse_cosine, engine=engine,
                        progress=progress("report", "samples", args.quiet))
    opts = AdviceOptions(samples=args.samples, sensitivity=not args.no_sensitivity,
                         max_slowdown=args.max_slowdown if args.max_slowdown is not None or args.budget_ms is None
                         else None, budget_ms=args.budget_ms, max_points=max(2, args.points),
                         candidates=args.candidates,
                         overrides=args.overrides, calibration=calib.samples if calib else None,
                         calibration_source=calib.description if calib else "", fixed_model=args.fixed_model,
                         eval_samples=dset.samples if calib else None)
    if opts.max_slowdown is None and opts.budget_ms is None:
        opts.max_slowdown = 1.2
    with quiet_logs():
        annotate(r, dset.samples, args.board, args.float_model, shapes or None, opts, engine=engine,
                 progress=progress("sensitivity", "layers", args.quiet),
                 advisor_progress=progress("int16 advisor", "points", args.quiet), model=model)
    print(format_summary(r, args.top))
    if args.overrides:
        print(f"fix (quantize_static extra_options) -> {args.overrides}")
    if args.json:
        Path(args.json).write_text(json.dumps(r.to_dict(), indent=1))
        print(f"JSON report -> {args.json}")
    if args.html:
        Path(args.html).write_text(to_html(r))
        print(f"HTML report -> {args.html}")
    return 0
