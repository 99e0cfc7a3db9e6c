"""`envbuild clean`: what envbuild left on the engine after a crash, removed and listed.

Every container envbuild starts carries the dev.envbuild.owned label, its owner and its checkout (the project
folder it was started from; envbuild/engine/owner.py), and every image it builds the dev.envbuild.backend label:
containers that no longer run and whose run is gone (a daemon or process killed mid-smoke leaves them) and
untagged images (build results that a newer build replaced) can be told apart from the user's and from another
run's at work. By default only this checkout's: its containers by their label, its images by the list of the
ids its builds made (.envbuild/images-built.txt), so an engine several checkouts share loses nobody else's;
--all takes every envbuild-made one on the engine. --dry-run lists what would go and removes nothing.
With --build-cache, the BuildKit cache mounts of envbuild's own install steps go too (told apart by the
step's command; shared by every checkout on the engine): the way out when a cache is suspected after an
interrupted build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.engine.owner import IMAGES_MADE, checkout, images_made, remove_left_behind

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI

IMAGE_LABEL = "dev.envbuild.backend"


@dataclass
class Cleaned:
    containers: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # "IMAGE: why it stays"
    build_caches: list[str] = field(default_factory=list)  # "ID (SIZE bytes): what it cached"
    freed: int = 0  # bytes of build cache removed
    scope: str = "checkout"  # "checkout" (this folder's), "all" (every envbuild-made one on the engine)
    dry_run: bool = False  # listed what would go; removed nothing

    def to_json(self) -> dict:
        return {"containers": self.containers, "images": self.images, "kept": self.kept,
                "build_caches": self.build_caches, "freed_bytes": self.freed, "scope": self.scope,
                "dry_run": self.dry_run}


# What only envbuild's install steps run (uv from its stage, the resolver, the uv stage's pip, the cache folders
# the Dockerfiles name): a cache mount whose step ran one of these is envbuild's. Older envbuild's steps too.
_OWN_STEP = re.compile(r"/run/uv/uv |UV_CACHE_DIR=|PIP_CACHE_DIR=\"/root/\.cache/pip/|/run/lock/resolve\.py|--target /opt/uv ")
_OWN_TARGET = re.compile(r"^cached mount (/root/\.cache/uv|/root/\.cache/pip) from exec ")


def own_build_caches(engine: EngineAPI) -> list[dict]:
    """envbuild's uv and pip cache mounts on this engine (apt's lists and debs, checked by apt, are left)."""
    return [r for r in engine.build_cache_mounts()
            if _OWN_TARGET.match(r.get("Description") or "") and _OWN_STEP.search(r.get("Description") or "")]


def build_caches(engine: EngineAPI, done: Cleaned) -> None:
    for record in own_build_caches(engine):
        what = _OWN_TARGET.match(record["Description"]).group(1)
        if record.get("InUse"):
            done.kept.append(f"build cache {record['ID'][:12]} ({what}): a build is using it now")
            continue
        done.freed += 0 if done.dry_run else engine.prune_build_cache(record["ID"])
        done.build_caches.append(f"{record['ID'][:12]} ({what}, {int(record.get('Size') or 0)} bytes)")


def clean(engine: EngineAPI, images: bool = True, build_cache: bool = False, *, every: bool = False,
          dry_run: bool = False, folder: Path | None = None) -> Cleaned:
    """Remove (with dry_run: list) what envbuild left: this checkout's (`folder`, default the current one), or
    with `every` every envbuild-made container and untagged image on the engine."""
    here = Path(folder or ".")
    scope = None if every else checkout(here)
    done = Cleaned(containers=remove_left_behind(engine, scope, dry_run), scope="all" if every else "checkout",
                   dry_run=dry_run)
    if build_cache:
        build_caches(engine, done)
    if images:
        made_here = None if every else set(images_made(here / IMAGES_MADE))
        for image in engine.dangling_images(IMAGE_LABEL):
            if made_here is not None and image not in made_here:
                continue
            why = None if dry_run else engine.remove_image(image)
            if why is None:
                done.images.append(image)
            else:
                done.kept.append(f"{image[:19]}: {why}")
    return done
