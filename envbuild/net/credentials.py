"""Registry credentials, looked up in one place and the same way for publish, pull and doctor.

In order: ENVBUILD_REGISTRY_USER + ENVBUILD_REGISTRY_PASSWORD; for ghcr.io also GITHUB_ACTOR + GITHUB_TOKEN
(GitHub Actions); else the Docker config (`docker login`, credential helpers), which the engine reads itself.
Never from the command line; never printed.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from envbuild.core.credential_env import CREDENTIAL_ENV, PASSWORD_ENV, USER_ENV, environment_forms, forms  # noqa: F401 (names of this module too)
from envbuild.core.errors import EnvbuildError, RegistryAuthError
from envbuild.core.files import read_user
from envbuild.core.paths import config_file

_DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str = ""  # the variables they came from, for messages (never the values)

    def auth_config(self) -> dict[str, str]:
        return {"username": self.username, "password": self.password}


def from_env(host: str, environ: Mapping[str, str] | None = None) -> Credentials | None:
    """Credentials from the environment, or None (then the Docker config decides). Half a pair is an error."""
    env = os.environ if environ is None else environ
    user, password = env.get(USER_ENV, ""), env.get(PASSWORD_ENV, "")
    if user or password:
        if not (user and password):
            missing = PASSWORD_ENV if user else USER_ENV
            raise RegistryAuthError(f"{missing} is not set: set both {USER_ENV} and {PASSWORD_ENV}, or neither to use the Docker config")
        return Credentials(user, password, f"{USER_ENV}/{PASSWORD_ENV}")
    return github_token(host, env)


def github_token(host: str, environ: Mapping[str, str] | None = None) -> Credentials | None:
    """GitHub Actions' token, for ghcr.io only (None for any other host, or without one)."""
    env = os.environ if environ is None else environ
    if host == "ghcr.io" and env.get("GITHUB_TOKEN"):
        if not env.get("GITHUB_ACTOR"):
            raise RegistryAuthError("GITHUB_TOKEN is set but GITHUB_ACTOR is not: GHCR needs both (the user and the token)")
        return Credentials(env["GITHUB_ACTOR"], env["GITHUB_TOKEN"], "GITHUB_ACTOR/GITHUB_TOKEN")
    return None


def docker_config_path(environ: Mapping[str, str] | None = None) -> Path:
    return config_file(environ)


def login_fix(host: str) -> str:
    return f"`docker login{'' if host == 'docker.io' else ' ' + host}` (or set {USER_ENV} and {PASSWORD_ENV})"


def _config_keys(host: str) -> tuple[str, ...]:
    """The keys under which the Docker config may hold `host`'s login: Docker Hub's own for docker.io only."""
    if host == "docker.io":
        return _DOCKER_HUB_KEYS
    return host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/"


def _read_config(path: Path) -> Any:
    return json.loads(read_user(path, str(path), limit=4 << 20))


def _login_entry(config: Any, host: str) -> Any:
    auths = config.get("auths") if isinstance(config, dict) and isinstance(config.get("auths"), dict) else {}
    return next((auths[k] for k in _config_keys(host) if k in auths), None)


def config_login(host: str, environ: Mapping[str, str] | None = None) -> Credentials | None:
    """A plain `docker login` of `host` kept in the Docker config itself (its `auth`); credential helpers and
    stores are not run, and no other host's login is ever taken. None where there is none or it cannot be read."""
    try:
        entry = _login_entry(_read_config(docker_config_path(environ)), host)
        user, _, password = base64.b64decode(entry["auth"]).decode("utf-8").partition(":")
    except (EnvbuildError, OSError, ValueError, RecursionError, TypeError, KeyError, AttributeError):
        return None
    return Credentials(user, password, "the Docker config") if user else None


def where(host: str, environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """(found, where): where credentials for `host` would come from, as publish and pull take them; never what
    they are. A half-set pair raises RegistryAuthError, as it does for publish."""
    creds = from_env(host, environ)
    if creds:
        return True, f"{creds.source} are set"
    path = docker_config_path(environ)
    if not path.exists():
        return False, f"no {USER_ENV}/{PASSWORD_ENV} variables and no {path}"
    try:
        config = _read_config(path)
    except (EnvbuildError, ValueError, RecursionError) as exc:
        return False, f"cannot read {path}: {exc}"
    if not isinstance(config, dict):
        return False, f"{path} is not a JSON object"
    keys = _config_keys(host)
    helpers = config.get("credHelpers") if isinstance(config.get("credHelpers"), dict) else {}
    helper = next((helpers[k] for k in keys if k in helpers), None)
    if helper:
        return True, f"credential helper docker-credential-{helper} ({path}; not read)"
    entry = _login_entry(config, host)
    if isinstance(entry, dict) and (entry.get("auth") or entry.get("identitytoken")):
        return True, f"a login in {path}"
    store = config.get("credsStore")
    if entry is not None and store:
        return True, f"a login kept by docker-credential-{store} ({path}; not read)"
    return False, f"no login for it in {path}"


class Scrubber:
    """Masks secrets in any text that reaches the user, in every form they take."""

    def __init__(self, creds: Credentials | None):
        self.secrets = forms(creds.username, creds.password) if creds and creds.password else []

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> "Scrubber":
        """For text from anywhere (an unexpected error too): the credentials the environment holds."""
        scrubber = cls(None)
        scrubber.secrets = environment_forms(os.environ if environ is None else environ)
        return scrubber

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text
