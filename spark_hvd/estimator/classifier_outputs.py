"""Driver and executor: Spark ML's classifier columns beside Horovod's output column, so that Spark ML's
classification evaluators and tuning take a model of ours as they take a ``LogisticRegressionModel``.

With ``classification`` set (off by default, which keeps Horovod's output column and nothing else), transform
adds, from the model's scores for the one label column:

- ``rawPredictionCol`` (default ``rawPrediction``): the scores, a vector;
- ``probabilityCol`` (default ``probability``): the class probabilities, a vector;
- ``predictionCol`` (default ``prediction``): the class index, a double.

An empty name leaves that column out, as in Spark ML. ``classification`` says what the scores are:
``"logits"`` (softmax over several scores, a sigmoid over one), ``"probabilities"`` (the model ends in a
softmax or a sigmoid), ``"log_probabilities"`` (it ends in a log-softmax), or ``"auto"``: what the estimator's
loss implies (torch's CrossEntropyLoss: logits, BCELoss: probabilities, NLLLoss: log-probabilities; Keras's
crossentropies: probabilities, or logits with ``from_logits=True``). One score per row is a binary classifier:
its vectors have two entries (class 0, class 1), as Spark ML's binary models give them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from pyspark.ml.param import TypeConverters

from spark_hvd.errors import InputError
from spark_hvd.estimator.param_table import ParamSpec, to_optional

SCORE_KINDS = ("logits", "probabilities", "log_probabilities")
CLASSIFICATION_CHOICES = (None, "auto", *SCORE_KINDS)

CLASSIFIER_PARAMS: list[ParamSpec] = [
    ParamSpec("classification", "add Spark ML's classifier columns (rawPredictionCol, probabilityCol, predictionCol) "
              "from the model's scores for the one label column: 'logits', 'probabilities', 'log_probabilities', "
              "or 'auto' (what the loss implies); None (default) adds none, Horovod's output column only", None,
              to_optional(TypeConverters.toString)),
    ParamSpec("rawPredictionCol", "classification: the column of the scores (a vector); '' leaves it out",
              "rawPrediction", TypeConverters.toString),
    ParamSpec("probabilityCol", "classification: the column of the class probabilities (a vector); '' leaves it "
              "out", "probability", TypeConverters.toString),
    ParamSpec("predictionCol", "classification: the column of the predicted class index (a double); '' leaves it "
              "out", "prediction", TypeConverters.toString),
]
CLASSIFIER_PARAM_NAMES = tuple(spec.name for spec in CLASSIFIER_PARAMS)


@dataclass(frozen=True)
class ClassifierOutputs:
    """Which model output holds the scores, what they are, and the columns transform adds from them."""

    output_index: int
    scores: str                       # one of SCORE_KINDS
    raw_prediction_col: str = "rawPrediction"
    probability_col: str = "probability"
    prediction_col: str = "prediction"

    def columns(self) -> list[tuple[str, bool]]:
        """(name, whether it is a vector) of each column added, in order."""
        return [(name, vector) for name, vector in ((self.raw_prediction_col, True), (self.probability_col, True),
                                                      (self.prediction_col, False)) if name]

    def values(self, scores: np.ndarray) -> list[np.ndarray]:
        """Executor: the added columns' values for ``scores`` (rows x classes; one column: binary), in the
        order of columns(): (rows, classes) arrays for the vectors, (rows,) for the prediction."""
        raw, probability = (_binary if scores.shape[1] == 1 else _multiclass)(scores.astype(np.float64), self.scores)
        prediction = np.argmax(probability, axis=1).astype(np.float64)
        chosen = {self.raw_prediction_col: raw, self.probability_col: probability, self.prediction_col: prediction}
        return [chosen[name] for name, _ in self.columns()]


def _binary(scores: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    score = scores[:, 0]
    if kind == "logits":
        positive = 1.0 / (1.0 + np.exp(-score))
        raw = np.stack([-score, score], axis=1)              # Spark ML's binary margins
    else:
        positive = np.exp(score) if kind == "log_probabilities" else score
        raw = np.stack([1.0 - positive, positive], axis=1)
    return raw, np.stack([1.0 - positive, positive], axis=1)


def _multiclass(scores: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    if kind == "logits":
        shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
        return scores, shifted / shifted.sum(axis=1, keepdims=True)
    return scores, np.exp(scores) if kind == "log_probabilities" else scores


def classifier_outputs(params: Any, label_cols: Sequence[str], output_shapes: Sequence[tuple[int, ...]],
                       taken: Sequence[str]) -> ClassifierOutputs | None:
    """Driver: the model's classifier columns (None with ``classification`` unset), checked: one label column
    whose output has one or more scores per row, and names clear of ``taken`` (the DataFrame's and the
    output columns)."""
    kind = params.getOrDefault(params.classification)
    if kind is None:
        return None
    if kind not in SCORE_KINDS:
        raise InputError(f"classification must be one of {SCORE_KINDS} on a model (the estimator also takes "
                         f"'auto'), got {kind!r}")
    if len(label_cols) != 1:
        raise InputError(f"classification adds Spark ML's classifier columns for one label column; this model "
                         f"has {len(label_cols)}: {list(label_cols)}")
    shape = tuple(output_shapes[0])
    if len(shape) > 1:
        raise InputError(f"classification needs one score per class per row; the output for label "
                         f"{label_cols[0]!r} has shape {shape}")
    outputs = ClassifierOutputs(0, kind, params.getOrDefault(params.rawPredictionCol),
                                params.getOrDefault(params.probabilityCol), params.getOrDefault(params.predictionCol))
    names = [name for name, _ in outputs.columns()]
    clashing = sorted({name for name in names if name in taken or names.count(name) > 1})
    if clashing:
        raise InputError(f"transform: classifier column(s) {clashing} already exist or repeat; choose other names "
                         "with setPredictionCol, setProbabilityCol or setRawPredictionCol ('' leaves one out)")
    return outputs


def resolved_classification(chosen: str | None, implied: str | None, loss: Any) -> str | None:
    """Driver, at fit: the estimator's ``classification`` with 'auto' made what the loss implies."""
    if chosen not in CLASSIFICATION_CHOICES:
        raise InputError(f"classification must be one of {CLASSIFICATION_CHOICES}, got {chosen!r}")
    if chosen != "auto":
        return chosen
    if implied is None:
        raise InputError(f"classification='auto' cannot tell what the model's outputs are from the loss {loss!r}: "
                         f"set classification to one of {SCORE_KINDS}")
    return implied
