"""The run's progress as each source tells it: the last step and the losses, joined across sources
(a job's console log and the Hugging Face Trainer's trainer_state.json tell the same steps).

Pure fold: `told(source, step, loss)` for every step event of the lowest rank (the job ledger's
timeline rank), `section()` for the receipt. The last step of the run is the highest any source
told. A step whose loss two sources told is one point;
its value is the most precise one told (the console prints '%.4g', trainer_state.json the float),
and the two disagree when they differ by more than LOSS_AGREE_FRACTION of the larger.
"""

import math
from collections import OrderedDict
from dataclasses import dataclass, field

from trnwatch.ledger.job_summary import LossPoint, Progress, SourceSteps

LOSSES_KEPT = 1024  # per source, the newest steps
LOSSES_SHOWN = 256  # in the receipt, the newest steps
LOSS_AGREE_FRACTION = 1e-3  # '%.4g' rounds by at most 5e-4 of the value


@dataclass(slots=True)
class SourceProgress:
    last_step: int | None = None
    steps: int = 0
    losses_told: int = 0
    last_loss: float | None = None
    last_loss_step: int | None = None
    losses: OrderedDict[int, float] = field(default_factory=OrderedDict)  # step -> loss, newest last


class RunProgress:
    """Each source's steps and losses; bounded (LOSSES_KEPT per source, one entry per source)."""

    def __init__(self) -> None:
        self.sources: dict[str, SourceProgress] = {}

    def told(self, source: str, step: int, loss: float | None) -> None:
        """One step event of `source`, with its loss if it had one."""
        one = self.sources.get(source)
        if one is None:
            one = self.sources[source] = SourceProgress()
        one.steps += 1
        one.last_step = step if one.last_step is None else max(one.last_step, step)
        if loss is None:
            return
        one.losses_told += 1
        one.last_loss, one.last_loss_step = loss, step
        one.losses[step] = loss
        one.losses.move_to_end(step)
        if len(one.losses) > LOSSES_KEPT:
            one.losses.popitem(last=False)

    def section(self) -> Progress | None:
        """The receipt's `progress`, or None when no source told a step."""
        if not self.sources:
            return None
        last_source, last = max(
            ((source, one.last_step) for source, one in self.sources.items() if one.last_step is not None),
            key=lambda item: (item[1], item[0]),
        )
        by_step: dict[int, list[tuple[str, float]]] = {}
        for source, one in sorted(self.sources.items()):
            for step, loss in one.losses.items():
                by_step.setdefault(step, []).append((source, loss))
        points = []
        disagreeing = 0
        for step in sorted(by_step)[-LOSSES_SHOWN:]:
            told = by_step[step]
            agree = all(_agree(loss, told[0][1]) for _, loss in told)
            disagreeing += not agree
            points.append(
                LossPoint(
                    step=step,
                    loss=max(told, key=lambda item: len(repr(item[1])))[1],
                    by_source=dict(told),
                    agree=agree,
                )
            )
        return Progress(
            last_step=last,
            last_step_source=last_source,
            sources={
                source: SourceSteps(
                    last_step=one.last_step,
                    steps=one.steps,
                    losses=one.losses_told,
                    last_loss=one.last_loss,
                    last_loss_step=one.last_loss_step,
                )
                for source, one in sorted(self.sources.items())
            },
            losses=points,
            losses_disagreeing=disagreeing,
        )


def _agree(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= LOSS_AGREE_FRACTION * max(abs(a), abs(b))
