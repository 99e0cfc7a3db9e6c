"""AWS Neuron SDK on the Neuron driver (aws-neuronx-dkms). Each fact with its source."""

from __future__ import annotations

from envbuild.core.hostfacts import module_reader
from envbuild.matrix.stacks.base import Stack

STACK = Stack(
    # Neuron: SDK 2.33.0 was tested with Neuron Driver 2.31 (aws-neuronx-dkms), per the Neuron Runtime and Driver
    # compatibility reference (awsdocs-neuron, 2026-10-08). UNCONFIRMED as a minimum: a mismatch only warns.
    "neuron", "Neuron SDK", "neuron", "Neuron driver", {"2.33": "2.31"},
    source="Neuron Runtime and Driver compatibility reference (tested, UNCONFIRMED as a minimum)",
    image_version=r"-sdk(\d+\.\d+)(?:\.\d+)?-",
    read_host=module_reader("neuron"),  # /sys/module/neuron/version
)
