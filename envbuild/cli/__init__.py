"""The envbuild command line: a thin layer over the library; each command parses, calls one library function and
prints.

app.py holds the group (global options, help, error handling); options.py the option types and groups the commands
share; the commands live by their help group: use.py (Use an image), build.py (Build and test), publish.py and
maintain.py (Publish and maintain); completion.py completes backends and platforms. The choices behind --backend
are host/pick.py's. At module level cli/ imports click and little else: a command imports what it uses inside
itself, so `envbuild --help` stays fast (benchmarks/bench.py measures it; CONTRIBUTING.md, "Imports").
"""

from envbuild.cli.app import ENGINE_COMMANDS, cli, engine_option, main
from envbuild.cli import build, maintain, publish, use  # noqa: F401 - each declares its commands on `cli`
from envbuild.cli.completion import wire_completion

wire_completion(cli)
for _name in ENGINE_COMMANDS:  # after every command is declared
    engine_option(cli.commands[_name])

__all__ = ["cli", "main"]
