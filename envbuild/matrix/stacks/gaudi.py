"""Intel Gaudi software on the habanalabs driver. Each fact with its source."""

from __future__ import annotations

from envbuild.core.hostfacts import module_reader
from envbuild.matrix.stacks.base import Stack

STACK = Stack(
    # Gaudi: the driver and the container image come from one software release (docs.habana.ai support matrix
    # lists one build per release). UNCONFIRMED that an older driver is refused: a mismatch only warns.
    "gaudi", "Intel Gaudi software", "habanalabs", "habanalabs driver",
    {"1.24": "1.24.0"}, source="docs.habana.ai Support Matrix (UNCONFIRMED as a minimum)",
    image_version=r"gaudi-docker/(\d+\.\d+\.\d+)/",
    read_host=module_reader("habanalabs"),  # /sys/module/habanalabs/version
)
