"""One platform, read once: Docker's spellings give one canonical form, and every command that takes --platform
accepts and refuses the same spellings with the same message (exit 2, the value escaped), before any engine."""

from __future__ import annotations

import os

import click
import pytest
from hypothesis import given, settings, strategies as st
from support.constants import FIXED

from envbuild.cli import app
from envbuild.core.errors import InvalidInput
from envbuild.core.platform import InvalidPlatform, Platform, canonical, parse_list, target
from support.properties import HOSTILE, PROPS, own_error

ACCEPTED = {
    "linux/amd64": "linux/amd64",
    "LINUX/AMD64": "linux/amd64",
    "linux/x86_64": "linux/amd64",
    "x86_64": "linux/amd64",  # a bare architecture: Docker reads it as Linux's
    "linux/aarch64": "linux/arm64",
    "linux/arm64/v8": "linux/arm64",  # Docker drops arm64's v8
    "linux/arm64": "linux/arm64",
    "Linux/PPC64LE": "linux/ppc64le",
}
REFUSED = ["linux/arm/v7", "linux/amd64/v3", "windows/amd64", "darwin/arm64", "linux", "", " linux/amd64", "linux//amd64",
           "linux/amd64\nError: forged", "linux/amd64\x1b[2J", "linux/amd64,linux/arm64"]


def _commands() -> dict[str, click.Command]:
    """Every command (and subcommand) with a --platform option: a new one is held to the same table."""
    found = {}
    for name, cmd in app.every_command().items():
        for sub_name, sub in ([(name, cmd)] + [(f"{name} {n}", c) for n, c in getattr(cmd, "commands", {}).items()]):
            if any("--platform" in getattr(p, "opts", ()) for p in sub.params):
                found[sub_name] = sub
    return found


COMMANDS = _commands()


def _read(name: str, spelling: str) -> tuple[int, str]:
    """(0, the platform the command was given) or (exit code, message) for `envbuild NAME --platform SPELLING`:
    the options are read as the command would read them, without running it (no engine, no registry)."""
    cmd = COMMANDS[name]
    try:
        ctx = cmd.make_context(name, ["--platform", spelling])
    except click.ClickException as exc:
        return exc.exit_code, exc.format_message()
    param = next(p for p in cmd.params if "--platform" in p.opts)
    value = ctx.params[param.name]
    return 0, ",".join(p for many in value for p in many) if param.multiple else value


def test_the_commands_with_a_platform():
    assert set(COMMANDS) == {"build", "lock", "smoke", "pull", "publish"}


@pytest.mark.parametrize("spelling", [*ACCEPTED, *REFUSED])
def test_every_command_gives_a_spelling_the_same_answer(spelling):
    answers = {name: _read(name, spelling) for name in COMMANDS}
    if "," in spelling:  # publish's list (one image index), read element by element; the others take one
        assert answers.pop("publish") == (0, spelling)
    assert len(set(answers.values())) == 1, answers
    code, said = next(iter(answers.values()))
    if spelling in ACCEPTED:
        assert (code, said) == (0, ACCEPTED[spelling])
    else:
        assert code == 2 and said.startswith("Invalid value for '--platform': '")
        assert "give one of linux/amd64, linux/arm64, linux/ppc64le, linux/s390x" in said
        assert said.isprintable(), said  # escaped: no line break, no terminal control


def test_publish_reads_each_platform_of_its_list_by_the_same_rule():
    assert _read("publish", "LINUX/aarch64,linux/x86_64,linux/arm64") == (0, "linux/arm64,linux/amd64")
    code, said = _read("publish", "linux/amd64,linux/amd64\nError: forged")
    assert code == 2 and "'linux/amd64\\nError: forged' is not a platform envbuild builds for" in said


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_forged_line_is_refused_on_one_line_with_exit_2(invoke, name):
    result = invoke(*name.split(), "--matrix", FIXED, "--backend", "cpu", "--platform", "linux/amd64\nError: forged")
    assert result.exit_code == 2, result.output
    assert [ln for ln in result.output.splitlines() if ln.startswith("Error:")] == [
        "Error: Invalid value for '--platform': 'linux/amd64\\nError: forged' is not a platform envbuild builds for: give "
        "one of linux/amd64, linux/arm64, linux/ppc64le, linux/s390x (or Docker's other names: x86_64, aarch64, arm64/v8)"]


def test_lock_check_reads_dockers_spellings_as_build_does(invoke, tmp_path):
    """`lock --check` refused linux/arm64/v8 that build took: now both read it as linux/arm64 (the lock's file)."""
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "linux-amd64.txt").write_text("# a lock of another platform\n")
    result = invoke("lock", "--check", "--matrix", FIXED, "--backend", "cpu", "--platform", "linux/arm64/v8",
                    "--locks", tmp_path)
    assert result.exit_code == 1 and "there is no lock for linux/arm64" in result.output, result.output


def test_build_help_offers_one_platform():
    help_ = next(p for p in COMMANDS["build"].params if "--platform" in p.opts).help
    assert "comma" not in help_ and "One per build" in help_


def test_parse_normalises_as_docker_and_prints_one_way():
    for spelling, want in ACCEPTED.items():
        assert str(Platform.parse(spelling)) == want
    for spelling in REFUSED:
        with pytest.raises(InvalidPlatform):
            Platform.parse(spelling)
    assert issubclass(InvalidPlatform, InvalidInput)  # a library caller's bad platform exits 2 too
    assert str(Platform.parse("darwin/arm64", ("linux", "darwin"))) == "darwin/arm64"  # the matrix's mps
    assert parse_list("linux/amd64,linux/x86_64") == ("linux/amd64",)
    assert str(Platform.host("Linux", "aarch64")) == "linux/arm64"
    assert target(None) == str(Platform.host()) and target("linux/arm64") == "linux/arm64"


def test_what_registries_say_is_spelled_the_same_way():
    """An index's linux/arm64/v8 is the linux/arm64 a user asks for; what is no platform stays as it was."""
    assert canonical("linux/arm64/v8") == "linux/arm64" and canonical("linux/arm/v7") == "linux/arm/v7"
    assert canonical("unknown/unknown") == "unknown/unknown" and canonical("a\nb") == "a\nb"


def test_the_matrix_keeps_its_platforms_in_one_spelling():
    from envbuild.matrix import load
    from envbuild.core.errors import MatrixError

    m = load(FIXED, ["backends.cpu.platforms=[linux/x86_64, LINUX/arm64/v8]"], with_facts=False)
    assert m.backend("cpu").platforms == ("linux/amd64", "linux/arm64")
    with pytest.raises(MatrixError, match="is not a platform such as 'linux/amd64'"):
        load(FIXED, ["backends.cpu.platforms=[linux/arm/v7]"], with_facts=False)


@pytest.mark.parametrize("name", [*sorted(COMMANDS), "lock --check"])
def test_a_platform_the_backend_does_not_list_is_refused_alike_before_any_engine(invoke, closed_socket, name):
    """exit 2 (the input's fault) from every command, in its canonical spelling, with no engine or registry asked:
    publish said it with exit 1, after logging in; smoke and pull never checked."""
    result = invoke(*name.split(), "--matrix", FIXED, "--backend", "cpu", "--platform", "LINUX/S390X")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: --platform linux/s390x: backend cpu lists linux/amd64, linux/arm64 (matrix.yaml, its `platforms`)")


# --- Property tests (hypothesis): any input is parsed or refused with envbuild's own clean error (from test_properties.py)

PLATFORM_TEXT = st.one_of(HOSTILE, st.builds("/".join, st.lists(st.sampled_from(
    ["linux", "LINUX", "windows", "amd64", "x86_64", "aarch64", "arm64", "v8", "v7", "arm", "", "s390x", "\x1b"]),
    min_size=1, max_size=4)))


@PROPS
@given(PLATFORM_TEXT)
def test_a_platform_parses_or_is_refused_and_round_trips(text):
    from envbuild.core.platform import Platform, canonical, parse_list

    found = own_error(lambda: Platform.parse(text))
    if found is not None:
        assert Platform.parse(str(found)) == found and canonical(str(found)) == str(found)
    normal = Platform.normal(text)
    if normal is not None:
        assert Platform.normal(str(normal)) == normal
    assert canonical(canonical(text)) == canonical(text)
    own_error(lambda: parse_list(text))


# --- Platform as a value, end to end: what the CLI makes is what the stages take ---------------------------------

SPELLINGS = {  # Docker's (containerd's) spellings of each platform envbuild builds for
    "linux/amd64": ["linux/amd64", "LINUX/AMD64", "Linux/amd64", "linux/x86_64", "linux/x86-64", "linux/amd64/v1",
                    "amd64", "x86_64", "X86_64"],
    "linux/arm64": ["linux/arm64", "linux/aarch64", "LINUX/AARCH64", "linux/arm64/v8", "linux/arm64/8",
                    "linux/aarch64/v8", "arm64", "aarch64", "arm64/v8"],
    "linux/ppc64le": ["linux/ppc64le", "Linux/PPC64LE", "ppc64le"],
    "linux/s390x": ["linux/s390x", "s390x"],
}


def test_the_value_carries_its_forms():
    p = Platform.parse("linux/aarch64")
    assert isinstance(p, Platform) and (p.os, p.arch, p.variant) == ("linux", "arm64", "")
    assert (p.oci, p.stem, str(p), f"{p}", repr(p)) == ("linux/arm64", "linux-arm64", "linux/arm64", "linux/arm64",
                                                        "Platform('linux/arm64')")
    assert type(str(p)) is str and p == "linux/arm64" and p == Platform("linux", "arm64") == Platform("aarch64")
    assert p.oci_dict() == {"architecture": "arm64", "os": "linux"}
    assert Platform.normal("linux/arm/v7").oci_dict() == {"architecture": "arm", "os": "linux", "variant": "v7"}
    assert __import__("json").dumps({"platform": p}) == '{"platform": "linux/arm64"}'  # serialised as before
    assert __import__("pickle").loads(__import__("pickle").dumps(p)) == p
    with pytest.raises(InvalidPlatform):
        Platform("linux//amd64")


def _fixed_cpu():
    from envbuild.matrix import load

    return load(FIXED, with_facts=False).backend("cpu")


def test_the_matrix_and_the_cli_give_platforms():
    cpu = _fixed_cpu()
    assert cpu.platforms == ("linux/amd64", "linux/arm64") and all(isinstance(p, Platform) for p in cpu.platforms)
    param = next(p for p in COMMANDS["build"].params if "--platform" in p.opts)
    assert isinstance(param.type.convert("linux/aarch64", None, None), Platform)
    param = next(p for p in COMMANDS["publish"].params if "--platform" in p.opts)
    assert all(isinstance(p, Platform) for p in param.type.convert("aarch64,x86_64", None, None))


@pytest.mark.parametrize("listed", ["linux/amd64", "linux/arm64"])
def test_check_platform_accepts_each_of_dockers_spellings_of_a_listed_platform(monkeypatch, listed):
    """imagebuild.check_platform(cpu, 'linux/aarch64') refused a platform cpu lists: only the CLI's normalising hid
    it. Each spelling is the listed platform, and what runs next (the emulation check) is given that one."""
    from envbuild.image import build as imagebuild

    asked = []
    monkeypatch.setattr(imagebuild, "require_runnable", lambda p, what: asked.append((p, what)) or False)
    cpu = _fixed_cpu()
    for spelling in SPELLINGS[listed]:
        assert imagebuild.check_platform(cpu, spelling) is False
        assert cpu.listed(spelling) == listed
    assert {(str(p), type(p)) for p, _ in asked} == {(listed, Platform)}
    assert {what for _, what in asked} == {f"building cpu for {listed}"}


def test_check_platform_runs_this_hosts_platform_in_any_spelling():
    """Without a stand-in: this host's own architecture needs no emulation, whichever way it is written."""
    from envbuild.image import build as imagebuild
    from envbuild.core.platform import host_platform

    here = host_platform()
    if here not in ("linux/amd64", "linux/arm64"):
        pytest.fail(f"this test runs on a linux/amd64 or linux/arm64 host, not {here}")
    for spelling in SPELLINGS[here]:
        assert imagebuild.check_platform(_fixed_cpu(), spelling) is False


def test_a_platform_the_backend_does_not_list_is_refused_once_alike():
    cpu = _fixed_cpu()
    for spelling in ("linux/ppc64le", "s390x"):
        with pytest.raises(InvalidInput, match=r"backend cpu lists linux/amd64, linux/arm64 \(matrix.yaml"):
            cpu.listed(spelling)
    with pytest.raises(InvalidInput, match="lists linux/amd64, linux/arm64"):
        cpu.listed("linux/arm/v7")


def test_the_stages_take_the_platform_in_any_spelling(tmp_path):
    """A library caller's string is read at the boundary: the build's options, the lock's file name, publish's
    platforms and the CI matrix all hold the one value."""
    from envbuild.image.plan import BuildOptions
    from envbuild.image.lockstate import path, platforms
    from envbuild.maintain.ci import job, runs_on
    from envbuild.matrix import load
    from envbuild.ship.shared import PublishOptions

    opts = BuildOptions(platform="linux/aarch64", locks_dir=tmp_path)
    assert isinstance(opts.platform, Platform) and opts.platform == "linux/arm64"
    cpu = _fixed_cpu()
    assert path(opts, cpu, opts.platform) == tmp_path / "cpu" / "linux-arm64.txt"
    assert path(opts, cpu, "linux/arm64/v8") == tmp_path / "cpu" / "linux-arm64.txt"
    assert platforms(cpu, opts) == ["linux/arm64"] and platforms(cpu) == ["linux/amd64", "linux/arm64"]
    assert PublishOptions(platforms=("aarch64", "linux/x86_64")).platforms == ("linux/arm64", "linux/amd64")
    m = load(FIXED, with_facts=False)
    assert job(m, cpu, Platform.parse("aarch64"))["arch"] == "arm64" and runs_on(cpu, "linux/aarch64") == ["ubuntu-24.04-arm"]


def test_no_platform_is_split_by_hand_outside_its_module():
    """core/platform.py is where a platform's parts are read; elsewhere the value's os, arch, stem and oci."""
    import re
    from pathlib import Path

    import envbuild

    root = Path(envbuild.__file__).parent
    by_hand = re.compile(r"\b(?:\w*platform\w*|plat|p)(?:\[[^\]]*\])?\.(?:r?split|r?partition)\(\s*['\"]/['\"]")
    found = [f"{f.relative_to(root)}:{n}" for f in root.rglob("*.py") if f.name != "platform.py" or f.parent.name != "core"
             for n, line in enumerate(f.read_text().splitlines(), 1) if by_hand.search(line)]
    assert found == []


def _case(text: str, draw_upper: list[bool]) -> str:
    return "".join(c.upper() if up else c for c, up in zip(text, draw_upper + [False] * len(text)))


@st.composite
def _spelling(draw) -> tuple[str, str]:
    """(a platform envbuild builds for, one of Docker's spellings of it): any case, aarch64/x86_64, the variant
    Docker drops, with or without the OS."""
    want = draw(st.sampled_from(sorted(SPELLINGS)))
    arch = want.split("/")[1]
    name = draw(st.sampled_from({"amd64": ["amd64", "x86_64", "x86-64"], "arm64": ["arm64", "aarch64"]}.get(arch, [arch])))
    variant = draw(st.sampled_from(["", *{"amd64": ["/v1"], "arm64": ["/v8", "/8"]}.get(arch, [])]))
    text = draw(st.sampled_from(["linux/", ""])) + name + variant
    if text.startswith("/"):
        text = text[1:]
    return want, _case(text, draw(st.lists(st.booleans(), max_size=len(text))))


@settings(max_examples=int(os.environ.get("ENVBUILD_PROPERTY_EXAMPLES", "50")), deadline=None,
          derandomize=bool(os.environ.get("CI")))
@given(_spelling())
def test_every_spelling_parses_to_one_value_that_prints_one_way(case):
    want, text = case
    found = Platform.parse(text)
    assert found == Platform.parse(want) == Platform(text) == Platform.normal(text)
    assert (str(found), found.oci, repr(found)) == (want, want, f"Platform({want!r})")
    assert found.stem == want.replace("/", "-") and f"{found.os}/{found.arch}" == want and not found.variant
    assert parse_list(f"{text},{want}") == (want,)
    assert canonical(text) == want


@pytest.mark.parametrize("text", ["linux/ａｍｄ64", "linux/amd６４", "linux/arm٦٤", "ｌｉｎｕｘ/amd64", "linux/amd64\u200b"])
def test_a_platform_in_other_scripts_is_refused(text):
    assert Platform.normal(text) is None
    with pytest.raises(InvalidPlatform):
        Platform.parse(text)


def test_a_long_platform_is_quoted_capped():
    with pytest.raises(InvalidPlatform) as caught:
        Platform.parse("x" * 10_000)
    assert len(str(caught.value)) < 500 and "(9800 more characters)" in str(caught.value)
