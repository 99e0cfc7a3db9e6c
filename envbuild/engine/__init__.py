"""The engines behind one door (docker.EngineAPI): Docker, Podman, which one a command gets, and what each
engine decides about running and building."""
