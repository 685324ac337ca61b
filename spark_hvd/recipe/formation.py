"""Rank child: where an ``elastic=True`` fit's committed state meets the formation a rank enters (any
framework): the step within the epoch and the learning rate follow the new size, and a re-formation is
recorded in the state's ``reformations``.

The state carries ``epoch``, ``step`` (of ``steps`` in the committed epoch), ``position`` (the epoch's
data position at that step, as integers), ``rng`` (every rank's generators' states), ``size``, ``lr_size``
(the size the learning rate is scaled for), ``formations`` and ``reformations``; the framework gives how to
multiply its optimizer's learning rate.
"""

from __future__ import annotations

from typing import Any, Callable

from spark_hvd.recipe.plan import ElasticPlan
from spark_hvd.recipe.resume_point import resumed_step


def initial_state_attrs(elastic: ElasticPlan, size: int, start: Any, linear: bool,
                        rng: list[Any] | None = None) -> dict[str, Any]:
    """The attributes an elastic fit's state starts with, before its first formation: from ``start`` (a
    ``Position`` at this size), with ``rng`` the ranks' generators where a checkpoint at this size kept them."""
    return {"epoch": start.epoch, "step": start.step,
            "position": start.data.to_ints() if start.data is not None else None, "rng": rng,
            "steps": elastic.steps.at(size)[0], "size": size, "lr_size": size if linear else 1,
            "reformations": [], "formations": 0}


def enter_formation(state: Any, size: int, elastic: ElasticPlan, scale_learning_rate: Callable[[float], None],
                    linear: bool, restore_rng: Callable[[list[Any] | None], Any] = lambda states: None) -> None:
    """Fits the committed state to a formation of ``size`` ranks. Entering a second time (in this process,
    or in a relaunched stage that synced the commit) means the job re-formed: the committed epoch resumes
    where the rows it has left take the steps it has left at the new size (resume_point.py), the ranks of
    a formation as large as the last take up their generators (``restore_rng``), and under the linear rule
    the learning rate is multiplied by new size / the size it was scaled for."""
    if state.formations:
        step = resumed_step(elastic.steps, state.epoch, state.step, state.size, state.position, size)
        if size == state.size:
            restore_rng(state.rng)
        state.reformations.append({"epoch": state.epoch, "step": step, "size": size, "previous_size": state.size})
        state.step = step
        state.steps = elastic.steps.at(size)[0]
    if linear and state.lr_size != size:
        scale_learning_rate(size / state.lr_size)
        state.lr_size = size
    state.size = size
    state.formations += 1
    # A rank lost before the first commit rolls back to here: this formation counts as entered.
    state.save()


def falls_within(every: int | None, done: int, steps: int) -> bool:
    """Whether the steps ``done`` of an epoch of ``steps`` end with a commit or checkpoint made ``every``
    steps: on its multiples, but not after the epoch's last step, since the epoch's end commits after
    validation (a commit between would resume an epoch with no step left)."""
    return bool(every) and done % every == 0 and done < steps
