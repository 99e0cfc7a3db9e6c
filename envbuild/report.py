"""Human and machine-readable output: tables, backend descriptions, smoke summaries, JUnit."""

from __future__ import annotations

import shlex
from typing import Any

from .matrix import Backend, Matrix, not_containerizable_message


def backend_summary(m: Matrix, b: Backend) -> dict[str, Any]:
    return {
        "backend": b.name,
        "device": b.device,
        "description": b.description,
        "containerizable": b.containerizable,
        "base_image": b.base_image or "-",
        "torch": b.torch.version + (" (base image)" if b.torch.source == "base" else ""),
        "plugin": f"{b.plugin.package}=={b.plugin.version}" if b.plugin else "-",
    }


def run_command(m: Matrix, b: Backend, image: str | None = None, command: str = "envbuild-probe") -> str:
    image = image or m.tags(b)[0]
    return shlex.join(["docker", "run", "--rm", *b.run.docker_args(), image, *shlex.split(command)])


def backend_detail(m: Matrix, b: Backend) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "backend": b.name,
        "description": b.description,
        "device": b.device,
        "containerizable": b.containerizable,
    }
    if not b.containerizable:
        detail["reason"] = not_containerizable_message(b)
    detail |= {
        "base_image": b.base_image,
        "platforms": list(b.platforms),
        "torch": {"version": b.torch.version, "source": b.torch.source, "index_url": b.torch.index_url},
        "plugin": (
            {
                "package": b.plugin.package,
                "version": b.plugin.version,
                "source": b.plugin.source,
                "index_url": b.plugin.index_url,
                "pairing": b.plugin.pairing,
            }
            if b.plugin
            else None
        ),
        "transformers": m.transformers,
        "accelerate": m.accelerate,
        "import": b.import_module,
        "availability": b.availability,
        "env": dict(b.env),
        "docker_run_flags": b.run.docker_args(),
        "runs_on": list(b.runs_on),
    }
    if b.containerizable:
        detail["tags"] = m.tags(b)
        detail["docker_run"] = run_command(m, b)
    return detail


def describe(detail: dict[str, Any]) -> str:
    lines = [f"{detail['backend']}: {detail['description']} (device string '{detail['device']}')"]
    if not detail["containerizable"]:
        lines.append(f"  not containerizable: {detail['reason']}")
    for key in ("base_image", "platforms", "torch", "plugin", "transformers", "accelerate", "import", "availability", "env", "tags", "runs_on"):
        value = detail.get(key)
        if value in (None, [], {}):
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items() if v is not None)
        elif isinstance(value, list):
            value = ", ".join(value)
        lines.append(f"  {key + ':':<14}{value}")
    if detail.get("docker_run"):
        flags = detail["docker_run_flags"]
        lines.append(f"  {'run flags:':<14}{shlex.join(flags) if flags else '(none needed)'}")
        lines.append(f"  {'docker run:':<14}{detail['docker_run']}")
    return "\n".join(lines)


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    out = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(out)
