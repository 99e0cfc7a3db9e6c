"""The environment variables that carry registry credentials: read by the registry stage, kept out of the
builder's and every container's environment by the stages before it."""

USER_ENV = "ENVBUILD_REGISTRY_USER"
PASSWORD_ENV = "ENVBUILD_REGISTRY_PASSWORD"
# What carries registry credentials in envbuild's environment: never handed to the builder or a container.
CREDENTIAL_ENV = (USER_ENV, PASSWORD_ENV, "GITHUB_TOKEN",
                  "ENVBUILD_SIGNING_KEY", "ENVBUILD_KEY_PASSWORD", "COSIGN_PASSWORD")  # envbuild/trust/keys.py
