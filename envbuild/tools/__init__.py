"""Beside the stages, using them: detect and doctor (this host), venv (a native environment, `env`), run (work in an
image), sources (outdated, bump), site (the status page), report (what commands print), ci (job matrices), clean and
engine_setup (installing or starting a Docker engine: administration, kept apart from the engine itself)."""
