"""`envbuild clean`: what envbuild left on the engine after a crash, removed and listed.

Every container envbuild starts carries the dev.envbuild.owned label and its owner (envbuild/owner.py), and every
image it builds the dev.envbuild.backend label: containers that no longer run and whose run is gone (a daemon or
process killed mid-smoke leaves them) and untagged images (build results that a newer build replaced) can be told
apart from the user's and from another run's at work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .owner import remove_left_behind

if TYPE_CHECKING:
    from .engine import Engine

IMAGE_LABEL = "dev.envbuild.backend"


@dataclass
class Cleaned:
    containers: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # "IMAGE: why it stays"

    def to_json(self) -> dict[str, list[str]]:
        return {"containers": self.containers, "images": self.images, "kept": self.kept}


def clean(engine: Engine, images: bool = True) -> Cleaned:
    done = Cleaned(containers=remove_left_behind(engine))
    if images:
        for image in engine.dangling_images(IMAGE_LABEL):
            why = engine.remove_image(image)
            if why is None:
                done.images.append(image)
            else:
                done.kept.append(f"{image[:19]}: {why}")
    return done
