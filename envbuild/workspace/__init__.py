"""What envbuild keeps on the user's machine: run (work in an image), venv (a native environment, `env`), base (a
base image made from a distribution's archive, for sites that reach no registry), clean (what envbuild left)."""
