"""Keeping the matrix current, for its maintainers: sources (outdated, bump), ci (the job matrices of the
workflows), docgen (the reference pages made from the CLI)."""
