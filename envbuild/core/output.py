"""The one layer between envbuild and what it shows people: the terminal, logs and reports.

Everything the CLI prints goes through `SafeStream` (installed over stdout and stderr for the whole command), and
every log or report envbuild writes goes through `safe()`: secrets are masked (by the name of the variable that
holds them, by their value in every form, and by the shapes well-known tokens have), control and escape sequences
are shown escaped, and what an error quotes is capped.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import errno
import io
import os
import re
import sys
from typing import Callable, Iterator, Mapping

from envbuild.core.credential_env import CREDENTIAL_ENV, USER_ENV, environment_forms
from envbuild.core.errors import EnvbuildError
from envbuild.core.text import QUOTE_LIMIT, capped, shown  # noqa: F401 - capped: the CLI's error lines

MASK = "***"

# A variable (or a key=value, a JSON key, a query parameter) whose name says it holds a secret.
SECRET_WORDS = (r"token|secret|passwd|password|passphrase|pwd|credentials?|auth|authorization|api_?key|apikey|"
                r"access_?key|private_?key|secret_?key|client_?secret|signature|sig|cookie|session_?id|pat|key")
SECRET_NAME = re.compile(rf"(?:^|[_.-])(?:{SECRET_WORDS})(?:$|[_.-])|^(?:{SECRET_WORDS})$", re.IGNORECASE)


# Without the bare word KEY (CACHE_KEY, PARTITION_KEY are names, not secrets): what a matrix may not name at all.
_WORDS_STRICT = SECRET_WORDS.removesuffix("|key")


@functools.cache
def _secret_name_strict() -> re.Pattern:  # compiled when first asked: only a matrix's names are held to it
    return re.compile(rf"(?:^|[_.-])(?:{_WORDS_STRICT})(?:$|[_.-])|^(?:{_WORDS_STRICT})$", re.IGNORECASE)


def secret_name(name: str, strict: bool = False) -> bool:
    """Whether a variable called `name` holds a secret (HF_TOKEN, MY_PAT, DB_PASSWORD, AWS_SECRET_ACCESS_KEY); with
    `strict`, only names that cannot mean anything else (not a bare *_KEY)."""
    return bool((_secret_name_strict() if strict else SECRET_NAME).search(name))


def _basic(match: re.Match) -> str:
    try:
        decoded = base64.b64decode(match.group(2) + "=" * (-len(match.group(2)) % 4), validate=True)
    except (ValueError, TypeError):
        return match.group(0)
    return f"{match.group(1)}{MASK}" if b":" in decoded else match.group(0)


# No nested quantifiers and one start per word: linear in the text's length (a 2 MB value is scrubbed at once).
_NAME = r"[A-Za-z0-9_.-]*(?:token|secret|passwd|password|passphrase|pwd|credentials?|auth|authorization|apikey|signature|sig|cookie|pat|[_.-]key)"
# (pattern, replacement), applied in order; each keeps what says where the secret was and drops the secret.
@functools.cache
def shapes() -> list[tuple[re.Pattern, str | Callable[[re.Match], str]]]:
    """The shapes, compiled when text is first scrubbed: about 5 ms that `--help` (run on every Tab) need not pay."""
    return [
        # a private key block (PEM, OpenSSH), whole
        (re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.DOTALL),
         rf"-----BEGIN \1PRIVATE KEY----- {MASK}"),
        # a URL's userinfo (user:password@, token@), whatever the scheme
        (re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]{0,31}://)[^\s/?#\"'<>`]{0,512}@"), rf"\1{MASK}@"),
        # userinfo without a scheme: a registry reference or mirror (`bob:S3cret@mirror.corp:5000/x`,
        # `docker.io=bob:S3cret@mirror.corp`); not `python:3.12@sha256:...` (the digest is no host:port) nor `git@host`
        # (no password). The password stops at = , ; & ? # so that a long run of them stays linear.
        (re.compile(r"(?<![A-Za-z0-9._~%+/:@-])[A-Za-z0-9._~%+-]{1,128}:[^\s/@\"'<>`=,;&?#]{1,256}@"
                    r"(?!sha(?:256|384|512):)(?=(?:\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9.-]{1,253})(?::[0-9]{1,5})?(?:(?![A-Za-z0-9_.:@\[-])|:(?=\s|$)))"),
         f"{MASK}@"),
        # an Authorization header's value, whatever its scheme (Bearer, Basic, token, a custom one)
        (re.compile(r"(?<![A-Za-z0-9_-])((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|bearer|token|digest|negotiate)\s+)?)"
                    r"(?!\*\*\*)[^\s\"',;]+", re.IGNORECASE), rf"\1{MASK}"),
        # an HTTP authorization: Bearer TOKEN, Basic BASE64(user:password)
        (re.compile(r"\b((?:Bearer|bearer|BEARER)\s+)[A-Za-z0-9._~+/-]{8,}=*"), rf"\1{MASK}"),
        (re.compile(r"\b((?:Token|token)\s+)(?=[A-Za-z._~+/-]*[0-9])[A-Za-z0-9._~+/-]{12,}=*"), rf"\1{MASK}"),
        (re.compile(r"\b((?:Basic|basic|BASIC)\s+)([A-Za-z0-9+/]{6,}=*)"), _basic),
        # NAME=VALUE, NAME: VALUE in JSON ("name": "value"), ?name=value, for a secret-looking NAME
        (re.compile(rf"(?<![A-Za-z0-9_.-])({_NAME}(?![A-Za-z0-9])[\"']?)(\s*=\s*|[\"']?\s*:\s*[\"'])([^\s\"',;&)}}\]]+)", re.IGNORECASE),
         rf"\1\2{MASK}"),
        # netrc contents: `password X` where netrc has it (a line of its own, or after machine/login/account on one
        # line); not `getent passwd 1000` in a build log
        (re.compile(r"^([ \t]*(?:(?:machine|login|account|default)\b[^\n]*?[ \t])?(?:password|passwd)[ \t]+)(?!\*\*\*)\S+",
                    re.IGNORECASE | re.MULTILINE), rf"\1{MASK}"),
        # well-known token shapes
        (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,})"), MASK),  # GitHub
        (re.compile(r"\b(?:hf_[A-Za-z0-9]{16,}|api_org_[A-Za-z0-9]{16,})"), MASK),  # Hugging Face
        (re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}\b"), MASK),  # AWS
        # an AWS secret access key: 40 characters of base64 with both cases and a digit (a git or image digest is hex)
        (re.compile(r"(?<![A-Za-z0-9/+_-])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])(?=[A-Za-z0-9/+]{0,39}[0-9])"
                    r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=_-])"), MASK),
        (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), MASK),  # JWT
        (re.compile(r"\b(?:glpat-[A-Za-z0-9_-]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}|pypi-[A-Za-z0-9_-]{40,}|"
                    r"npm_[A-Za-z0-9]{20,}|dckr_pat_[A-Za-z0-9_-]{16,}|sk-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{30,}|"
                    r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,})"), MASK),
    ]


def _env_secrets(environ: Mapping[str, str]) -> list[str]:
    """Values of this environment's secret-named variables, and registry credentials in every form."""
    values = environment_forms(environ)
    for name, value in environ.items():
        if secret_name(name) and len(value) >= 8 and not value.startswith("/"):
            values.append(value)
        elif name in CREDENTIAL_ENV and len(value) >= 4 and name != USER_ENV:  # envbuild's own: short ones too
            values.append(value)
    return sorted(set(values), key=len, reverse=True)


# Secrets this process came to hold (a registry's bearer token, a password read from a Docker config): masked in
# every line printed from then on, as the environment's are, wherever a remote answer echoes them.
_HELD: set[str] = set()


def hold_secret(value: str | None) -> None:
    if value and len(value) >= 4:
        _HELD.add(value)


class Scrubber:
    """Masks secrets: the values the environment holds under secret names, those this process holds, and every
    value of a known shape."""

    def __init__(self, environ: Mapping[str, str] | None = None, extra: tuple[str, ...] = (), guess: bool = True):
        env = os.environ if environ is None else environ
        self.values = sorted({*_env_secrets(env), *(v for v in extra if len(v) >= 4)}, key=len, reverse=True)
        self.guess = guess  # also every value of a known shape

    def known(self, text: str) -> str:
        """Only the values this process knows to be secret masked (the environment's, those it came to hold), no
        guessing by shape: for data built from what holds no secret, which a guess would only corrupt."""
        for value in (*sorted(_HELD, key=len, reverse=True), *self.values):
            if value in text:
                text = text.replace(value, MASK)
        return text

    def __call__(self, text: str) -> str:
        text = self.known(text)
        for pattern, replacement in shapes() if self.guess else ():
            text = pattern.sub(replacement, text)
        return text


def scrub(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with every secret masked."""
    return Scrubber(environ)(text)


def masked(text: str, limit: int = QUOTE_LIMIT) -> str:
    """One value as an error quotes it, where it may carry a credential (a mirror, a proxy, a URL): every secret
    shape masked before it is quoted (not only when printed: a record or an exception's text holds no password
    either), escaped and capped."""
    return shown(scrub(text, environ={}), limit=limit)


def safe(text: str, scrubber: Callable[[str], str] | None = None) -> str:
    """Text for a log, a report or a terminal: secrets masked, every control character but newline and tab shown
    escaped."""
    return shown((scrubber or Scrubber())(text), keep="\n\t")


# The SGR codes click.style writes for envbuild's colours (they cannot move the cursor or hide text).
_STYLE = re.compile(r"\x1b\[(?:0|1|22|3[0-79]|9[0-7])m")


def no_color(environ: Mapping[str, str] | None = None) -> bool:
    """NO_COLOR (https://no-color.org): set and not empty, nothing is coloured."""
    return bool((os.environ if environ is None else environ).get("NO_COLOR"))


class OutputFault(EnvbuildError):
    """Standard output or error could not be written (a closed pipe, a full device)."""

    def __init__(self, message: str, closed: bool):
        super().__init__(message)
        self.closed = closed


class SafeStream(io.TextIOBase):
    """A text stream that writes through to `raw` only what `safe()` lets through (and envbuild's own colours).
    A closed pipe or a full device becomes an OutputFault, not a traceback."""

    def __init__(self, raw, name: str, scrubber: Scrubber):
        self.raw = raw
        self.stream_name = name
        self.scrubber = scrubber
        self.fault: OutputFault | None = None  # once it failed, every later write fails the same way

    @property
    def encoding(self):  # noqa: D401 - what click asks of a text stream
        return getattr(self.raw, "encoding", "utf-8")

    @property
    def errors(self):
        return getattr(self.raw, "errors", "strict")

    def isatty(self) -> bool:
        try:
            return self.raw.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    def clean(self, text: str) -> str:
        text = self.scrubber(text)
        if not self.isatty() or no_color():  # no colours off a terminal or under NO_COLOR: every escape shown
            return shown(text, keep="\n\t")
        parts = _STYLE.split(text)
        styles = _STYLE.findall(text)
        out = [shown(parts[0], keep="\n\t")]
        for style, part in zip(styles, parts[1:]):
            out += [style, shown(part, keep="\n\t")]
        return "".join(out)

    def write(self, text: str, *, data: bool = False) -> int:
        if not isinstance(text, str):
            raise TypeError("SafeStream takes text")
        if self.fault is not None:
            raise self.fault
        if not text:
            return 0
        try:
            self.raw.write(shown(self.scrubber.known(text), keep="\n\t") if data else self.clean(text))
        except OSError as exc:
            raise self._fault(exc) from None
        return len(text)

    def flush(self) -> None:
        if self.fault is not None:
            raise self.fault
        try:
            self.raw.flush()
        except OSError as exc:
            raise self._fault(exc) from None
        except ValueError:  # closed
            pass

    def _fault(self, exc: OSError) -> OutputFault:
        closed = exc.errno in (errno.EPIPE, errno.ECONNRESET)
        try:  # what is still buffered must not fail again when Python exits
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.raw.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass
        self.fault = OutputFault(f"cannot write to standard {self.stream_name}: {exc.strerror or exc}", closed)
        return self.fault


def print_data(text: str) -> None:
    """One line (or document) for scripts on standard output, as it is: an image reference, `pick --for`'s lines, a
    JSON document. The caller builds it from data that holds no secret (the matrix and the site settings refuse
    secrets; hosts' facts carry none), so no token-shaped guess scrubs it into a wrong value
    (ghcr.io/org/sk-learn-torch-images stays itself); the secrets this process knows are still masked, and control
    characters still shown escaped."""
    stream = sys.stdout
    if isinstance(stream, SafeStream):
        stream.write(text + "\n", data=True)
        stream.flush()
    else:  # outside a command (a library caller): the guarded stream's rule, by hand
        print(shown(Scrubber().known(text), keep="\n\t"), file=stream, flush=True)


@contextlib.contextmanager
def guarded(environ: Mapping[str, str] | None = None, guess: bool = True) -> Iterator[Scrubber]:
    """stdout and stderr through SafeStream for the length of a command; the scrubber they share (without `guess`:
    the secrets this process knows only, for text that holds no value from outside)."""
    scrubber = Scrubber(environ, guess=guess)
    saved = sys.stdout, sys.stderr
    sys.stdout = SafeStream(saved[0], "output", scrubber) if saved[0] is not None else None
    sys.stderr = SafeStream(saved[1], "error", scrubber) if saved[1] is not None else None
    try:
        yield scrubber
    finally:
        sys.stdout, sys.stderr = saved
