"""Whether a checkpoint's weights cover the model class that loads it.

transformers fills every parameter a checkpoint lacks with random numbers and goes on, a log line at most:
a checkpoint of another architecture (a MiniLM read by DPR's classes, a BERT read as a causal LM) then
loads, and encodes or scores at random. Every model loaded for encoding, scoring or reading is loaded
inside :func:`checked_loading`, which reads transformers' own account of each load (``output_loading_info``:
what stays missing after the weights the class ties and the keys it declares it may lack) and refuses a
model with parameters the checkpoint does not hold, in one line naming them. Checkpoint weights the class
does not read (a cross-encoder's head under an encoder class) leave the model as the checkpoint made it:
they are a warning.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from tour_pyserini.errors import UserError

log = logging.getLogger(__name__)

# BERT's pooler: every encoder class pools hidden states (DPR's "pooler output" is its first token), so a
# checkpoint saved without it encodes the same, and one with it under a pooler-less class loses nothing
POOLER = r"(^|\.)pooler\."
SHOWN = 3  # parameter names a message spells out


@contextmanager
def checked_loading(what: str, *, unused: str | None = None) -> Iterator[None]:
    """Check every transformers model loaded in the block, by this code or by the libraries it calls
    (Pyserini's encoder classes, sentence-transformers): one whose checkpoint leaves parameters out, or
    holds weights of another shape, is refused in one line that starts with ``what`` (e.g.
    ``"--encoder DIR"``). ``unused``: a pattern of parameters the caller never reads, which may be missing."""
    from unittest.mock import patch

    from transformers import PreTrainedModel

    loads: list[tuple[str, int, dict]] = []
    original = PreTrainedModel.__dict__["from_pretrained"]

    def recording(cls, *args, **kwargs):
        asked = kwargs.pop("output_loading_info", False)
        kwargs.setdefault("ignore_mismatched_sizes", True)  # reported below in one line, not raised mid-load
        model, info = original.__func__(cls, *args, output_loading_info=True, **kwargs)
        loads.append((type(model).__name__, len(model.state_dict()), info))
        return (model, info) if asked else model

    transformers_log = logging.getLogger("transformers.modeling_utils")
    # the class's own classmethod is put back on leaving, as the block ends or raises
    with patch.object(PreTrainedModel, "from_pretrained", classmethod(recording)):
        transformers_log.addFilter(_without_load_report)
        try:
            yield
        finally:
            transformers_log.removeFilter(_without_load_report)
    for class_name, parameters, info in loads:
        check_loading_info(what, class_name, parameters, info, unused=unused)


def _without_load_report(record: logging.LogRecord) -> bool:
    """transformers' table of missing and unexpected keys: said in one line here instead."""
    return "LOAD REPORT" not in record.getMessage()


def check_loading_info(what: str, class_name: str, parameters: int, info: dict, *, unused: str | None = None) -> None:
    """Refuse a load whose ``info`` (transformers' ``output_loading_info``) leaves any of the ``parameters``
    of ``class_name`` missing (but those matching ``unused``) or mis-shaped; warn of checkpoint weights left
    unread (but a pooler)."""
    missing = sorted(k for k in info["missing_keys"] if not (unused and re.search(unused, k)))
    if missing:
        raise UserError(
            f"{what}: its checkpoint lacks {len(missing)} of the {parameters} parameters of "
            f"{class_name} ({names(missing)}), which would be random: a checkpoint of another "
            "architecture"
        )
    mismatched = sorted(info["mismatched_keys"])
    if mismatched:
        key, stored, wanted = mismatched[0]
        raise UserError(
            f"{what}: {len(mismatched)} weights of its checkpoint have another shape than {class_name}'s "
            f"parameters (first: {key} {tuple(stored)}, {class_name} {tuple(wanted)})"
        )
    unread = sorted(k for k in info["unexpected_keys"] if not re.search(POOLER, k))
    if unread:
        log.warning(
            "%s: %d weights of its checkpoint are not read by %s (%s): a model trained for another task?",
            what,
            len(unread),
            class_name,
            names(unread),
        )


def names(keys: list[str]) -> str:
    """The first few of ``keys``, and how many more."""
    more = f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
    return ", ".join(keys[:SHOWN]) + more
