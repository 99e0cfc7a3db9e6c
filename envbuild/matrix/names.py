"""The names people use for a backend (amd, nvidia, Gaudi, Ascend, ...) and the name messages call it by.

One table: `Matrix.backend` resolves through it, messages name a backend by `human()` (the matrix's description,
e.g. "AMD GPU (ROCm)") rather than its device string (ROCm's torch calls its device `cuda`).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from envbuild.matrix.model import Backend

# What people call an accelerator -> the backend's name in the matrix (compared case-folded).
ALIASES = {
    "amd": "rocm", "radeon": "rocm", "instinct": "rocm",
    "nvidia": "cuda",
    "gaudi": "hpu", "habana": "hpu",
    "ascend": "npu", "huawei": "npu", "cann": "npu",
    "trainium": "neuron", "inferentia": "neuron", "aws": "neuron",
    "apple": "mps", "metal": "mps", "mac": "mps",
    "google": "tpu", "xla": "tpu",
    "cambricon": "mlu",
    "moorethreads": "musa", "moore-threads": "musa", "moore_threads": "musa", "mthreads": "musa",
    "arc": "xpu",
}

# Names that mean more than one backend: the message names each and asks which.
AMBIGUOUS = {
    "intel": ("xpu", "hpu"),
    "gpu": ("cuda", "rocm", "xpu"),
}


def human(backend: Backend) -> str:
    """The accelerator as people know it: "AMD GPU (ROCm)", "Intel Gaudi", "AWS Trainium"."""
    return backend.description or backend.name


def resolve(name: str, names: Iterable[str], described: dict[str, str] | None = None) -> tuple[str | None, str]:
    """(the backend `name` means, "") or (None, why not: a suggestion or the choice an ambiguous name leaves);
    `described`: what each backend is, to name it so in the suggestion."""
    names = list(names)

    def said(n: str) -> str:
        return f"{n} ({described[n]})" if described and described.get(n) else n

    if name in names:
        return name, ""
    folded = name.strip().casefold()
    for candidate in names:
        if candidate.casefold() == folded:
            return candidate, ""
    if ALIASES.get(folded) in names:
        return ALIASES[folded], ""
    if folded in AMBIGUOUS:
        meant = [n for n in AMBIGUOUS[folded] if n in names]
        if len(meant) == 1:
            return meant[0], ""
        if meant:
            return None, f"'{folded}' could mean {' or '.join(said(n) for n in meant)}: say which"
    close = difflib.get_close_matches(folded, [*names, *(a for a, t in ALIASES.items() if t in names)], n=1, cutoff=0.6)
    if close:
        meant = close[0] if close[0] in names else ALIASES[close[0]]
        what = f", the {described[meant]}" if described and described.get(meant) else ""
        return None, f"did you mean {meant}{what}?"
    return None, ""


def aliases_of(backend_name: str) -> list[str]:
    return [a for a, t in ALIASES.items() if t == backend_name]
