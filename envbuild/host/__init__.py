"""Questions about a host, this one or one described: detect (what is here), doctor (can it build, smoke, run,
publish), pick (the one image that runs there, in its runtime's words), launch (those words), engine_setup
(installing or starting an engine: administration, kept apart from the engine itself)."""
