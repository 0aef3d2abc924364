"""The outcome of one mutant (tests/mutant_runner.py) from what its child process saw.

Outcomes, worst first (``FINDINGS``; the rest is fine):

* ``hang``: the child outlived the runner's timeout and was killed;
* ``crash``: a command exited with a code other than 0, 1 or 2 (3: npu-sim's internal error), printed a Python
  traceback, or the child died (a signal) -- the front door raising anything but an ``NpuSimError`` too;
* ``contradiction``: the commands disagree (the project's one verdict, tests/test_one_verdict.py): a front-door
  refusal that some command does not give, with the same message; on one board ``check`` exit 0 (deployable)
  where ``run`` refuses, ``check``, ``lower`` or ``estimate`` refusing a model ``run`` runs, ``lower`` running
  one ``run`` refuses; or ``estimate`` answering a model every board's ``run`` refuses with one message;
* ``invalid accepted``: ``run`` exits 0 on a board although onnx's full checker refuses the model (but for a
  declaration without a shape: ``mutant_oracle.CHECKER_QUIRKS``), or onnxruntime refuses to load or run it for a
  reason other than a kernel it lacks;
* ``differs``: board onnx's outputs differ from onnxruntime's (both modes) by more than 1 LSB, unexplained: not
  where onnxruntime quantizes a NaN (undefined in ONNX) nor where ``check --run`` finds the accumulator
  overflowing (it says not deployable);
* ``unclear refusal``: exit 2 without exactly one ``npu-sim: error:`` line;
* ``clean refusal`` (exit 2 everywhere, one message each) and ``valid run`` (some board runs it).

``refused valid`` is reported (not a finding): every command refuses a model that onnx's full checker and
onnxruntime accept -- deliberate for what npu-sim cannot compute in integers (docs/TESTING.md lists the kinds).
"""
from __future__ import annotations

FINDINGS = ("hang", "crash", "contradiction", "invalid accepted", "differs", "unclear refusal", "generator error")
OK = (0, 1, 2)


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("npu-sim: error:")]


def message(cmd: dict) -> str | None:
    lines = error_lines(cmd["err"])
    return lines[0].split("npu-sim: error:", 1)[1].strip() if lines else None


def crashes(data: dict) -> list[str]:
    out = [f"front door raised {data['front_crash']}"] if data.get("front_crash") else []
    for key, cmd in data["cmds"].items():
        if cmd["code"] not in OK or "Traceback (most recent call last)" in cmd["err"]:
            tail = cmd["err"].strip().splitlines()[-1:] or [""]
            out.append(f"{key} exit {cmd['code']}: {tail[0][:300]}")
    return out


def contradictions(data: dict) -> list[str]:
    cmds, front, out = data["cmds"], data["front"], []
    boards = sorted({k.split("/")[1] for k in cmds})
    if front is not None:
        for key, cmd in cmds.items():
            if cmd["code"] != 2 or message(cmd) != front:
                out.append(f"the front door refuses ({front[:160]}) but {key} exits {cmd['code']}"
                           + (f" saying {message(cmd)[:160]}" if message(cmd) else ""))
        return out
    run_messages = {message(cmds[f"run/{b}"]) for b in boards if cmds[f"run/{b}"]["code"] == 2}
    everywhere = len(run_messages) == 1 and all(cmds[f"run/{b}"]["code"] == 2 for b in boards)
    for b in boards:
        run, check, lower = cmds[f"run/{b}"], cmds[f"check/{b}"], cmds[f"lower/{b}"]
        est = cmds.get(f"estimate/{b}")
        if run["code"] == 2 and check["code"] == 0:
            out.append(f"board {b}: check says deployable, run refuses: {message(run)[:200]}")
        if run["code"] == 2 and lower["code"] == 0:
            out.append(f"board {b}: lower runs, run refuses: {message(run)[:200]}")
        if run["code"] == 0:
            for key, cmd in ((f"check/{b}", check), (f"lower/{b}", lower), (f"estimate/{b}", est)):
                if cmd is not None and cmd["code"] == 2:
                    out.append(f"board {b}: run runs, {key} refuses: {message(cmd)[:200]}")
        if everywhere and est is not None and est["code"] == 0:
            out.append(f"board {b}: estimate answers a model every board's run refuses: {message(run)[:200]}")
    return out


def invalid_accepted(data: dict) -> list[str]:
    ran = [k for k, c in data["cmds"].items() if k.startswith("run/") and c["code"] == 0]
    oracle = data.get("oracle") or {}
    if not ran:
        return []
    if oracle.get("checker"):
        return [f"{', '.join(ran)} exit 0, onnx's full check refuses: {oracle['checker'][:200]}"]
    for stage in ("ort_load", "ort_run"):
        if oracle.get(stage) and not oracle.get("unimplemented"):
            return [f"{', '.join(ran)} exit 0, onnxruntime refuses ({stage}): {oracle[stage][:200]}"]
    return []


def differences(data: dict) -> list[str]:
    diff = (data.get("oracle") or {}).get("diff") or {}
    return [f"board onnx output {name!r} differs from onnxruntime by {d} LSB" for name, d in diff.items()
            if isinstance(d, str) or d > 1]


def unclear(data: dict) -> list[str]:
    return [f"{key} exit 2 with {len(error_lines(c['err']))} error lines: {c['err'].strip()[:200]}"
            for key, c in data["cmds"].items() if c["code"] == 2 and len(error_lines(c["err"])) != 1]


def refused_valid(data: dict) -> bool:
    oracle = data.get("oracle") or {}
    runs = [c for k, c in data["cmds"].items() if k.startswith("run/")]
    return all(c["code"] == 2 for c in runs) and not any(oracle.get(s) for s in ("checker", "ort_load", "ort_run"))


def classify(mutant, data: dict | None, where, status: str | None) -> tuple[str, list[str]]:
    """(outcome, findings) of ``mutant``; ``data``: its child's result (None: none written); ``status``: how the
    child ended when not normally (a hang, a signal)."""
    if status and status.startswith("hang"):
        progress = (where / "progress").read_text() if (where / "progress").exists() else "?"
        return "hang", [f"{status} (in {progress})"]
    if data is None:
        progress = (where / "progress").read_text() if (where / "progress").exists() else "?"
        if progress == "build":
            return "generator error", [f"the mutant could not be written ({status})"]
        return "crash", [f"child ended with {status or 'no result'} in {progress}"]
    for outcome, finder in (("crash", crashes), ("contradiction", contradictions),
                            ("invalid accepted", invalid_accepted), ("differs", differences),
                            ("unclear refusal", unclear)):
        found = finder(data)
        if found:
            return outcome, found
    if any(c["code"] == 0 for k, c in data["cmds"].items() if k.startswith("run/")):
        return "valid run", []
    return ("refused valid" if refused_valid(data) else "clean refusal"), []
