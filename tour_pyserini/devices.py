"""Which torch device the query encoder and model-based teachers run on."""

from __future__ import annotations

from tour_pyserini.errors import UserError

DEVICES = ("cpu", "cuda")


def check_device(device: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``; a GPU that is not there is the user's error, named before any model loads."""
    kind, _, number = device.partition(":")
    if kind not in DEVICES or (number and (kind != "cuda" or not number.isdigit())):
        raise UserError(f"--device must be cpu, cuda or cuda:N, got {device!r}")
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"--device {device}: this torch build ({torch.__version__}) sees no CUDA device")
        if number and int(number) >= torch.cuda.device_count():
            raise UserError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) present")
    return device
