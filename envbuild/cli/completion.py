"""Shell completion: backend names and platforms from the matrix, wired to every command that takes them."""

from __future__ import annotations

import click


def _matrix_for_completion(ctx: click.Context):
    """The matrix a completion reads (--matrix when given before the word), or None when it cannot be read."""
    try:
        root = ctx.find_root()
        path = ctx.params.get("matrix_path") or (root.params.get("matrix_path") if root is not ctx else None)
        from envbuild import matrix  # not options.load: a completion says nothing on the terminal

        return matrix.load(path or matrix.default_path(), tuple(ctx.params.get("overrides") or ()))
    except Exception:  # noqa: BLE001 - a completion never fails the shell: no candidates instead
        return None


def _complete_backend(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """Backend names from the matrix (with what each is, for zsh and fish), and 'all'/'auto' where taken."""
    from click.shell_completion import CompletionItem

    m = _matrix_for_completion(ctx)
    if m is None:
        return []
    from envbuild.matrix.names import human

    items = [CompletionItem(b.name, help=human(b)) for b in m.backends]
    if param.multiple or param.default == "auto":
        items += [CompletionItem("auto", help="the one detected here")]
    if param.multiple:
        items += [CompletionItem("all", help="every containerizable backend")]
    done, _, word = incomplete.rpartition(",")  # --backend cpu,ro: complete the last name, keep the others
    prefix = f"{done}," if done else ""
    return [CompletionItem(prefix + i.value, help=i.help) for i in items if i.value.startswith(word.lower())]


def _complete_platform(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """The platforms the matrix's backends list (linux/amd64, linux/arm64)."""
    from click.shell_completion import CompletionItem

    m = _matrix_for_completion(ctx)
    platforms = sorted({p for b in m.backends for p in b.platforms}) if m is not None else []
    return [CompletionItem(p) for p in platforms if p.startswith(incomplete)]


def wire_completion(command: click.Command) -> None:
    """Backend names and platforms complete from the matrix in every command that takes them (set as each command
    is declared, for each --backend/-b, a BACKEND argument and --platform)."""
    for param in command.params:
        if param.name in ("backend", "backends", "backend_arg") and param._custom_shell_complete is None:
            param._custom_shell_complete = _complete_backend
        elif param.name in ("platform", "platforms") and param._custom_shell_complete is None:
            param._custom_shell_complete = _complete_platform
