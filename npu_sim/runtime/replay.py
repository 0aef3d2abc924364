"""Running part of a program on chosen values: one op alone, or the rest of a program after a changed tensor.

``Replay(program, nodes)`` is the sub-program of ``nodes`` (a part of ``program``, in order): its inputs are the
activation tensors those nodes read and do not make themselves, its outputs the tensors asked for (default: the
program's outputs they make). ``run(values)`` executes it through the executor on ``values`` (a dict holding at
least every input, by tensor name) and returns the executor's ``RunResult``: integers by tensor name, and the
accumulator overflows of those nodes. ``compare`` runs the program from what the board was fed; the accuracy report
runs each op alone on the float reference's inputs; the advisor runs what a promotion changed, and the rest of a
program after a layer computed in float.
"""
from __future__ import annotations

from npu_sim.ir import Program
from npu_sim.runtime.executor import RunResult, execute


class Replay:
    def __init__(self, program: Program, nodes, outputs=None):
        nodes = list(nodes)
        made = {o for n in nodes for o in n.outputs}
        #: the tensors the part reads and does not make (constants aside), in order of first use
        self.inputs = list(dict.fromkeys(i for n in nodes for i in n.inputs
                                         if not program.tensors[i].is_const and i not in made))
        #: the tensors the part makes
        self.made = made
        if outputs is None:
            outputs = [t for t in program.outputs.values() if t in made]
        self.program = Program(program.tensors, nodes, {n: n for n in self.inputs}, {o: o for o in outputs},
                               program.board, program.model_path, program.opset)

    def run(self, values: dict, keep_all: bool = False) -> RunResult:
        """Execute the part, fed its inputs from ``values``; nothing to run gives an empty result. ``keep_all``:
        every tensor it computes in the result, not only its outputs."""
        if not self.program.nodes:
            return RunResult({})
        return execute(self.program, {n: values[n] for n in self.inputs}, keep_all=keep_all)
