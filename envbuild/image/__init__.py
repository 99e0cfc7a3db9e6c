"""The image pipeline of one cell: its lock (resolve, ensure, check; the lock format and staleness) then its
build (the plan, its content key, BuildKit, the records of good builds)."""
