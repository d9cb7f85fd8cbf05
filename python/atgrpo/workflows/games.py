"""Games and planning workflow (Sokoban, Sudoku, Plan-Path): a tool agent and a plan agent.

Per turn, agents act in `roles` order (the turn loop, tree selection and grouping are `tree.py`'s).
The tool agent's answer is simulated on a scratch copy of its branch (`states.PoolStates`) and only
its outcome is shown to the plan agent of the same turn; the plan agent's answer is executed on the
branch itself. Rewards are the env's (alpha is an env parameter).

Program mode (`task.tool_mode = "program"`, the paper's setting): the tool agent writes a Python
program that prints a move list; it runs in the sandbox with no input, and its stdout is handed to
the env's parser as the tool agent's answer (parsed, never evaluated; a program that fails to compile
or run answers nothing, an invalid action). The plan agent sees what the program printed (or why it
printed nothing) and the simulated outcome, through the task pack's `program_view` template, not
the program: it acts on the output, and a program shown whole would double the plan prompt's length
for text the plan agent does not act on. The compact templates show the output in a fixed-width
field (`{tool_output:~<48.48}`, after the outcome), so the plan agent's answer starts a fixed number
of tokens after the output does: copying a winning output is then a copy at one relative distance,
which a small RoPE model learns as it learns the tool's copy of its level; with the output's own
length between them (trial 6, docs/learning.md), the warm-started planner rarely copied even a
winning output. The workflow then holds a sandbox until `close()`. What each program did (ran,
timed out, ...; `tool_programs.py`) is counted per unit into `UnitResult.tool_programs`.
"""

from __future__ import annotations

from typing import Any

from atgrpo.config import RunConfig
from atgrpo.messages import WorkUnit
from atgrpo.workflows.programs import LazySandbox, PrintedOutput, run_printing_programs
from atgrpo.workflows.prompts import Templates, load_templates, task_info
from atgrpo.workflows.states import PoolStates, Simulation
from atgrpo.workflows.tree import TreeWorkflow

TOOL, PLAN = "tool", "plan"
TOOL_ANSWER_CHARS = 200
"""The tool answer shown to the plan agent is cut to this many characters (keeps prompts bounded)."""
PROGRAM_OUTPUT_CHARS = 4000
"""Program mode: the end of the program's stdout handed to the env's parser."""
PROGRAM_INSTRUCTION = "\nWrite a Python program (no input) that prints the answer in that format.\n"


def outcome_word(success: bool, valid: bool, local: float) -> str:
    """A one-word summary of a simulated step, shown to the plan agent."""
    if success:
        return "goal"
    if not valid:
        return "invalid"
    return "closer" if local > 1e-9 else ("same" if local > -1e-9 else "farther")


class GameWorkflow(TreeWorkflow):
    def __init__(self, cfg: RunConfig) -> None:
        super().__init__(cfg)
        self.task: str = cfg.task.task
        self.env_config: dict[str, Any] = {**cfg.task.env_params(), "max_steps": cfg.task.turns}
        """`EnvPool` keys: the task's env parameters, with the episode limit set to `turns`."""
        self.templates: Templates = load_templates(self.task, cfg.task.prompts)
        self.program_mode = cfg.task.tool_mode == "program"
        if self.program_mode and self.templates.program_view is None:
            raise ValueError(
                f"task.tool_mode = 'program' needs envs/{self.task}/prompts/{cfg.task.prompts}/program_view.txt "
                "(how the plan agent is shown a program's output); this task pack has none"
            )
        self.sandbox = LazySandbox(cfg)

    def open(self, unit: WorkUnit, k: int) -> PoolStates:
        return PoolStates(self, unit, k)

    def close(self) -> None:
        self.sandbox.close()

    def simulated(self, role: str) -> bool:
        return role == TOOL

    def prompt_text(self, role: str, obs: str, turn: int, simulation: Simulation | None) -> str:
        """`role`'s prompt; the plan agent is shown the tool agent's `simulation` of this turn, if any."""
        section = ""
        if role == PLAN and simulation is not None:
            word = outcome_word(simulation.success, simulation.valid, simulation.local)
            if self.program_mode:
                assert self.templates.program_view is not None  # checked in __init__
                section = self.templates.program_view.format(tool_output=simulation.answer, tool_result=word)
            else:
                section = self.templates.tool_view.format(tool_answer=simulation.answer, tool_result=word)
        template = self.templates.tool if role == TOOL else self.templates.plan
        text = template.format(
            obs=obs, info=task_info(self.task, obs), turn=turn + 1, turns=self.turns, tool_section=section
        )
        return text + PROGRAM_INSTRUCTION if role == TOOL and self.program_mode else text

    def actions(self, role: str, texts: list[str]) -> tuple[list[str], list[str], list[PrintedOutput] | None]:
        """The env action of each answer and what the plan agent is shown of it: the answer itself,
        or in program mode what the answer's program printed (or why it printed nothing); and in
        program mode each answer's run (None otherwise)."""
        if not (role == TOOL and self.program_mode):
            return texts, [t.strip()[:TOOL_ANSWER_CHARS] for t in texts], None
        outputs, shown = [], []
        runs = run_printing_programs(self.sandbox, texts)
        for run in runs:
            if run.verdict is None:
                out, note = "", "does not compile"
            elif not run.ran:
                out, note = "", f"{run.verdict}: {run.detail}"[:TOOL_ANSWER_CHARS]
            else:
                out = run.text[-PROGRAM_OUTPUT_CHARS:]
                note = out.strip()[-TOOL_ANSWER_CHARS:] or "(no output)"
            outputs.append(out)
            shown.append(note)
        return outputs, shown, runs


__all__ = ["PLAN", "TOOL", "GameWorkflow", "outcome_word"]
