"""The planning presets the TMMU spec names (``train_full``, ``inference``,
``remat_enabled``), as keyword arguments of :func:`emel.memory.plan` and
:func:`emel.memory.reference.plan` (docs/determinism.md §8).

A preset picks the arena configuration; the lifetime mode stays a separate
argument, so every preset runs in every mode.
"""

import copy
import random

PRESETS = {
    # The defaults: activations, gradients and inputs in reusing arenas,
    # parameters and optimizer state in the persistent `parameters` arena.
    "inference": {},
    # A whole training step: gradients are kept for the optimizer (and for
    # accumulation across micro-batches), so their arena never reuses memory.
    "train_full": {"arenas": {"gradients": {"persistent": True}}},
    # Rematerialisation frees activations early and recomputes them; the
    # runtime then lets gradients reuse activation memory: one reusing arena
    # for both (the planner itself does not recompute anything).
    "remat_enabled": {"role_arenas": {"gradient": "activations"}},
}


def shuffled(document: dict, rng: random.Random) -> dict:
    """The same graph with its lists (except execution order) and keys reordered:
    E0's reordered seeds (its ir_hash and plan must not change)."""
    doc = copy.deepcopy(document)
    if doc.get("execution_order") is None:   # absent or null: the node order
        doc["execution_order"] = [n["id"] for n in doc["nodes"]]
    rng.shuffle(doc["tensors"])
    rng.shuffle(doc["nodes"])

    def keys(obj):
        if isinstance(obj, dict):
            items = list(obj.items())
            rng.shuffle(items)
            return {k: keys(v) for k, v in items}
        if isinstance(obj, list):
            return [keys(v) for v in obj]
        return obj
    return keys(doc)
