"""What the unit tests of hostile input share: secrets of every well-known shape (made up; none is real) that must
be masked wherever envbuild prints them, and a way to make the k-th file replacement fail."""

from __future__ import annotations

import base64
import os
from pathlib import Path

# Secrets of every well-known shape (made up; none is real). Each must be masked wherever envbuild prints it.
SECRET_VALUES = {
    "github-classic": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "github-fine-grained": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789",
    "github-oauth": "gho_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
    "github-app": "ghs_" + "0123456789abcdefghijABCDEFGHIJklmnopqr",
    "github-refresh": "ghr_" + "abcdefghijklmnopqrstuvwxyz0123456789AB",
    "github-user": "ghu_" + "QWERTYUIOPasdfghjklZXCVBNM1234567890",
    "huggingface": "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567",
    "huggingface-org": "api_org_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123",
    "aws-access-key": "AKIA" + "Q3EGRIOSFODNN7EX",
    "aws-session-key": "ASIA" + "ZZ9GRIOSFODNN7XY",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "gitlab": "glpat-" + "x9Y8z7W6v5U4t3S2r1Q0",
    "slack": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "openai-style": "sk-" + "proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "npm": "npm_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "pypi": "pypi-" + "AgEIcHlwaS5vcmcCJGE4YzQ1ZmQ3LTk0ZjAtNDdlOS05ZmQ1LWNhYjVkMjQ0YWQ3ZQ",
    "docker-hub": "dckr_pat_" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "google-api": "AIza" + "SyA-bCdEfGhIjKlMnOpQrStUvWxYz012345",
    "aws-secret-key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY",
    "github-short": "ghp_" + "0123456789abcdefXYZ",
    "huggingface-short": "hf_" + "abcdefghijKLMNOP12",
}


# The part of each that must never show (for a URL: the password; else the whole value).
SECRET_FORMS = {**{k: (v, v) for k, v in SECRET_VALUES.items()},
                "url-https": ("https://alice:Pa55-w0rd.x@pypi.corp.example/simple", "Pa55-w0rd.x"),
                "url-postgres": ("postgres://svc:db-s3cret-99@db.internal:5432/app", "db-s3cret-99"),
                "url-token-only": ("https://tok3n-only-abcdef@git.example/repo.git", "tok3n-only-abcdef"),
                "url-redis": ("redis://:r3dis-pass-xyz@cache:6379/0", "r3dis-pass-xyz"),
                "bearer": ("Bearer abc123.def456-ghi789_jkl", "abc123.def456-ghi789_jkl"),
                "basic": ("Basic " + base64.b64encode(b"bob:b0b-secret").decode(), base64.b64encode(b"bob:b0b-secret").decode()),
                # userinfo without a scheme: a registry reference, a --mirror rule, a [registry_mirrors] value
                "registry-userinfo": ("bob:S3cret-reg1@mirror.corp:5000/x", "S3cret-reg1"),
                "mirror-userinfo": ("docker.io=bob:S3cret-mir2@mirror.corp:5000", "S3cret-mir2"),
                "registry-userinfo-ipv6": ("bob:S3cret-v6x@[::1]:5000", "S3cret-v6x"),
                "query-token": ("https://files.example/w.whl?token=qu3ry-t0ken-1", "qu3ry-t0ken-1"),
                "query-access-token": ("https://h.example/a?x=1&access_token=acc3ss-t0k", "acc3ss-t0k"),
                "query-password": ("https://h.example/a?password=pw-in-qu3ry", "pw-in-qu3ry"),
                "authorization-bearer": ("Authorization: Bearer sh0rt", "sh0rt"),
                "authorization-token": ("authorization: token gh-0ld-style", "gh-0ld-style"),
                "authorization-custom": ("Proxy-Authorization: Negotiate YIIkerb3r0s", "YIIkerb3r0s"),
                "pem": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq9\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA7bq9")}


SHAPES = sorted(SECRET_FORMS)


def failing_replace(monkeypatch, k: int):
    """os.replace that fails on its k-th call (then works again: putting files back must be possible)."""
    real, calls = os.replace, [0]

    def replace(src, dst, *a, **kw):
        calls[0] += 1
        if calls[0] == k:
            raise PermissionError(13, "Permission denied", str(dst))
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    return calls


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

