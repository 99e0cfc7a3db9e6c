"""A site's settings in one place (core/settings.py): the user's file < the project's < ENVBUILD_* < flags, each
value with where it came from; unknown keys refused with file:line; index mirrors applied in one place, never in
the image's content key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from support.constants import MATRIX
from support.properties import FILES, KINDS, SECRET, exits_cleanly, file_bytes, own_error, plant

from envbuild.core import settings
from envbuild.core.errors import InvalidInput
from envbuild.core.settings import Settings, mirror_url, original_url

CPU = "https://download.pytorch.org/whl/cpu"


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A user's config folder and a project (matrix.yaml + envbuild.toml) in tmp_path; cwd is the project."""
    xdg, project = tmp_path / "xdg", tmp_path / "project"
    (xdg / "envbuild").mkdir(parents=True)
    project.mkdir()
    shutil.copy(MATRIX, project / "matrix.yaml")
    for name in ("user-wheels", "project-wheels", "env-wheels", "flag-wheels"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.chdir(project)
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_precedence_user_then_project_then_environment_then_flag(site):
    user = write(site / "xdg" / "envbuild" / "config.toml",
                 f'wheelhouse = "{site}/user-wheels"\nregistry = "user.corp/ml/envbuild"\n'
                 '[registry_mirrors]\n"docker.io" = "user-mirror.corp:5000"\n"quay.io" = "quay-mirror.corp"\n')
    project = write(site / "project" / "envbuild.toml",
                    f'# the team\'s\nwheelhouse = "{site}/project-wheels"\n\n[registry_mirrors]\n'
                    '"docker.io" = "team-mirror.corp:5000"\n')
    matrix = str(site / "project" / "matrix.yaml")

    files = settings.load(matrix, environ={"XDG_CONFIG_HOME": str(site / "xdg")})
    assert files.files == (str(user), str(project))
    assert files.get("wheelhouse") == f"{site}/project-wheels"
    assert files.origin("wheelhouse") == f"{project}:2 (wheelhouse)"
    assert files.get("registry") == "user.corp/ml/envbuild"  # only the user's says it
    assert files.origin("registry") == f"{user}:2 (registry)"
    # a map merges entry by entry: the project's docker.io, the user's quay.io
    assert files.get("registry_mirrors") == {"docker.io": "team-mirror.corp:5000", "quay.io": "quay-mirror.corp"}
    assert files.origin("registry_mirrors", "docker.io") == f'{project}:5 (registry_mirrors."docker.io")'
    assert files.origin("registry_mirrors", "quay.io") == f'{user}:5 (registry_mirrors."quay.io")'

    env = {"XDG_CONFIG_HOME": str(site / "xdg"), "ENVBUILD_WHEELHOUSE": f"{site}/env-wheels",
           "ENVBUILD_REGISTRY_MIRRORS": "docker.io=env-mirror.corp"}
    environment = settings.load(matrix, environ=env)
    assert environment.get("wheelhouse") == f"{site}/env-wheels"
    assert environment.origin("wheelhouse") == "$ENVBUILD_WHEELHOUSE"
    assert environment.registry_mirrors[0] == "docker.io=env-mirror.corp"

    flagged = environment.with_flags(wheelhouse=site / "flag-wheels", registry_mirrors=("docker.io=flag-mirror.corp",))
    assert flagged.get("wheelhouse") == f"{site}/flag-wheels" and flagged.origin("wheelhouse") == "--wheelhouse"
    assert flagged.registry_mirrors[0] == "docker.io=flag-mirror.corp"
    assert flagged.origin("registry_mirrors", "docker.io") == "--mirror docker.io=flag-mirror.corp"
    assert flagged.path("wheelhouse") == site / "flag-wheels"


def test_a_relative_path_is_the_files_folders(site):
    write(site / "project" / "envbuild.toml", 'wheelhouse = "wheels"\n')
    (site / "project" / "wheels").mkdir()
    got = settings.load(site / "project" / "matrix.yaml")
    assert got.path("wheelhouse") == site / "project" / "wheels"


@pytest.mark.parametrize("text, line, said", [
    ('wheelhouse = "w"\nwheelhose = "x"\n', 2, "unknown key 'wheelhose' (did you mean 'wheelhouse'?)"),
    ('\n[index_mirror]\n"https://pypi.org/simple" = "https://devpi.corp/root/pypi/+simple"\n', 2,
     "unknown key 'index_mirror' (did you mean 'index_mirrors'?)"),
    ('[index_mirrors]\n"https://pypi.org/simple" = "ftp://devpi.corp"\n', 2, "ftp://devpi.corp is not an http(s) URL"),
    ('[index_mirrors]\n"https://pypi.org/simple" = "https://m.corp/$(id)"\n', 2, "is not an http(s) URL"),
    ('registry = 5\n', 1, "registry must be a string"),
    ('[registry_mirrors]\n"docker.io" = "not a host"\n', 2, "registry_mirrors"),
    ('[base_images]\ncpu = "Not An Image"\n', 2, "is not an image reference"),
    ('wheelhouse = [\n', None, "not valid TOML"),
])
def test_an_unknown_key_or_a_bad_value_is_refused_with_its_file_and_line(site, invoke, text, line, said):
    path = write(site / "project" / "envbuild.toml", text)
    with pytest.raises(InvalidInput) as caught:
        settings.load("matrix.yaml")
    assert said in str(caught.value)
    if line:
        assert str(caught.value).startswith(f"{path.name}:{line}: ")
    result = invoke("config")  # the command says it the same way, exit 2
    assert result.exit_code == 2 and said in result.stderr


def test_a_bad_environment_value_is_refused_naming_the_variable(site, monkeypatch, invoke):
    monkeypatch.setenv("ENVBUILD_INDEX_MIRRORS", "https://pypi.org/simple")
    result = invoke("config")
    assert result.exit_code == 2
    assert "$ENVBUILD_INDEX_MIRRORS: https://pypi.org/simple: expected FROM=TO" in result.stderr


def test_a_path_that_is_not_there_is_said_with_where_it_was_set(site, invoke):
    write(site / "project" / "envbuild.toml", 'wheelhouse = "/nowhere/wheels"\n')
    result = invoke("lock", "--backend", "cpu", "--check")
    assert result.exit_code == 2
    assert "wheelhouse /nowhere/wheels (from envbuild.toml:1 (wheelhouse)): not a folder" in result.stderr


def test_config_shows_each_setting_and_where_it_came_from(site, monkeypatch, invoke):
    user = write(site / "xdg" / "envbuild" / "config.toml", 'registry = "user.corp/ml/envbuild"\n')
    write(site / "project" / "envbuild.toml",
          f'[index_mirrors]\n"{CPU}" = "https://pypi-mirror.corp/whl/cpu"\n[base_images]\ncpu = "debian:12"\n')
    secret = write(site / "netrc", "machine pypi-mirror.corp login me password hunter2-secret\n")
    monkeypatch.setenv("ENVBUILD_NETRC", str(secret))
    result = invoke("config")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert f"user settings: {user}" in out
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in out.splitlines()[3:]}
    assert rows["registry"] == ["user.corp/ml/envbuild", f"{user}:1 (registry)"]
    assert rows[f'index_mirrors."{CPU}"'] == ["https://pypi-mirror.corp/whl/cpu",
                                              f'envbuild.toml:2 (index_mirrors."{CPU}")']
    assert rows["base_images.cpu"] == ["debian:12", "envbuild.toml:4 (base_images.cpu)"]
    assert rows["netrc"] == [str(secret), "$ENVBUILD_NETRC"]
    assert rows["wheelhouse"] == ["-", "default"]
    assert "hunter2" not in result.output  # a netrc's path, never its content

    doc = json.loads(invoke("config", "--json").stdout)
    assert doc["files"]["user"] == {"path": str(user), "read": True}
    by_key = {r["key"]: r for r in doc["settings"]}
    assert by_key["netrc"]["origin"] == "$ENVBUILD_NETRC"
    assert by_key["base_images.cpu"]["value"] == "debian:12"


def test_the_sites_base_image_reaches_the_matrix_and_set_still_wins(site, invoke):
    write(site / "project" / "envbuild.toml", '[base_images]\ncpu = "mirror.corp:5000/library/python:3.12-slim"\n'
          'nosuchbackend = "debian:12"\n')  # a backend this matrix lacks: for another matrix, not an error
    shown = invoke("show", "cpu", "--json")
    assert json.loads(shown.stdout)["base_image"] == "mirror.corp:5000/library/python:3.12-slim"
    again = invoke("show", "cpu", "--json", "--set", "backends.cpu.base_image=debian:12")
    assert json.loads(again.stdout)["base_image"] == "debian:12"


def test_the_default_registry_comes_from_the_settings(site, invoke):
    write(site / "project" / "envbuild.toml", 'registry = "127.0.0.1:9/ml/envbuild"\n')
    result = invoke("doctor", "--backend", "cpu", "--publish", "--json")
    names = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert "127.0.0.1:9" in names["publish registry"]["detail"]


def test_mirror_url_takes_the_longest_index_at_a_path_boundary():
    mirrors = {"https://pypi.org/simple": "https://devpi.corp/root/pypi/+simple",
               CPU + "/": "https://pypi-mirror.corp/whl/cpu", "https://download.pytorch.org": "https://all.corp"}
    assert mirror_url(CPU, mirrors) == "https://pypi-mirror.corp/whl/cpu"
    assert mirror_url(CPU + "/torch/", mirrors) == "https://pypi-mirror.corp/whl/cpu/torch/"
    assert mirror_url("https://download.pytorch.org/whl/cu126", mirrors) == "https://all.corp/whl/cu126"
    assert mirror_url("https://download.pytorch.org/whl/cpu-other", mirrors) == "https://all.corp/whl/cpu-other"
    assert mirror_url("https://pypi.org/simplex", mirrors) == "https://pypi.org/simplex"  # not under the index
    assert mirror_url("https://files.pythonhosted.org/x.whl", mirrors) == "https://files.pythonhosted.org/x.whl"
    assert original_url("https://pypi-mirror.corp/whl/cpu/torch/", mirrors) == CPU + "/torch/"
    assert mirror_url(CPU, Settings().with_flags(index_mirrors=(f"{CPU}=https://m.corp/cpu",))) == "https://m.corp/cpu"


def test_an_index_mirror_changes_what_the_build_asks_not_the_content_key_nor_the_lock(tmp_path, buildkit_client):
    from envbuild.image.plan import BuildOptions, content_key, make_plan
    from envbuild.image.lockstate import inputs
    from envbuild.matrix import load

    m = load(MATRIX)
    cpu = m.backend("cpu")
    lock = b"# a lock\n"

    def plan_of(**opts):
        o = BuildOptions(context_dir=tmp_path / "ctx", locks_dir=tmp_path / "locks", **opts)
        plan = make_plan(m, cpu, o, None, lock=lock, write_cache=False)
        return plan, content_key(plan, o)

    plain, key = plan_of()
    mirrored, mirrored_key = plan_of(index_mirrors=((cpu.torch.index_url, "https://pypi-mirror.corp/whl/cpu"),),
                                     mirrors=("docker.io=mirror.corp:5000",))
    assert cpu.torch.index_url.encode() in plain.dockerfile
    assert b'--extra-index-url "https://pypi-mirror.corp/whl/cpu"' in mirrored.dockerfile  # what the build asks
    assert cpu.torch.index_url.encode() not in mirrored.dockerfile
    assert b"FROM mirror.corp:5000/" in mirrored.dockerfile
    assert mirrored_key == key  # the same image, through a mirror or not
    # the lock's inputs name the index itself: a lock made through a mirror is the same lock
    assert cpu.torch.index_url in inputs(m, cpu, "linux/amd64", None)["indexes"]
    assert plan_of(mirrors=())[1] == key


def test_a_flag_wins_over_the_projects_file_on_the_command_line(site, invoke):
    write(site / "project" / "envbuild.toml", 'wheelhouse = "/nowhere/wheels"\n')
    result = invoke("lock", "--backend", "cpu", "--check", "--wheelhouse", site / "flag-wheels")
    assert "wheelhouse" not in result.stderr  # the file's missing folder is never used: the flag's is
    bad = invoke("lock", "--backend", "cpu", "--check", "--index-mirror", "https://pypi.org/simple=ftp://m.corp")
    assert bad.exit_code == 2 and "--index-mirror: index_mirrors: ftp://m.corp is not an http(s) URL" in bad.stderr


def test_the_most_specific_registry_mirror_is_taken_whichever_layer_said_it():
    from envbuild.core.imageref import mirror

    site = Settings().layered({"registry_mirrors": {"docker.io/library": "lib.corp"}}, {})
    site = site.with_flags(registry_mirrors=("docker.io=hub.corp",))
    assert mirror("debian:12", site.registry_mirrors) == "lib.corp/debian:12"
    assert mirror("nvidia/cuda:12", site.registry_mirrors) == "hub.corp/nvidia/cuda:12"


# --- Files a pull request brings: envbuild.toml read as untrusted (issue 51) -----------------------------------

SETTINGS_TEXT = (b'wheelhouse = "wheels"\nbase_images = "lib.corp"\n\n[registry_mirrors]\n"docker.io" = "hub.corp"\n'
                 b'\n[index_mirrors]\n"https://download.pytorch.org/whl" = "https://mirror.corp/torch"\n')


def _project(tmp_path) -> Path:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    shutil.copy(MATRIX, project / "matrix.yaml")
    return project


@pytest.mark.parametrize("text, fragment", [
    ("a" + ".a" * 50_000 + " = 1\n", "envbuild.toml:1: a key of more than 16 dotted parts"),
    ('wheelhouse = "w"\n[t]\n' + "k." * 20 + "k = 1\n", "envbuild.toml:3: a key of more than 16 dotted parts"),
    ("a = " + "[" * 100_000 + "\n", "envbuild.toml:1: nested more than 16 deep"),
    ("a = " + "{b = " * 5_000 + "1" + "}" * 5_000 + "\n", "envbuild.toml:1: nested more than 16 deep"),
    ("[" * 3000 + "a" + "]" * 3000, "nested more than 16 deep"),
])
def test_a_settings_file_nested_or_dotted_past_reason_is_refused_before_parsing(tmp_path, text, fragment):
    """A 100 KB file of one dotted key took tomllib about 100 s (quadratic), deep nesting overflowed its stack
    (exit 70): both exit 2, said with the line, before tomllib sees them."""
    path = tmp_path / "envbuild.toml"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=fragment.replace(".", r"\.")):
        settings.read_file(path, "the project's settings", project=True)


def test_strings_and_comments_hold_any_dots_and_brackets():
    """What is inside a string or a comment is no key and no nesting: a URL of many dots, brackets in a value."""
    text = ('# a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r [[[[[[[[[[[[[[[[[[[[\n[index_mirrors]\n'
            '"https://a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r/s" = "https://m.corp/[[[[[[[[[[[[[[[[[[[[["\n'
            "x = '''\n" + "[" * 40 + "\n'''\n" + 'y = """\\"""' + "." * 40 + '"""\n' + "z = [1.5, 2.5, 3.5]\n")
    assert settings._toml_shape(text) is None


@pytest.mark.parametrize("kind", ["link out", "loop", "fifo", "link to nothing"])
def test_a_project_settings_file_that_is_no_regular_file_in_its_folder_exits_2_unquoted(tmp_path, invoke, kind):
    project = _project(tmp_path)
    plant(project / "envbuild.toml", kind, b"", tmp_path / "private.toml")
    result = invoke("config", "--matrix", project / "matrix.yaml")
    assert result.exit_code == 2 and "envbuild.toml" in result.stderr and "give a regular file" in result.stderr
    assert SECRET not in result.output, result.output


def test_the_users_own_settings_may_be_a_link_to_their_dotfiles(tmp_path, monkeypatch):
    """The user's file is theirs, not a pull request's: a link to a dotfiles folder is followed."""
    dotfiles, xdg = tmp_path / "dotfiles", tmp_path / "xdg"
    dotfiles.mkdir()
    (xdg / "envbuild").mkdir(parents=True)
    (dotfiles / "envbuild.toml").write_text('registry = "ghcr.io/me/images"\n')
    (xdg / "envbuild" / "config.toml").symlink_to(dotfiles / "envbuild.toml")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert settings.load(_project(tmp_path) / "matrix.yaml").values["registry"] == "ghcr.io/me/images"


@FILES
@given(file_bytes(SETTINGS_TEXT))
def test_any_bytes_as_a_settings_file_are_read_or_refused(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("settings") / "envbuild.toml"
    path.write_bytes(data)
    own_error(lambda: settings.read_file(path, "the project's settings", project=True))


@FILES
@given(file_bytes(SETTINGS_TEXT), st.sampled_from(KINDS))
def test_any_envbuild_toml_exits_0_1_or_2_and_prints_no_secret(tmp_path_factory, invoke, data, kind):
    tmp = tmp_path_factory.mktemp("site")
    project = _project(tmp)
    plant(project / "envbuild.toml", kind, data, tmp / "private.toml")
    exits_cleanly(invoke("config", "--matrix", project / "matrix.yaml"))


# --- a site's matrix fields, and `envbuild config set` --------------------------------------------------------


def test_matrix_fields_in_the_settings_reach_every_command_with_their_origin(site, invoke):
    user = write(site / "xdg" / "envbuild" / "config.toml", '[matrix.cpu]\ntorch.version = "2.13.0"\n')
    write(site / "project" / "envbuild.toml", '# the team\n[matrix]\nimage.repository = "registry.corp/ml/envbuild"\n'
          f'torch.index_url = "{CPU}"\n')
    shown = json.loads(invoke("show", "cpu", "--json").stdout)
    assert shown["torch"]["version"] == "2.13.0"
    assert shown["tags"][0].startswith("registry.corp/ml/envbuild:")  # smoke after build looks for the same image
    cuda = json.loads(invoke("show", "cuda", "--json").stdout)
    assert cuda["torch"]["index_url"] == CPU  # [matrix] torch.*: every backend's
    assert cuda["torch"]["version"] != "2.13.0"  # [matrix.cpu]: cpu's alone
    again = json.loads(invoke("show", "cpu", "--json", "--set", "backends.cpu.torch.version=2.12.0").stdout)
    assert again["torch"]["version"] == "2.12.0"  # --set still wins
    out = invoke("config").stdout
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in out.splitlines()[3:]}
    assert rows["matrix.cpu.torch.version"] == ["2.13.0", f"{user}:2 (matrix.cpu.torch.version)"]
    assert rows["matrix.image.repository"] == ["registry.corp/ml/envbuild", "envbuild.toml:3 (matrix.image.repository)"]


@pytest.mark.parametrize("text, said", [
    ('[matrix.cpu]\ntorch.versoin = "2.13.0"\n', "envbuild.toml:2 (matrix.cpu.torch.versoin): unknown key 'versoin' in "
                                                 "backends.cpu.torch (did you mean 'version'?)"),
    ('[matrix.cpuu]\ntorch.version = "2.13.0"\n', "envbuild.toml:2 (matrix.cpuu.torch.version): unknown backend 'cpuu' "
                                                  "(did you mean 'cpu'?)"),
    ('[matrix]\ntorch.version = {a = [{b = 1}]}\n', "envbuild.toml:2: matrix.torch.version.a: expected a string"),
])
def test_a_matrix_field_that_names_nothing_is_refused_with_its_file_and_line(site, invoke, text, said):
    write(site / "project" / "envbuild.toml", text)
    for args in (("config",), ("show", "cpu")):
        result = invoke(*args)
        assert result.exit_code == 2 and said in result.stderr, result.stderr


def test_config_set_writes_the_users_file_keeping_its_other_lines_and_unset_removes(site, invoke):
    user = write(site / "xdg" / "envbuild" / "config.toml", '# mine\nregistry = "user.corp/ml/envbuild"\n\n'
                 '[index_mirrors]\n"https://pypi.org/simple" = "https://devpi.corp/simple"\n')
    assert invoke("config", "set", "torch.version", "2.13.0", "--backend", "cpu").exit_code == 0
    assert invoke("config", "set", "wheelhouse", str(site / "user-wheels")).exit_code == 0
    assert invoke("config", "set", "torch.version", "2.12.0", "--backend", "cpu").exit_code == 0  # replaced in place
    assert user.read_text() == ('# mine\nregistry = "user.corp/ml/envbuild"\n'
                                f'wheelhouse = "{site / "user-wheels"}"\n\n'
                                '[index_mirrors]\n"https://pypi.org/simple" = "https://devpi.corp/simple"\n\n'
                                '[matrix.cpu]\ntorch.version = "2.12.0"\n')
    assert json.loads(invoke("show", "cpu", "--json").stdout)["torch"]["version"] == "2.12.0"
    assert invoke("config", "unset", "torch.version", "--backend", "cpu").exit_code == 0
    assert "torch.version =" not in user.read_text() and "# mine" in user.read_text()
    assert not (site / "project" / "envbuild.toml").exists()


def test_config_set_project_writes_envbuild_toml_and_refuses_a_field_that_names_nothing(site, invoke):
    ok = invoke("config", "set", "image.repository", "registry.corp/ml/envbuild", "--project")
    assert ok.exit_code == 0, ok.stderr
    project = site / "project" / "envbuild.toml"
    assert project.read_text() == '[matrix]\nimage.repository = "registry.corp/ml/envbuild"\n'
    for args, said in ((("torch.versoin", "2.13.0", "--backend", "cpu"), "did you mean 'version'?"),
                       (("torch.version", "2.13.0", "--backend", "cpuu"), "unknown backend 'cpuu'"),
                       (("wheelhous", "/srv"), "unknown setting 'wheelhous' (did you mean 'wheelhouse'?)"),
                       (("registry", "Not A Repo"), "registry"),
                       (("wheelhouse", "/srv", "--backend", "cpu"), "leave out --backend")):
        bad = invoke("config", "set", *args, "--project")
        assert bad.exit_code == 2 and said in bad.stderr, (args, bad.stderr)
    assert project.read_text() == '[matrix]\nimage.repository = "registry.corp/ml/envbuild"\n'  # left as it was


@pytest.mark.parametrize("key, backend, table, toml_key, entry", [
    ("wheelhouse", None, (), "wheelhouse", None),
    ("index_mirrors.https://pypi.org/simple", None, ("index_mirrors",), '"https://pypi.org/simple"', "https://pypi.org/simple"),
    ("torch.version", "cpu", ("matrix", "cpu"), "torch.version", "cpu.torch.version"),
    ("backends.cpu.base_image", None, ("matrix", "cpu"), "base_image", "cpu.base_image"),
    ("matrix.image.repository", None, ("matrix",), "image.repository", "image.repository"),
    ("torch.index_url", None, ("matrix",), "torch.index_url", "torch.index_url"),
])
def test_where_config_set_writes_each_kind_of_key(key, backend, table, toml_key, entry):
    found = settings.place(key, backend)
    assert (found.table, found.key, found.entry) == (table, toml_key, entry)


# --- issue 51: a password in a mirror is never quoted, whichever layer said it ---------------------------------------

@pytest.mark.parametrize("value", ["bob:S3cret@mirror.corp:5000", "bob:S3cret@mirror.corp:5000/hub x",
                                   "https://bob:S3cret@mirror.corp:5000"])
def test_a_registry_mirror_with_a_password_is_refused_without_quoting_it(site, monkeypatch, invoke, value):
    """A registry mirror has no userinfo (the engine's credentials log in); the refusal quotes it masked: in the
    error's own text (a record, a log), not only where the output layer prints it."""
    write(site / "project" / "envbuild.toml", f'[registry_mirrors]\n"docker.io" = "{value}"\n')
    with pytest.raises(InvalidInput) as caught:
        settings.load("matrix.yaml")
    assert "S3cret" not in str(caught.value) and "***@mirror.corp" in str(caught.value)
    assert str(caught.value).startswith("envbuild.toml:2: registry_mirrors: docker.io = ")
    result = invoke("config")
    assert result.exit_code == 2 and "S3cret" not in result.output
    (site / "project" / "envbuild.toml").unlink()
    monkeypatch.setenv("ENVBUILD_REGISTRY_MIRRORS", f"docker.io={value.split()[0]}")
    result = invoke("config", "--json")
    assert result.exit_code == 2 and "S3cret" not in result.output and "***@mirror.corp" in result.output
    monkeypatch.delenv("ENVBUILD_REGISTRY_MIRRORS")
    result = invoke("lock", "--backend", "cpu", "--check", "--mirror", f"docker.io={value}")
    assert result.exit_code == 2 and "S3cret" not in result.output and "***@mirror.corp" in result.output


def test_an_index_mirror_value_that_is_no_url_is_quoted_masked_and_capped(site):
    write(site / "project" / "envbuild.toml", '[index_mirrors]\n"https://pypi.org/simple" = "bob:S3cret@mirror.corp/simple"\n')
    with pytest.raises(InvalidInput) as caught:
        settings.load("matrix.yaml")
    assert "S3cret" not in str(caught.value) and "is not an http(s) URL" in str(caught.value)
    write(site / "project" / "envbuild.toml", f'[index_mirrors]\n"https://pypi.org/simple" = "{"x" * 10_000}"\n')
    with pytest.raises(InvalidInput) as caught:
        settings.load("matrix.yaml")
    assert len(str(caught.value)) < 500 and "more characters" in str(caught.value)
