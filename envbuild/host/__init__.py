"""Beside the pipeline: what this host has (detect), whether it can build and smoke a backend (doctor), and a
native environment where no container can go (venv, the `env` command)."""
