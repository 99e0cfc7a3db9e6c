"""`python -m envbuild`: the same as the `envbuild` command."""

from envbuild.cli import main

main()
