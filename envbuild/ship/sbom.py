"""An image -> its software bill of materials (CycloneDX JSON, by cyclonedx-python-lib).

Read from the image itself, without running it: its lock (/opt/envbuild/lock.txt: what the image added, each
with its sha256), the distributions installed in its environment (/opt/envbuild/installed.json, so the
base's own packages are listed too), its labels (backend, versions) and its base image. The same image gives
the same document: the serial number and timestamp come from the image's id and creation date.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

from cyclonedx.schema import OutputFormat, SchemaVersion
from packageurl import PackageURL
from packaging.utils import canonicalize_name

from envbuild.core.errors import EnvbuildError
from envbuild.image.lockfile import parse

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI

LOCK = "/opt/envbuild/lock.txt"
INSTALLED = "/opt/envbuild/installed.json"


def sbom(engine: EngineAPI, image: str) -> str:
    """The CycloneDX 1.6 JSON document of `image` (a local image reference or id)."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output import make_outputter

    found = engine.image(image)
    if found is None:
        raise EnvbuildError(f"image {image} is not on this Docker engine: build it or pull it first")
    lock_text, installed_json = engine.read_file(image, LOCK), engine.read_file(image, INSTALLED)
    if lock_text is None or installed_json is None:
        raise EnvbuildError(f"image {image} has no {LOCK if lock_text is None else INSTALLED}: it was built before envbuild "
                            "locked its images; build it again with `envbuild build`")
    lock = parse(lock_text.decode("utf-8"), f"{image}:{LOCK}")
    locked = {p.name: p for p in lock.packages}
    labels = found.labels
    base = labels.get("org.opencontainers.image.base.name", "")
    components = []
    for dist in sorted(json.loads(installed_json), key=lambda d: str(canonicalize_name(d["name"]))):
        name = str(canonicalize_name(dist["name"]))
        pin = locked.get(name)
        components.append(Component(
            type=ComponentType.LIBRARY, name=name, version=dist["version"], bom_ref=f"pypi:{name}",
            purl=PackageURL("pypi", name=name, version=dist["version"]),
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=h) for h in pin.sha256] if pin else None,
            properties=[Property(name="envbuild:origin", value=f"lock layer {pin.layer}" if pin else "base image")],
        ))
    subject = Component(
        type=ComponentType.CONTAINER, name=labels.get("org.opencontainers.image.title") or image, bom_ref=found.id,
        version=labels.get("org.opencontainers.image.version") or found.id,
        properties=[Property(name=k, value=v) for k, v in sorted(labels.items()) if k.startswith(("dev.envbuild.", "org.opencontainers."))],
    )
    if base:
        components.append(Component(type=ComponentType.CONTAINER, name=base, bom_ref=f"base:{base}",
                                    properties=[Property(name="envbuild:origin", value="base image")]))
    bom = Bom(components=components, serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"envbuild:{found.id}"),
              metadata=BomMetaData(component=subject, timestamp=found.created))
    bom.register_dependency(subject, components)
    return make_outputter(bom, OutputFormat.JSON, SchemaVersion.V1_6).output_as_string(indent=2) + "\n"
