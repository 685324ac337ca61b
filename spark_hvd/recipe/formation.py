"""Rank child: where an ``elastic=True`` fit's committed state meets the formation a rank enters (any
framework): the step within the epoch and the learning rate follow the new size, and a re-formation is
recorded in the state's ``reformations``.

The state carries ``epoch``, ``step`` (of ``steps`` in the committed epoch), ``size``, ``lr_size`` (the
size the learning rate is scaled for), ``formations`` and ``reformations``; the framework gives how to
multiply its optimizer's learning rate.
"""

from __future__ import annotations

from typing import Any, Callable

from spark_hvd.recipe.plan import ElasticPlan


def initial_state_attrs(elastic: ElasticPlan, size: int, first_epoch: int, linear: bool) -> dict[str, Any]:
    """The attributes an elastic fit's state starts with, before its first formation."""
    return {"epoch": first_epoch, "step": 0, "steps": elastic.steps.at(size)[0], "size": size,
            "lr_size": size if linear else 1, "reformations": [], "formations": 0}


def enter_formation(state: Any, size: int, elastic: ElasticPlan, scale_learning_rate: Callable[[float], None],
                    linear: bool) -> None:
    """Fits the committed state to a formation of ``size`` ranks. Entering a second time (in this process,
    or in a relaunched stage that synced the commit) means the job re-formed: the committed epoch resumes
    at the same fraction of its steps (``ElasticPlan.resumed_step``), and under the linear rule the learning
    rate is multiplied by new size / the size it was scaled for."""
    if state.formations:
        new_steps = elastic.steps.at(size)[0]
        done = state.step
        step = done if new_steps == state.steps else elastic.resumed_step(done, state.steps, new_steps)
        state.reformations.append({"epoch": state.epoch, "step": step, "size": size, "previous_size": state.size})
        state.step = step
        state.steps = new_steps
    if linear and state.lr_size != size:
        scale_learning_rate(size / state.lr_size)
        state.lr_size = size
    state.size = size
    state.formations += 1
    # A rank lost before the first commit rolls back to here: this formation counts as entered.
    state.save()


def commits_after_step(elastic: ElasticPlan, done: int, steps: int) -> bool:
    """Whether the steps ``done`` of an epoch of ``steps`` end with a commit: every ``commit_steps``, but not
    after the epoch's last step, since the epoch's end commits after validation (a commit between would
    resume an epoch with no step left)."""
    return done % elastic.commit_steps == 0 and done < steps
