"""Image reference forms and what Docker reads them as (the normalised name, None: refused). One table for the
unit test (envbuild.imageref against it) and the engine test (the engine against it)."""

D = "sha256:" + "ab" * 32

FORMS = [
    # Docker Hub short names
    ("debian", "docker.io/library/debian"),
    ("debian:12", "docker.io/library/debian:12"),
    ("debian:bookworm-slim", "docker.io/library/debian:bookworm-slim"),
    ("library/debian:12", "docker.io/library/debian:12"),
    ("org/name", "docker.io/org/name"),
    ("org/sub/name:v1.2_3-rc", "docker.io/org/sub/name:v1.2_3-rc"),
    ("docker.io/debian", "docker.io/library/debian"),
    ("docker.io/org/name:t", "docker.io/org/name:t"),
    ("index.docker.io/debian:12", "docker.io/library/debian:12"),
    ("index.docker.io/org/x", "docker.io/org/x"),
    # a bare host is an image on Docker Hub, whatever it looks like
    ("ghcr.io", "docker.io/library/ghcr.io"),
    ("ghcr.io:cpu", "docker.io/library/ghcr.io:cpu"),
    ("localhost", "docker.io/library/localhost"),
    ("localhost:5000", "docker.io/library/localhost:5000"),
    ("registry:5000", "docker.io/library/registry:5000"),
    # hosts: a '.', a port, or localhost
    ("ghcr.io/org/envbuild:cpu", "ghcr.io/org/envbuild:cpu"),
    ("localhost/x", "localhost/x"),
    ("localhost:5000/envbuild:cpu", "localhost:5000/envbuild:cpu"),
    ("127.0.0.1:5000/v/cuda:13", "127.0.0.1:5000/v/cuda:13"),
    ("registry:5000/team/x", "registry:5000/team/x"),
    ("my-registry.example.com/a/b/c/d:t", "my-registry.example.com/a/b/c/d:t"),
    ("A.b/c", "A.b/c"),
    ("registry/team/x", "docker.io/registry/team/x"),
    # separators
    ("a__b", "docker.io/library/a__b"),
    ("a--b.c_d", "docker.io/library/a--b.c_d"),
    ("a_b/c.d", "docker.io/a_b/c.d"),
    # tags
    ("x:_tag", "docker.io/library/x:_tag"),
    ("x:" + "t" * 128, "docker.io/library/x:" + "t" * 128),
    ("x:1039", "docker.io/library/x:1039"),
    ("localhost:5000/x:5000", "localhost:5000/x:5000"),
    # digests
    (f"debian@{D}", f"docker.io/library/debian@{D}"),
    (f"debian:12@{D}", f"docker.io/library/debian:12@{D}"),
    (f"ghcr.io/org/x@{D}", f"ghcr.io/org/x@{D}"),
    (f"localhost:5000/x:1@{D}", f"localhost:5000/x:1@{D}"),
    # refused
    ("", None),
    ("Debian", None),
    ("org/Name", None),
    ("Foo/bar:1", None),
    ("a___b", None),
    ("-a", None),
    ("a-", None),
    ("a/", None),
    ("/a", None),
    ("a//b", None),
    ("x:", None),
    (":x", None),
    ("x:-t", None),
    ("x:.t", None),
    ("x:" + "t" * 129, None),
    ("x::t", None),
    ("x:t:u", None),
    ("x@sha256:abc", None),
    ("x@" + D + "@" + D, None),
    ("[::1]:5000/x:1", None),
    ("host:port/x", None),
    ("-host.io/x", None),
    ("a" * 64, None),
    ("x y", None),
    ("x/y z:1", None),
    ("ghcr.io/org/" + "n" * 250, None),
]
