"""The envbuild command line: a thin layer over the library; each command parses, calls one library function and
prints.

app.py holds the group (global options, help, error handling); options.py the option types and groups the commands
share; the commands live by their help group: use.py (Use an image), build.py (Build and test), publish.py and
maintain.py (Publish and maintain); completion.py completes backends and platforms. The choices behind --backend
are host/pick.py's. app.COMMANDS is the one table of the commands (name, module, help group, line, --engine): a
start imports only the module of the command it runs (`--help` none), and a command imports what it uses inside
itself, so start-up stays fast (benchmarks/bench.py measures it; CONTRIBUTING.md, "Imports").
"""

from envbuild.cli.app import cli, main

__all__ = ["cli", "main"]
