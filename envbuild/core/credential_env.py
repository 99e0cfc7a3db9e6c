"""The environment variables that carry registry credentials: read by the registry stage, kept out of the
builder's and every container's environment by the stages before it, masked in every form by the output layer.
No imports at module level: the output layer loads this on every start-up."""

from __future__ import annotations

import base64
from typing import Mapping

USER_ENV = "ENVBUILD_REGISTRY_USER"
PASSWORD_ENV = "ENVBUILD_REGISTRY_PASSWORD"
# What carries registry credentials in envbuild's environment: never handed to the builder or a container.
CREDENTIAL_ENV = (USER_ENV, PASSWORD_ENV, "GITHUB_TOKEN",
                  "ENVBUILD_SIGNING_KEY", "ENVBUILD_KEY_PASSWORD", "COSIGN_PASSWORD")  # envbuild/ship/trust/keys.py


def forms(user: str, password: str) -> list[str]:
    """Every form in which a password shows up in text: itself, 'user:password', both in base64 (a Basic
    authorization header, a Docker config's "auth") and URL-encoded (a URL's userinfo). Longest first."""
    from urllib.parse import quote  # with ipaddress, 5 to 10 ms of every start; asked only where a password is set

    plain = [password, f"{user}:{password}"]
    found = plain + [quote(p, safe="") for p in plain]
    for p in plain:
        found += [base64.b64encode(p.encode()).decode(), base64.urlsafe_b64encode(p.encode()).decode()]
        found += [f.rstrip("=") for f in found[-2:]]
    return sorted({f for f in found if len(f) >= 4}, key=len, reverse=True)


def environment_forms(environ: Mapping[str, str]) -> list[str]:
    """The forms of the registry credentials this environment holds (envbuild's own, GitHub Actions')."""
    found: list[str] = []
    for user, password in ((USER_ENV, PASSWORD_ENV), ("GITHUB_ACTOR", "GITHUB_TOKEN")):
        if environ.get(password):
            found += forms(environ.get(user, ""), environ[password])
    return sorted(set(found), key=len, reverse=True)
