"""Pictures of lesson 11 (read by course.engine.pictures.load): the learner's own functions measure the
SHIPPED tiny model on a fixed batch of the copy task: each head's ablation cost and normalised
importance side by side, and the accuracy as heads are pruned in the importance order and in the
ablation order. The numbers come from the learner's worker; this module only checks their shapes
and ranks them."""

import numpy as np

from course import tiny_model
from course.engine.testing import (
    LearnerError,
    LearnerModule,
    LineChart,
    NumberTable,
)

SEQUENCES, SEED = 300, 2019  # a fixed batch of the copy task, not the card's evaluation set


def _array(value: object, shape: tuple[int, ...], what: str) -> np.ndarray:
    """The learner's array, float64, or a one-sentence problem."""
    if not isinstance(value, np.ndarray) or value.shape != shape or value.dtype.kind not in "iuf":
        got = getattr(value, "shape", type(value).__name__)
        raise LearnerError(f"{what} returned {got}; the picture needs an array of shape {shape}.")
    return np.asarray(value, dtype=np.float64)


def _pair(result: object, what: str) -> tuple | list:
    """The learner's two results, or a one-sentence problem."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise LearnerError(f"{what} did not return two results.")
    return result


def _ranks(order: np.ndarray, n_layers: int, n_heads: int) -> np.ndarray:
    """(n_layers, H): the step (1 = first) at which each head is removed."""
    ranks = np.zeros((n_layers, n_heads), dtype=int)
    for step, (layer, head) in enumerate(order, 1):
        ranks[int(layer), int(head)] = step
    return ranks


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two rankings without ties (1 = the same order)."""
    n = a.size
    if n < 2:
        return float("nan")
    d = (a.ravel() - b.ravel()).astype(float)
    return 1.0 - 6.0 * float(np.sum(d**2)) / (n * (n**2 - 1))


def figures(module: LearnerModule) -> list:
    """Ablation cost, importance and two pruning curves of the tiny model, by the learner's code."""
    model = tiny_model.load()
    n_layers, n_heads = len(model["layers"]), tiny_model.config()["n_heads"]
    n = n_layers * n_heads
    tokens, targets, _ = tiny_model.make_task(SEQUENCES, SEED)
    loss_change, accuracy_change = _pair(
        module.ablation_importance(model, tokens, targets, n_heads), "ablation_importance"
    )
    loss_change = _array(loss_change, (n_layers, n_heads), "ablation_importance (loss_change)")
    accuracy_change = _array(accuracy_change, (n_layers, n_heads), "ablation_importance (accuracy_change)")
    importance = _array(
        module.head_importance(model, tokens, targets, 1e-3, n_heads), (n_layers, n_heads), "head_importance"
    )
    curves, ranks = {}, {}
    for name, scores in (("importance order", importance), ("ablation order", loss_change)):
        order, accuracies = _pair(module.pruning_curve(model, tokens, targets, scores), "pruning_curve")
        order = _array(order, (n, 2), "pruning_curve (order)").astype(int)
        if order.min() < 0 or order[:, 0].max() >= n_layers or order[:, 1].max() >= n_heads:
            raise LearnerError("pruning_curve returned (layer, head) pairs outside the model.")
        curves[name] = tuple(float(a) for a in _array(accuracies, (n + 1,), "pruning_curve (accuracies)"))
        ranks[name] = _ranks(order, n_layers, n_heads)
    roles = {(h["layer"], h["head"]): h["role"] for h in tiny_model.card().get("heads", [])}
    rows = tuple(
        (
            f"L{layer} H{head}",
            roles.get((layer, head), ""),
            float(loss_change[layer, head]),
            float(accuracy_change[layer, head]),
            float(importance[layer, head]),
            int(ranks["importance order"][layer, head]),
            int(ranks["ablation order"][layer, head]),
        )
        for layer in range(n_layers)
        for head in range(n_heads)
    )
    rho = _spearman(ranks["importance order"], ranks["ablation order"])
    share = tuple(round(100.0 * k / n, 1) for k in range(n + 1))
    card_sequences = tiny_model.card()["eval"]["sequences"]
    return [
        NumberTable(
            f"Each head of the tiny model (L layer, H head) on {SEQUENCES} copy-task sequences (seed "
            f"{SEED}): what removing it alone costs, its importance E|dL/dxi| (each layer's row of l2 "
            "norm 1), and the step at which each order prunes it (1 = first; imp. = by importance, "
            f"abl. = by ablation loss). Spearman rank correlation of the two orders: {rho:.2f}. "
            f"Role (card): the model card's role, measured on its own {card_sequences} evaluation "
            "sequences.",
            ("head", "role (card)", "loss change", "acc. change", "importance", "imp. step", "abl. step"),
            rows,
            ("", "", "+.3f", "+.3f", ".3f", "d", "d"),
        ),
        LineChart(
            f"Accuracy on the same {SEQUENCES} sequences as heads are pruned one at a time, least "
            "important first (two markers side by side: both orders give that accuracy)",
            share,
            curves,
            x_label=f"% of the {n} heads pruned",
            y_label="accuracy on the scored positions",
            height=20,  # a row per 0.05 of accuracy: the values the lesson quotes can be read
        ),
    ]
